package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/console"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
)

// intentCreator is a store the tests write intents to.
type intentCreator interface {
	CreateIntent(ctx context.Context, owner, key string, pi *paymentsv1.PaymentIntent) error
}

// The parties of the seeded payments. payerB is written in upper case
// once: addresses match in any case.
const (
	token    = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
	payerA   = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
	payerB   = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
	merchant = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
)

// shop is what seedShop wrote: each intent's id by its key.
type shop map[string]string

// seedShop writes principal's intents into s: one payment under the keys
// order-7-try-1 and order-7-try-2 five minutes apart (a double charge);
// between them order-8, another amount, and order-9, another payer;
// order-6, the first payment again an hour before; and old, two days
// before. Bob makes the first payment too, a minute ago: he is not
// principal.
func seedShop(t *testing.T, s intentCreator, now time.Time) shop {
	t.Helper()
	ids := shop{}
	for i, p := range []struct {
		owner, key, amount, payer string
		ago                       time.Duration
	}{
		{principal, "order-7-try-2", "100000000", payerA, 0},
		{principal, "order-9", "100000000", payerB, time.Minute},
		{"bob", "order-7-try-1", "100000000", payerA, time.Minute},
		{principal, "order-8", "250000000", payerA, 2 * time.Minute},
		{principal, "order-7-try-1", "100000000", strings.ToUpper(payerA[2:]), 5 * time.Minute},
		{principal, "order-6", "100000000", payerA, time.Hour},
		{principal, "old", "100000000", payerA, 48 * time.Hour},
	} {
		if p.payer[1] != 'x' {
			p.payer = "0x" + p.payer
		}
		id := fmt.Sprintf("pi_%024x", i+1)
		at := now.Add(-p.ago)
		pi := &paymentsv1.PaymentIntent{Id: id, State: paymentsv1.State_STATE_CREATED, Version: 1, Chain: "evm:31337", Token: token,
			Payer: p.payer, Merchant: merchant, Amount: p.amount, CreateTime: timestamppb.New(at), ExpireTime: timestamppb.New(at.Add(15 * time.Minute))}
		if err := s.CreateIntent(context.Background(), p.owner, p.key, pi); err != nil {
			t.Fatal(err)
		}
		if p.owner == principal {
			ids[p.key] = id
		}
	}
	return ids
}

// ids are the ids of keys, in their order.
func (s shop) ids(keys ...string) []string {
	var ids []string
	for _, k := range keys {
		ids = append(ids, s[k])
	}
	return ids
}

// listed is a page of the JSON API's intents, as ids.
type listed struct {
	status int
	ids    []string
	keys   []string
	next   string
}

// listIntents asks the JSON API for the intents of query.
func (f *fixture) listIntents(t *testing.T, query url.Values) listed {
	t.Helper()
	a := f.call(t, "GET", "/api/v1/intents?"+query.Encode(), operatorToken, nil)
	var page struct {
		Principal string
		Intents   []struct{ ID, Key, State, Payer string }
		Next      string
	}
	if err := json.Unmarshal([]byte(a.body), &page); err != nil {
		t.Fatalf("GET /api/v1/intents?%s: %d %s", query.Encode(), a.status, a.body)
	}
	l := listed{status: a.status, next: page.Next}
	for _, i := range page.Intents {
		l.ids, l.keys = append(l.ids, i.ID), append(l.keys, i.Key)
		if i.State != "STATE_CREATED" || i.Payer == "" {
			t.Errorf("intent %s listed with state %q, payer %q", i.ID, i.State, i.Payer)
		}
	}
	return l
}

