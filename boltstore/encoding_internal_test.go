package boltstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/internal/sealed"
	"github.com/paymentsd/paymentsd/storage"
)

// encodingCases are records of every shape the compact encoding has a
// flag for.
func encodingCases(t *testing.T) map[string]*storage.Record {
	t.Helper()
	now := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	resp, err := anypb.New(wrapperspb.String("the answer"))
	if err != nil {
		t.Fatal(err)
	}
	detail, err := anypb.New(wrapperspb.Int64(7))
	if err != nil {
		t.Fatal(err)
	}
	claim := func(scheme string, claimTime time.Time) *storage.Record {
		_, r := storage.Decide(nil, false, storage.ClaimRequest{
			Key: storage.RecordKey{Scope: "s", Key: "k"}, Fingerprint: sha256.Sum256([]byte(scheme)),
			Scheme: scheme, Now: now, Lease: time.Minute, TTL: 24 * time.Hour,
		}, storage.Durable, storage.Claimant{ID: "pid 1 0123456789abcdef"})
		r.ClaimTime = claimTime
		return r
	}
	inFlight := claim(storage.FingerprintScheme, now)
	transactional := claim(storage.FingerprintScheme, now).Completed(&storage.Result{
		Response: resp, Header: map[string][]string{"a": {"1", "2"}}, Trailer: map[string][]string{"t-bin": {"\x00\xff"}},
	})
	transactional.Durability = storage.Transactional
	transactional.Attempt = 300
	return map[string]*storage.Record{
		"in flight":                     inFlight,
		"completed, a response":         transactional,
		"completed, a status":           claim(storage.FingerprintScheme, now).Completed(&storage.Result{Status: &spb.Status{Code: 9, Message: "no", Details: []*anypb.Any{detail}}}),
		"another type URL":              claim(storage.FingerprintScheme, now).Completed(&storage.Result{Response: &anypb.Any{TypeUrl: "example.com/x.Y", Value: []byte{1}}}),
		"another scheme, no claim time": claim("another scheme", time.Time{}).Completed(&storage.Result{Response: resp}),
		"expired long ago":              func() *storage.Record { r := claim("", time.Time{}); r.Expiry = time.Unix(5, 7); return r }(),
	}
}

// sameRecord reports how a differs from b, as a replay would show it:
// the result's encoding byte for byte, the rest field by field.
func sameRecord(t *testing.T, what string, got, want *storage.Record) {
	t.Helper()
	g, w := *got, *want
	g.Result, w.Result = nil, nil
	if !g.Expiry.Equal(w.Expiry) || !g.ClaimTime.Equal(w.ClaimTime) || !g.LeaseExpiry.Equal(w.LeaseExpiry) {
		t.Fatalf("%s: times %v %v %v, want %v %v %v", what, g.Expiry, g.ClaimTime, g.LeaseExpiry, w.Expiry, w.ClaimTime, w.LeaseExpiry)
	}
	g.Expiry, g.ClaimTime, g.LeaseExpiry = w.Expiry, w.ClaimTime, w.LeaseExpiry
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: %+v, want %+v", what, g, w)
	}
	if (got.Result == nil) != (want.Result == nil) {
		t.Fatalf("%s: result %v, want %v", what, got.Result, want.Result)
	}
	if got.Result == nil {
		return
	}
	gb, err1 := got.Result.MarshalBinary()
	wb, err2 := want.Result.MarshalBinary()
	if err1 != nil || err2 != nil || !bytes.Equal(gb, wb) {
		t.Fatalf("%s: result %x (%v), want %x (%v)", what, gb, err1, wb, err2)
	}
}

// Every record decodes from its compact encoding as it was, and takes
// fewer bytes than its protobuf encoding. Cut short or with a byte
// changed, an encoding is an error or some record, never a panic.
func TestCompactEncoding_RoundTripsSmaller(t *testing.T) {
	for name, r := range encodingCases(t) {
		b, err := marshalRecord(r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		old, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) >= len(old) {
			t.Errorf("%s: %d bytes compact, %d as protobuf", name, len(b), len(old))
		}
		got, err := unmarshalRecord([]byte("k"), b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameRecord(t, name, got, r)
		for i := range b {
			unmarshalRecord([]byte("k"), b[:i])
			changed := bytes.Clone(b)
			changed[i] ^= 0x5a
			unmarshalRecord([]byte("k"), changed)
		}
		if _, err := unmarshalRecord([]byte("k"), b[:len(b)/2]); err == nil && r.Result == nil {
			t.Errorf("%s: half an encoding decoded", name)
		}
	}
}

// A file the previous build wrote, its records protobuf-encoded, opens:
// each record reads as it was written and replays its result byte for
// byte; its claim in flight is taken over and completed in the compact
// encoding; its expired record is swept; the tools read it too.
func TestRecordsOfThePreviousEncoding_ReadReplayedAndSwept(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "previous.db")
	cases := encodingCases(t)
	writePreviousEncoding(t, path, cases)
	readOnlyReadsPrevious(t, path, cases)

	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Date(2026, 11, 30, 12, 0, 1, 0, time.UTC)
	readsAndReplaysPrevious(t, db, cases, now)
	takesOverPreviousInFlight(t, db, cases, now)

	// The record that expired long ago goes with the first sweep.
	if n, err := db.Sweep(ctx, time.Unix(10, 0)); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want the one expired record", n, err)
	}
	if got, _ := db.Get(ctx, previousKey("expired long ago")); got != nil {
		t.Fatalf("swept record still read: %+v", got)
	}
	if err := db.Check(); err != nil {
		t.Fatal(err)
	}
}

