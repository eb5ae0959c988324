package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/auth"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

// A record that names an intent links to it; the intent is shown to an
// operator by its owner and id, and to no one for another owner.
func TestIntent_LinkedFromItsRecord(t *testing.T) {
	f := start(t)
	const id = "pi_0123456789abcdef01234567"
	if err := f.intents.CreateIntent(context.Background(), principal, "", &paymentsv1.PaymentIntent{Id: id, Amount: "12.34"}); err != nil {
		t.Fatal(err)
	}
	f.store(t, "order-1", created(t, id), true)
	link := "/intent?" + url.Values{"principal": {principal}, "id": {id}}.Encode()
	if a := f.call(t, "GET", "/"+query("order-1"), operatorToken, nil); !strings.Contains(a.body, `<a href="`+strings.ReplaceAll(link, "&", "&amp;")+`" id="intent">`+id+`</a>`) {
		t.Errorf("the record's page does not link to its intent:\n%s", a.body)
	}
	if a := f.call(t, "GET", link, operatorToken, nil); a.status != http.StatusOK || !strings.Contains(a.body, `&#34;amount&#34;: &#34;12.34&#34;`) {
		t.Errorf("the intent's page: %d\n%s", a.status, a.body)
	}
	api := "/api/v1/intent?" + url.Values{"principal": {principal}, "id": {id}}.Encode()
	a := f.call(t, "GET", api, operatorToken, nil)
	v := decode(t, a)
	if intent, _ := v["intent"].(map[string]any); a.status != http.StatusOK || v["found"] != true || intent["id"] != id || intent["amount"] != "12.34" {
		t.Errorf("the intent in the API: %d %s", a.status, a.body)
	}
	other := "/api/v1/intent?" + url.Values{"principal": {"bob"}, "id": {id}}.Encode()
	if a := f.call(t, "GET", other, operatorToken, nil); a.status != http.StatusNotFound || strings.Contains(a.body, "12.34") {
		t.Errorf("the intent for another principal: %d %s", a.status, a.body)
	}
	for _, q := range []string{"principal=alice&id=pi_x", "principal=alice", "principal=&id=" + id, "principal=no%20such&id=" + id} {
		if a := f.call(t, "GET", "/api/v1/intent?"+q, operatorToken, nil); a.status != http.StatusBadRequest {
			t.Errorf("GET /api/v1/intent?%s: %d %s", q, a.status, a.body)
		}
	}
	if a := f.call(t, "GET", link, "", nil); a.status != http.StatusUnauthorized || strings.Contains(a.body, "12.34") {
		t.Errorf("the intent without an operator key: %d", a.status)
	}
	if log := f.log.String(); !strings.Contains(log, `"msg":"console intent lookup","operator":"carol"`) {
		t.Errorf("no log line of the intent's lookup:\n%s", log)
	}
}

// Without a principal, the JSON API finds an intent by its id alone,
// whoever owns it, and names its owner.
func TestAPIIntent_ByIDAlone_NamesItsPrincipal(t *testing.T) {
	f := start(t)
	const alices, bobs = "pi_0123456789abcdef01234567", "pi_76543210fedcba9876543210"
	for owner, id := range map[string]string{principal: alices, "bob": bobs} {
		if err := f.intents.CreateIntent(context.Background(), owner, "", &paymentsv1.PaymentIntent{Id: id, Amount: "7"}); err != nil {
			t.Fatal(err)
		}
	}
	a := f.call(t, "GET", "/api/v1/intent?id="+bobs, operatorToken, nil)
	v := decode(t, a)
	if intent, _ := v["intent"].(map[string]any); a.status != http.StatusOK || v["found"] != true || v["principal"] != "bob" || intent["id"] != bobs {
		t.Errorf("bob's intent by its id alone: %d %s", a.status, a.body)
	}
	if log := f.log.String(); !strings.Contains(log, `"intent_id":"`+bobs+`","found":true,"principal_hash":"`+auth.PrincipalHash("bob")+`"`) {
		t.Errorf("the lookup's log line does not name the owner found:\n%s", log)
	}
	// Named, the principal is still the owner asked for: no "principal"
	// in the answer, and another's intent is absent.
	a = f.call(t, "GET", "/api/v1/intent?"+url.Values{"principal": {principal}, "id": {alices}}.Encode(), operatorToken, nil)
	if v := decode(t, a); a.status != http.StatusOK || v["principal"] != nil {
		t.Errorf("alice's intent by owner and id: %d %s", a.status, a.body)
	}
	a = f.call(t, "GET", "/api/v1/intent?id=pi_ffffffffffffffffffffffff", operatorToken, nil)
	if v := decode(t, a); a.status != http.StatusNotFound || v["found"] != false || !strings.Contains(v["message"].(string), "no principal has") {
		t.Errorf("a missing intent by its id alone: %d %s", a.status, a.body)
	}
	for _, q := range []string{"id=pi_x", "", "principal=&id=" + bobs} {
		if a := f.call(t, "GET", "/api/v1/intent?"+q, operatorToken, nil); a.status != http.StatusBadRequest {
			t.Errorf("GET /api/v1/intent?%s: %d %s", q, a.status, a.body)
		}
	}
	if a := f.call(t, "GET", "/api/v1/intent?id="+bobs, "", nil); a.status != http.StatusUnauthorized || strings.Contains(a.body, bobs) {
		t.Errorf("by id alone without an operator key: %d %s", a.status, a.body)
	}
}