// groups asks the JSON API for the suspected double payments of query,
// each as its intents' ids.
func (f *fixture) groups(t *testing.T, query url.Values) [][]string {
	t.Helper()
	a := f.call(t, "GET", "/api/v1/duplicates?"+query.Encode(), operatorToken, nil)
	var answer struct {
		Groups []struct {
			Keys    int
			Intents []struct{ ID, Key string }
		}
		Note string
	}
	if err := json.Unmarshal([]byte(a.body), &answer); err != nil || a.status != http.StatusOK || !strings.Contains(answer.Note, "not a proof") {
		t.Fatalf("GET /api/v1/duplicates?%s: %d %s", query.Encode(), a.status, a.body)
	}
	groups := [][]string{}
	for _, g := range answer.Groups {
		var ids []string
		for _, i := range g.Intents {
			ids = append(ids, i.ID)
		}
		if g.Keys != len(ids) {
			t.Errorf("a group of %d intents under %d keys: %s", len(ids), g.Keys, a.body)
		}
		groups = append(groups, ids)
	}
	return groups
}

// checkShop checks f's answers about what seedShop wrote: the list
// newest first, filtered and paged; the double charge found, and the
// payments that differ, or lie apart, not.
func checkShop(t *testing.T, f *fixture, s shop) {
	t.Helper()
	alice := func(kv ...string) url.Values {
		q := url.Values{"principal": {principal}}
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		return q
	}
	day := s.ids("order-7-try-2", "order-9", "order-8", "order-7-try-1", "order-6")
	if l := f.listIntents(t, alice()); l.status != http.StatusOK || !slices.Equal(l.ids, day) || l.next != "" || l.keys[0] != "order-7-try-2" {
		t.Errorf("the last 24 hours: %+v, want %v and no next page", l, day)
	}
	var paged []string
	for q, pages := alice("limit", "2"), 0; ; pages++ {
		l := f.listIntents(t, q)
		if l.status != http.StatusOK || pages == 3 || len(l.ids) > 2 {
			t.Fatalf("page %d: %+v", pages, l)
		}
		paged = append(paged, l.ids...)
		if l.next == "" {
			break
		}
		q.Set("after", l.next)
	}
	if !slices.Equal(paged, day) {
		t.Errorf("paged 2 at a time: %v, want %v", paged, day)
	}
	for _, c := range []struct {
		query url.Values
		want  []string
	}{
		{alice("payer", strings.ToLower(payerB)), s.ids("order-9")},
		{alice("payer", payerA, "amount", "100000000"), s.ids("order-7-try-2", "order-7-try-1", "order-6")},
		{alice("merchant", strings.ToLower(merchant), "amount", "250000000"), s.ids("order-8")},
		{alice("since", "72h"), append(slices.Clone(day), s["old"])},
		{alice("since", "24h", "until", "4m"), s.ids("order-7-try-1", "order-6")},
		{alice("amount", "1"), nil},
		{url.Values{"principal": {"carol"}}, nil},
	} {
		if l := f.listIntents(t, c.query); l.status != http.StatusOK || !slices.Equal(l.ids, c.want) {
			t.Errorf("intents of %s: %+v, want %v", c.query.Encode(), l, c.want)
		}
	}

	twice := [][]string{s.ids("order-7-try-2", "order-7-try-1")}
	for _, c := range []struct {
		query url.Values
		want  [][]string
	}{
		{alice(), twice},
		{alice("window", "10m", "since", "3m"), twice}, // order-7-try-1 joins from before since, within the window
		{alice("window", "1m"), [][]string{}},
		{alice("window", "2h"), [][]string{s.ids("order-7-try-2", "order-7-try-1", "order-6")}},
		{alice("payer", payerB), [][]string{}},
		{url.Values{"principal": {"bob"}}, [][]string{}},
	} {
		if got := f.groups(t, c.query); !slices.EqualFunc(got, c.want, slices.Equal) {
			t.Errorf("duplicates of %s: %v, want %v", c.query.Encode(), got, c.want)
		}
	}
}