// previousKey is where the previous build's file holds case name.
func previousKey(name string) storage.RecordKey {
	return storage.RecordKey{Scope: "previous", Key: name}
}

// writePreviousEncoding writes cases to a new file at path as the previous
// build wrote them: protobuf-encoded, with their expiry and in-flight
// index entries.
func writePreviousEncoding(t *testing.T, path string, cases map[string]*storage.Record) {
	t.Helper()
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Bolt().Update(func(tx *bolt.Tx) error {
		for name, r := range cases {
			old, err := r.MarshalBinary()
			if err != nil {
				return err
			}
			key := recordKey(previousKey(name))
			if err := tx.Bucket(bucketRecords).Put(key, sealed.Seal(key, old)); err != nil {
				return err
			}
			if err := tx.Bucket(bucketRecordExpiry).Put(expiryKey(r.Expiry, key), nil); err != nil {
				return err
			}
			if r.State == storage.StateInFlight {
				if err := setInFlight(tx, key, true); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
}

// readOnlyReadsPrevious checks that the tools' read-only open reads every
// record as it was written.
func readOnlyReadsPrevious(t *testing.T, path string, cases map[string]*storage.Record) {
	t.Helper()
	ro, err := OpenReadOnly(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range cases {
		got, err := ro.Get(context.Background(), previousKey(name))
		if err != nil || got == nil {
			t.Fatalf("read-only %s: %v, %v", name, got, err)
		}
		sameRecord(t, "read-only "+name, got, r)
	}
	ro.Close()
}

// readsAndReplaysPrevious checks that every record reads as it was
// written, and that a retry of each completed one replays its result.
func readsAndReplaysPrevious(t *testing.T, db *DB, cases map[string]*storage.Record, now time.Time) {
	t.Helper()
	ctx := context.Background()
	for name, r := range cases {
		got, err := db.Get(ctx, previousKey(name))
		if err != nil || got == nil {
			t.Fatalf("%s: %v, %v", name, got, err)
		}
		sameRecord(t, name, got, r)
		if r.State != storage.StateCompleted {
			continue
		}
		req := storage.ClaimRequest{Key: previousKey(name), Fingerprint: r.Fingerprint, Scheme: r.Scheme, Now: now, Lease: time.Minute, TTL: time.Hour}
		outcome, rec, err := db.Claim(ctx, req)
		if err != nil || outcome != storage.OutcomeReplay {
			t.Fatalf("%s: retry %v, %v; want a replay", name, outcome, err)
		}
		sameRecord(t, "replay of "+name, rec, r)
	}
}

// takesOverPreviousInFlight checks that the claim in flight is an orphan:
// taken over, then completed anew in the compact encoding.
func takesOverPreviousInFlight(t *testing.T, db *DB, cases map[string]*storage.Record, now time.Time) {
	t.Helper()
	ctx := context.Background()
	flying := cases["in flight"]
	req := storage.ClaimRequest{Key: previousKey("in flight"), Fingerprint: flying.Fingerprint, Scheme: flying.Scheme, Now: now, Lease: time.Minute, TTL: time.Hour}
	outcome, claim, err := db.Claim(ctx, req)
	if err != nil || outcome != storage.OutcomeTakeover || claim.Attempt != 2 {
		t.Fatalf("retry of the claim in flight: %v attempt %d, %v; want a takeover, attempt 2", outcome, claim.Attempt, err)
	}
	done := claim.Completed(&storage.Result{Response: cases["completed, a response"].Result.Response})
	if err := db.Complete(ctx, previousKey("in flight"), done); err != nil {
		t.Fatal(err)
	}
	err = db.Bolt().View(func(tx *bolt.Tx) error {
		key := recordKey(previousKey("in flight"))
		payload, err := sealed.Open(key, tx.Bucket(bucketRecords).Get(key))
		if err != nil || payload[0] != compactMark {
			t.Errorf("the completed takeover is stored as %x (%v), not compact", payload, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := db.Get(ctx, previousKey("in flight")); err != nil || got == nil {
		t.Fatalf("completed takeover: %v, %v", got, err)
	} else {
		sameRecord(t, "completed takeover", got, done)
	}
}

// The record a benchmark create stores takes fewer bytes compact than as
// protobuf: a guard against the encoding growing back.
func TestCompactEncoding_SavesOnATypicalRecord(t *testing.T) {
	r := encodingCases(t)["completed, a response"]
	r.Result = &storage.Result{Response: &anypb.Any{TypeUrl: "type.googleapis.com/payments.v1.CreatePaymentIntentResponse", Value: make([]byte, 218)}}
	r.Owner = "pid 6880 828ff1e9fa80a204"
	b, err := marshalRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if saved := len(pb) - len(b); saved < 60 {
		t.Fatalf("compact %d bytes, protobuf %d: saves %d, want at least 60", len(b), len(pb), saved)
	}
}

// A time the encoding cannot hold, nanoseconds since 1970 beyond 2262, is
// refused, never written as another time: an expiry read back early would
// let a retry run the request again.
func TestCompactEncoding_TimeOutOfRange_Refused(t *testing.T) {
	far := time.Date(2276, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, r := range map[string]*storage.Record{
		"expiry":     {State: storage.StateInFlight, Attempt: 1, Expiry: far},
		"claim time": {State: storage.StateInFlight, Attempt: 1, ClaimTime: far, Expiry: time.Unix(1e9, 0)},
		"lease":      {State: storage.StateInFlight, Attempt: 1, LeaseExpiry: far, Expiry: time.Unix(1e9, 0)},
	} {
		if b, err := marshalRecord(r); err == nil {
			t.Errorf("%s in %v: encoded as %x, want refused", name, far.Year(), b)
		}
	}
}
