package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/paymentsd/paymentsd/boltstore"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
)

// seedPayments writes into a new bbolt file, for principal, the same
// payment made under two keys five minutes apart, another payment
// between them, and the first payment made an hour before: a customer
// charged twice, and two payments that are not. It returns the file and
// the two intents' ids, newest first.
func seedPayments(t *testing.T, principal string, now time.Time) (path string, twice []string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "paymentsd.db")
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	intents, err := boltintents.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		id, key, amount string
		ago             time.Duration
	}{
		{"pi_order7_try2", "order-7-try-2", "100000000", 0},
		{"pi_order8", "order-8", "250000000", 2 * time.Minute},
		{"pi_order7_try1", "order-7-try-1", "100000000", 5 * time.Minute},
		{"pi_order6", "order-6", "100000000", time.Hour},
	} {
		req := seedRequest(p.amount)
		at := now.Add(-p.ago)
		pi := &paymentsv1.PaymentIntent{Id: p.id, State: paymentsv1.State_STATE_CREATED, Version: 1, Chain: req.Chain, Token: req.Token,
			Payer: req.Payer, Merchant: req.Merchant, Amount: p.amount, CreateTime: timestamppb.New(at), ExpireTime: timestamppb.New(at.Add(15 * time.Minute))}
		if err := intents.CreateIntent(context.Background(), principal, p.key, pi); err != nil {
			t.Fatal(err)
		}
	}
	return path, []string{"pi_order7_try2", "pi_order7_try1"}
}

// groupsOf reads paymentsd intents --duplicates --json's groups as ids.
func groupsOf(t *testing.T, r run) [][]string {
	t.Helper()
	var a struct {
		Groups []struct {
			Keys    int
			Intents []struct{ ID string }
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &a); err != nil {
		t.Fatalf("intents --json printed %q: %v\n%s", r.stdout, err, r.stderr)
	}
	var groups [][]string
	for _, g := range a.Groups {
		var ids []string
		for _, i := range g.Intents {
			ids = append(ids, i.ID)
		}
		groups = append(groups, ids)
	}
	return groups
}

// paymentsd intents finds the customer charged twice under two keys, and
// not the payments that differ or lie outside the window, from the file
// and through the server that holds it; it lists the intents newest
// first; none found exits 1.
func TestIntents_FindsTheSamePaymentUnderTwoKeys(t *testing.T) {
	principal := devPrincipal("shop-token")
	path, twice := seedPayments(t, principal, time.Now())
	search := []string{"intents", "--db", path, "--principal", principal, "--duplicates", "--since", "1h", "--json"}

	direct := paymentsd(t, "", search...)
	direct.want(t, 0)
	if got := groupsOf(t, direct); len(got) != 1 || !slices.Equal(got[0], twice) {
		t.Errorf("read from the file: groups %v; want one, %v", got, twice)
	}
	text := paymentsd(t, "", search[:len(search)-1]...)
	text.want(t, 0, "1 suspected double payment of", "2 intents under 2 keys", `key "order-7-try-1"`, `key "order-7-try-2"`)
	if strings.Contains(text.stdout, "order-8") || strings.Contains(text.stdout, "order-6") {
		t.Errorf("the text names a payment that is no duplicate:\n%s", text.stdout)
	}

	start(t, spec{db: path, args: []string{"--admin-listen", ""}})
	through := paymentsd(t, "", search...)
	through.want(t, 0)
	if got := groupsOf(t, through); len(got) != 1 || !slices.Equal(got[0], twice) {
		t.Errorf("through the server: groups %v; want one, %v", got, twice)
	}
	list := paymentsd(t, "shop-token", "intents", "--db", path, "--token-stdin", "--since", "2h")
	list.want(t, 0, "4 intents")
	if a, b := strings.Index(list.stdout, "pi_order7_try2"), strings.Index(list.stdout, "pi_order6"); a < 0 || b < a {
		t.Errorf("not newest first:\n%s", list.stdout)
	}
	paymentsd(t, "", "intents", "--db", path, "--principal", principal, "--amount", "999").want(t, 1, "0 intents")
	paymentsd(t, "", "intents", "--db", path, "--principal", principal, "--duplicates", "--since", "3m").want(t, 0, "pi_order7_try1")
	paymentsd(t, "", "intents", "--db", path, "--principal", principal, "--duplicates", "--window", "1m").want(t, 1, "0 suspected")
	paymentsd(t, "", "intents", "--db", path, "--principal", principal, "--since", "yesterday").want(t, 2)
}

// On PostgreSQL, two creates of one payment under two keys, made through
// the server, are found by paymentsd intents reading the database.
func TestIntents_PostgreSQL_FindsCreatesMadeUnderTwoKeys(t *testing.T) {
	url := postgresURL(t)
	d := start(t, spec{db: url})
	var ids []string
	for _, key := range []string{"retry-1", "retry-2"} {
		a := d.createSeed("pg-shop", key, "100000000")
		if a.err != nil {
			t.Fatal(a.err)
		}
		ids = append(ids, a.resp.(*paymentsv1.CreatePaymentIntentResponse).GetPaymentIntent().GetId())
	}
	slices.Reverse(ids)
	r := paymentsd(t, "pg-shop", "intents", "--db", url, "--token-stdin", "--duplicates", "--json")
	r.want(t, 0)
	if got := groupsOf(t, r); len(got) != 1 || !slices.Equal(got[0], ids) {
		t.Errorf("groups %v; want one, %v", got, ids)
	}
}
