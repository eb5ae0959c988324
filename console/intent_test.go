package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	paymentsv1 "github.com/paymentsd/paymentsd/gen/payments/v1"
)

// A record that names an intent links to it; the intent is shown to an
// operator by its owner and id, and to no one for another owner.
func TestIntent_LinkedFromItsRecord(t *testing.T) {
	f := start(t)
	const id = "pi_0123456789abcdef01234567"
	if err := f.intents.CreateIntent(context.Background(), principal, &paymentsv1.PaymentIntent{Id: id, Amount: "12.34"}); err != nil {
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
	for _, q := range []string{"principal=alice&id=pi_x", "principal=alice", "id=" + id, "principal=no%20such&id=" + id} {
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
