package intentsearch_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/paymentsd/paymentsd/boltstore"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/intents/pgintents"
	"github.com/paymentsd/paymentsd/daemon/intentsearch"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// store is an intents store.
type store interface {
	server.IntentStore
	intentsearch.Store
}

// stores are the two stores, each empty, by name. pgDB is PostgreSQL's
// database, for bulkFill.
var pgDB = map[store]*pgstore.DB{}

func stores(t testing.TB) map[string]store {
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "paymentsd.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	bolt, err := boltintents.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	pdb, err := pgstore.Open(context.Background(), pgtest.Require(t, cluster).NewDatabase(t, pgtest.DatabaseName(t.Name())), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pdb.Close() })
	pg, err := pgintents.New(context.Background(), pdb)
	if err != nil {
		t.Fatal(err)
	}
	pgDB[pg] = pdb
	return map[string]store{"bbolt": bolt, "postgres": pg}
}

var t0 = time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)

// intent is a payment of amount from payer, created at.
func intent(id, payer, amount string, at time.Time) *paymentsv1.PaymentIntent {
	return &paymentsv1.PaymentIntent{
		Id: id, State: paymentsv1.State_STATE_CREATED, Version: 1, Chain: "evm:31337",
		Token:    "0x5FbDB2315678afecb367f032d93F642f64180aa3",
		Payer:    payer,
		Merchant: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
		Amount:   amount, CreateTime: timestamppb.New(at), ExpireTime: timestamppb.New(at.Add(15 * time.Minute)),
	}
}

const (
	alicePayer = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
	bobPayer   = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
)

// keyed is an intent and the key that created it.
type keyed struct {
	key string
	pi  *paymentsv1.PaymentIntent
}

func fill(t *testing.T, s store, owner string, intents ...keyed) {
	t.Helper()
	for _, k := range intents {
		if err := s.CreateIntent(context.Background(), owner, k.key, k.pi); err != nil {
			t.Fatal(err)
		}
	}
}

func idsOf(found []server.FoundIntent) []string {
	var ids []string
	for _, f := range found {
		ids = append(ids, f.Intent.GetId())
	}
	return ids
}

// A principal's intents list newest first, filtered and paged; another
// principal's never.
func TestPage_NewestFirstFilteredAndPaged(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			var all []keyed
			for i := range 12 {
				payer := []string{alicePayer, bobPayer}[i%2]
				all = append(all, keyed{fmt.Sprint("k", i), intent(fmt.Sprintf("pi_%02d", i), payer, fmt.Sprint(100*(i%3+1)), t0.Add(time.Duration(i)*time.Minute))})
			}
			fill(t, s, "merchant-a", all...)
			fill(t, s, "merchant-b", keyed{"k0", intent("pi_other", alicePayer, "100", t0.Add(5*time.Minute))})
			q := intentsearch.Query{Owner: "merchant-a", From: t0.Add(2 * time.Minute), To: t0.Add(11 * time.Minute),
				Payer: strings.ToLower(alicePayer)} // an address in any case
			var got []string
			var after server.Position
			for pages := 0; ; pages++ {
				page, next, err := intentsearch.Page(context.Background(), s, q, after, 2)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, idsOf(page)...)
				if next == (server.Position{}) || pages > 10 {
					break
				}
				after = next
			}
			if want := []string{"pi_10", "pi_08", "pi_06", "pi_04", "pi_02"}; !slices.Equal(got, want) {
				t.Errorf("alice's payments in [2 min, 11 min), 2 a page: %v; want %v", got, want)
			}
			q = intentsearch.Query{Owner: "merchant-a", Amount: "300"}
			if page, _, err := intentsearch.Page(context.Background(), s, q, server.Position{}, 10); err != nil || !slices.Equal(idsOf(page), []string{"pi_11", "pi_08", "pi_05", "pi_02"}) {
				t.Errorf("amount 300: %v, %v", idsOf(page), err)
			}
		})
	}
}