// On bbolt, a principal's intents are listed newest first, filtered and
// paged, and the same payment made under two keys is found, not two
// payments that differ; each search is logged by operator and principal
// hash.
func TestIntents_ListAndDuplicates(t *testing.T) {
	f := start(t)
	checkShop(t, f, seedShop(t, f.intents, time.Now()))
	log := f.log.String()
	for _, want := range []string{
		`"msg":"console intents list","operator":"carol","principal_hash":"` + auth.PrincipalHash(principal) + `","intents":5}`,
		`"msg":"console duplicates search","operator":"carol","principal_hash":"` + auth.PrincipalHash(principal) + `","groups":1}`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, `"alice"`) || strings.Contains(log, operatorToken) {
		t.Errorf("the log names the principal or holds a token:\n%s", log)
	}
}

// hrefs are the links in the cells of class name of body's tables.
func hrefs(body, name string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<td class="mono `+regexp.QuoteMeta(name)+`"><a href="([^"]*)">`).FindAllStringSubmatch(body, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// The page of a principal's intents shows them newest first, each
// linking to its key's page and its intent's, with a next page; the
// duplicates page shows the one group and says it is a suspect.
func TestIntentsPage_AndDuplicatesPage(t *testing.T) {
	f := start(t)
	s := seedShop(t, f.intents, time.Now())
	a := f.call(t, "GET", "/intents?principal="+principal+"&limit=3", operatorToken, nil)
	keyLinks, intentLinks := hrefs(a.body, "intent-key"), hrefs(a.body, "intent-id")
	wantKeys := []string{}
	for _, k := range []string{"order-7-try-2", "order-9", "order-8"} {
		wantKeys = append(wantKeys, "/key?"+url.Values{"principal": {principal}, "key": {k}}.Encode())
	}
	firstIntent := "/intent?" + url.Values{"principal": {principal}, "id": {s["order-7-try-2"]}}.Encode()
	if a.status != http.StatusOK || !slices.Equal(keyLinks, wantKeys) || len(intentLinks) != 3 || intentLinks[0] != firstIntent {
		t.Fatalf("the intents page: %d, key links %v, intent links %v\n%s", a.status, keyLinks, intentLinks, a.body)
	}
	next := regexp.MustCompile(`<a href="([^"]*)" id="next-page">`).FindStringSubmatch(a.body)
	if next == nil {
		t.Fatalf("the intents page has no next page:\n%s", a.body)
	}
	a = f.call(t, "GET", html.UnescapeString(next[1]), operatorToken, nil)
	if got := hrefs(a.body, "intent-id"); a.status != http.StatusOK || len(got) != 2 || !strings.Contains(got[0], s["order-7-try-1"]) || strings.Contains(a.body, `id="next-page"`) {
		t.Errorf("the next page %s: %d %v", next[1], a.status, got)
	}

	a = f.call(t, "GET", "/duplicates?principal="+principal+"&since=24h", operatorToken, nil)
	wantAll(t, "the duplicates page", a.body, `<section class="group">`, "not a proof", "2 intents under 2 keys", `>order-7-try-1</a>`, `>order-7-try-2</a>`)
	if n := strings.Count(a.body, `<section class="group">`); a.status != http.StatusOK || n != 1 {
		t.Errorf("the duplicates page: %d with %d groups", a.status, n)
	}
	for _, not := range []string{"order-8", "order-9", "order-6", ">old<"} {
		if strings.Contains(a.body, not) {
			t.Errorf("the duplicates page names %s", not)
		}
	}
	a = f.call(t, "GET", "/duplicates?principal="+principal+"&window=1m", operatorToken, nil)
	if a.status != http.StatusOK || !strings.Contains(a.body, `<p id="no-duplicates">No suspected double payment.</p>`) {
		t.Errorf("no duplicates within a minute: %d\n%s", a.status, a.body)
	}
}

