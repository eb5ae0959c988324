package boltintents

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/boltstore/bolttest"
	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/internal/sealed"
)

func intent(id, amount string) *paymentsv1.PaymentIntent {
	return &paymentsv1.PaymentIntent{Id: id, State: paymentsv1.State_STATE_CREATED, Amount: amount, Chain: "evm:31337"}
}

func open(t *testing.T, path string) (*boltstore.DB, *Store) {
	t.Helper()
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return db, s
}

// An intent whose bytes changed on disk (an amount of 100000000 become
// 900000000) is never read as another intent: server.ErrDamaged.
func TestIntent_ByteChangedOnDisk_DataLoss(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db, s := open(t, path)
	ctx := context.Background()
	if err := s.CreateIntent(ctx, "alice", "", intent("pi_1", "100000000")); err != nil {
		t.Fatal(err)
	}
	db.Close()
	bolttest.ChangeByte(t, path, []byte("100000000"), 0, '9')

	_, s = open(t, path)
	_, err := s.GetIntent(ctx, "alice", "pi_1")
	if !errors.Is(err, server.ErrDamaged) || !errors.Is(err, boltstore.ErrDamaged) {
		t.Errorf("GetIntent of the damaged intent: %v, want server.ErrDamaged", err)
	}
	if _, _, err := s.ListIntents(ctx, "alice", nil, 10); !errors.Is(err, server.ErrDamaged) {
		t.Errorf("ListIntents over the damaged intent: %v, want server.ErrDamaged", err)
	}
}

// Intents written before they were sealed (owner and encoding stored
// bare) are sealed once by New, and read as before.
func TestIntentsWrittenBeforeSealing_SealedByNew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db, _ := open(t, path)
	old := intent("pi_old", "42")
	bare, err := proto.MarshalOptions{Deterministic: true}.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	bare = append(ownerPrefix("alice"), bare...)
	err = db.Update(context.Background(), func(tx *bolt.Tx) error { // as the version before sealing wrote it
		if err := tx.DeleteBucket([]byte("idempotency_sealed")); err != nil {
			return err
		}
		if err := tx.Bucket(bucketByOwner).Put(ownerIndexKey("alice", old), nil); err != nil {
			return err
		}
		return tx.Bucket(bucketIntents).Put([]byte(old.Id), bare)
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	_, s := open(t, path)
	got, err := s.GetIntent(context.Background(), "alice", old.Id)
	if err != nil || !proto.Equal(got, old) {
		t.Errorf("GetIntent of an intent written before sealing: %v, %v; want %v", got, err, old)
	}
	page, _, err := s.ListIntents(context.Background(), "alice", nil, 10)
	if err != nil || len(page) != 1 || !proto.Equal(page[0], old) {
		t.Errorf("ListIntents over an index entry written before sealing: %v, %v; want the intent", page, err)
	}
}

// An intent written before keys were kept (sealed, its owner first) reads
// as before, with no key. A cancel keeps it readable, still with none.
func TestIntentWrittenBeforeKeys_ReadsWithNoKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db, s := open(t, path)
	old := intent("pi_old", "42")
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(context.Background(), func(tx *bolt.Tx) error { // as the version before keys wrote it
		if err := tx.Bucket(bucketByOwner).Put(ownerIndexKey("alice", old), sealed.Seal(ownerIndexKey("alice", old), nil)); err != nil {
			return err
		}
		return tx.Bucket(bucketIntents).Put([]byte(old.Id), sealed.Seal([]byte(old.Id), append(ownerPrefix("alice"), b...)))
	})
	if err != nil {
		t.Fatal(err)
	}
	found, err := s.FindIntent(context.Background(), old.Id)
	if err != nil || found.Owner != "alice" || found.Key != "" || !proto.Equal(found.Intent, old) {
		t.Fatalf("FindIntent of an intent written before keys = %+v, %v; want alice's, with no key", found, err)
	}
	if _, err := s.UpdateIntent(context.Background(), "alice", old.Id, func(pi *paymentsv1.PaymentIntent) bool {
		pi.State = paymentsv1.State_STATE_CANCELED
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetIntent(context.Background(), "alice", old.Id); err != nil || got.State != paymentsv1.State_STATE_CANCELED {
		t.Errorf("GetIntent after a cancel = %v, %v; want it canceled", got, err)
	}
}

// A byte changed on disk inside an intent's id moves the intent under
// another id: the file is refused at open, not served with the intent
// missing.
func TestIntentID_ByteChangedOnDisk_FileRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db, s := open(t, path)
	if err := s.CreateIntent(context.Background(), "alice", "", intent("pi_abc", "5")); err != nil {
		t.Fatal(err)
	}
	db.Close()
	bolttest.ChangeByte(t, path, []byte("pi_abc"), len("pi_ab"), 'd')
	if db, err := boltstore.Open(path, nil); err == nil {
		db.Close()
		t.Fatal("a file with an intent under a damaged id was opened")
	} else if !errors.Is(err, boltstore.ErrDamaged) {
		t.Errorf("Open = %v, want ErrDamaged", err)
	}
}