// The same payment made twice under two keys five minutes apart is one
// group. Two payments of different amounts are not, nor the same payment
// 20 minutes apart, nor one key's two intents (a key released and used
// again). An earlier intent within the window of one in the range joins
// its group.
func TestDuplicates_TheSamePaymentUnderTwoKeys(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			fill(t, s, "shop",
				keyed{"order-1-try-1", intent("pi_a1", alicePayer, "100", t0)},
				keyed{"order-1-try-2", intent("pi_a2", strings.ToUpper(alicePayer[:2])+alicePayer[2:], "100", t0.Add(5*time.Minute))},
				keyed{"order-2", intent("pi_b1", alicePayer, "250", t0.Add(6*time.Minute))},
				keyed{"order-3", intent("pi_c1", bobPayer, "100", t0)},
				keyed{"order-4", intent("pi_c2", bobPayer, "100", t0.Add(20*time.Minute))},
				keyed{"order-5", intent("pi_d1", bobPayer, "700", t0.Add(time.Minute))},
				keyed{"order-5", intent("pi_d2", bobPayer, "700", t0.Add(2*time.Minute))},
			)
			fill(t, s, "other-shop", keyed{"x", intent("pi_x", alicePayer, "100", t0.Add(time.Minute))})
			groups, err := intentsearch.Duplicates(context.Background(), s, intentsearch.Query{Owner: "shop", From: t0.Add(3 * time.Minute)}, intentsearch.DefaultWindow)
			if err != nil {
				t.Fatal(err)
			}
			if len(groups) != 1 || !slices.Equal(idsOf(groups[0]), []string{"pi_a2", "pi_a1"}) {
				var got [][]string
				for _, g := range groups {
					got = append(got, idsOf(g))
				}
				t.Fatalf("groups %v; want one: [pi_a2 pi_a1]", got)
			}
			if k := groups[0][1].Key; k != "order-1-try-1" {
				t.Errorf("the first intent's key %q", k)
			}
			if groups, err := intentsearch.Duplicates(context.Background(), s, intentsearch.Query{Owner: "shop", From: t0.Add(16 * time.Minute)}, intentsearch.DefaultWindow); err != nil || len(groups) != 0 {
				t.Errorf("from 16 min: %d groups, %v; want none", len(groups), err)
			}
		})
	}
}

// BenchmarkDuplicates measures a search of 100,000 intents of one
// principal, 1,000 of them made twice, on each store:
//
//	go test -run '^$' -bench BenchmarkDuplicates -benchtime 5x ./intentsearch
func BenchmarkDuplicates(b *testing.B) {
	const n, twice = 100_000, 1_000
	for name, s := range stores(b) {
		b.Run(name, func(b *testing.B) {
			if err := bulkFill(b, s, "big", n, twice); err != nil {
				b.Fatal(err)
			}
			q := intentsearch.Query{Owner: "big", From: t0.Add(-time.Hour)}
			b.ResetTimer()
			for b.Loop() {
				groups, err := intentsearch.Duplicates(context.Background(), s, q, intentsearch.DefaultWindow)
				if err != nil || len(groups) != twice {
					b.Fatalf("%d groups, %v; want %d", len(groups), err, twice)
				}
			}
		})
	}
}

// bulkFill creates n intents of owner a second apart, each a payment of
// its own but every (n/twice)th, made again a minute later under another
// key. On PostgreSQL it copies the rows in; on bbolt it creates them 64
// at a time, which the group commit writes together.
func bulkFill(b *testing.B, s store, owner string, n, twice int) error {
	var all []keyed
	for i := range n {
		amount := fmt.Sprint(1000 + i)
		at := t0.Add(time.Duration(i) * time.Second)
		all = append(all, keyed{fmt.Sprint("k", i), intent(fmt.Sprintf("pi_%06d", i), alicePayer, amount, at)})
		if i%(n/twice) == 0 {
			all = append(all, keyed{fmt.Sprint("k", i, "-again"), intent(fmt.Sprintf("pi_%06d_again", i), alicePayer, amount, at.Add(time.Minute))})
		}
	}
	if db, ok := pgDB[s]; ok {
		return copyIntents(db, owner, all)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 64 {
		wg.Go(func() {
			for i := w; i < len(all); i += 64 {
				if err := s.CreateIntent(context.Background(), owner, all[i].key, all[i].pi); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// copyIntents writes intents as pgintents stores them, with COPY.
func copyIntents(db *pgstore.DB, owner string, all []keyed) error {
	rows := make([][]any, 0, len(all))
	for _, k := range all {
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(k.pi)
		if err != nil {
			return err
		}
		rows = append(rows, []any{k.pi.Id, owner, k.pi.CreateTime.AsTime().UnixNano(), raw, k.key})
	}
	conn, err := db.Pool().Acquire(context.Background())
	if err != nil {
		return err
	}
	defer conn.Release()
	_, err = conn.CopyFrom(context.Background(), pgx.Identifier{"payment_intents"},
		[]string{"id", "owner", "create_time_ns", "intent", "idempotency_key"}, pgx.CopyFromRows(rows))
	if err == nil {
		_, err = conn.Exec(context.Background(), `ANALYZE payment_intents`)
	}
	return err
}