// The lookup page offers the search, and a key's page and an intent's
// page link to their principal's intents and duplicates.
func TestIntentSearch_EntryPoints(t *testing.T) {
	f := start(t)
	s := seedShop(t, f.intents, time.Now())
	f.store(t, "order-8", created(t, s["order-8"]), true)
	wantAll(t, "the lookup page", f.call(t, "GET", "/", operatorToken, nil).body,
		`<form method="get" action="/intents" class="search" id="principal-search">`,
		`<input name="since" value="24h">`,
		`<button type="submit" formaction="/duplicates" id="find-duplicates">`)
	links := `<a href="/intents?principal=alice" id="principal-intents">its intents</a>, <a href="/duplicates?principal=alice" id="principal-duplicates">`
	wantAll(t, "the key's page", f.call(t, "GET", keyPath("order-8"), operatorToken, nil).body, links)
	wantAll(t, "the intent's page", f.call(t, "GET", "/intent?"+url.Values{"principal": {principal}, "id": {s["order-8"]}}.Encode(), operatorToken, nil).body, links)
}

// A query that names no search is answered 400 saying why, by the pages
// and the JSON API alike; never 500.
func TestIntentSearch_BadQuery_Is400(t *testing.T) {
	f := start(t)
	seedShop(t, f.intents, time.Now())
	for _, q := range []string{
		"",
		"principal=a+b",
		"principal=alice&since=yesterday",
		"principal=alice&since=-1h",
		"principal=alice&since=1900-01-01T00:00:00Z",
		"principal=alice&since=2562047h",
		"principal=alice&until=9999-01-01T00:00:00Z",
		"principal=alice&since=1h&until=2h",
		"principal=alice&window=0",
		"principal=alice&window=-1m",
		"principal=alice&window=25h",
		"principal=alice&window=soon",
		"principal=alice&limit=0",
		"principal=alice&limit=1001",
		"principal=alice&limit=ten",
		"principal=alice&after=pi_1",
		"principal=alice&after=2026-01-01T00:00:00Z/",
		"principal=alice&after=2026-01-01T00:00:00Z/pi%00",
		"principal=alice&after=2026-01-01T00:00:00Z/%FF",
		"principal=alice&until=1h&after=" + url.QueryEscape(time.Now().Format(time.RFC3339Nano)+"/pi_1"),
	} {
		for _, path := range []string{"/api/v1/intents", "/api/v1/duplicates"} {
			a := f.call(t, "GET", path+"?"+q, operatorToken, nil)
			if v := decode(t, a); a.status != http.StatusBadRequest || !strings.HasPrefix(fmt.Sprint(v["error"]), "bad query: ") {
				t.Errorf("GET %s?%s: %d %s", path, q, a.status, a.body)
			}
		}
		for _, path := range []string{"/intents", "/duplicates"} {
			if a := f.call(t, "GET", path+"?"+q, operatorToken, nil); a.status != http.StatusBadRequest || !strings.Contains(a.body, `<p class="error" id="error">bad query: `) {
				t.Errorf("GET %s?%s: %d\n%s", path, q, a.status, a.body)
			}
		}
	}
}

// A store that cannot scan a principal's intents answers the search 501,
// saying so, and no page offers it.
func TestIntentSearch_StoreThatCannotSearch_Is501(t *testing.T) {
	f := startWith(t, filepath.Join(t.TempDir(), "paymentsd.db"), func(i console.Intents) console.Intents { return struct{ console.Intents }{i} })
	s := seedShop(t, f.intents, time.Now())
	for _, path := range []string{"/api/v1/intents", "/api/v1/duplicates", "/intents", "/duplicates"} {
		if a := f.call(t, "GET", path+"?principal=alice", operatorToken, nil); a.status != http.StatusNotImplemented || !strings.Contains(a.body, "cannot search") {
			t.Errorf("GET %s: %d %s", path, a.status, a.body)
		}
	}
	f.store(t, "order-8", created(t, s["order-8"]), true)
	for _, path := range []string{"/", keyPath("order-8")} {
		if a := f.call(t, "GET", path, operatorToken, nil); strings.Contains(a.body, "principal-search") || strings.Contains(a.body, "principal-links") {
			t.Errorf("GET %s offers the search", path)
		}
	}
}
