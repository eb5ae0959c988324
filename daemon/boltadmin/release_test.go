package boltadmin_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/boltadmin"
	"github.com/paymentsd/paymentsd/storage"
)

// storeTx stores result for key as a transactional method does.
func storeTx(t *testing.T, db *boltstore.DB, key string, result *storage.Result) {
	t.Helper()
	k := storage.RecordKey{Scope: "alice", Key: key}
	_, claim, tx, err := db.ClaimTx(context.Background(), storage.ClaimRequest{
		Key: k, Scheme: storage.FingerprintScheme, Now: time.Now(), Lease: time.Minute, TTL: time.Hour,
	}, storage.Transactional)
	if err != nil {
		t.Fatal(err)
	}
	done := claim.Completed(result)
	done.Durability = storage.Transactional
	if err := tx.Commit(context.Background(), done); err != nil {
		t.Fatal(err)
	}
}

// openForRelease opens a data file holding, for alice: "order-1", a
// stored error not transactional (openWithRecord's), "tx-error" a
// transactional method's stored error, and "tx-ok" its success.
func openForRelease(t *testing.T, path string) *boltstore.DB {
	t.Helper()
	db := openWithRecord(t, path)
	storeTx(t, db, "tx-error", &storage.Result{Status: &spb.Status{Code: int32(codes.InvalidArgument), Message: "bad amount"}})
	resp, _ := anypb.New(wrapperspb.String("ok"))
	storeTx(t, db, "tx-ok", &storage.Result{Response: resp})
	return db
}

// wantReleases releases every key of openForRelease with release, checks
// its answers and, in log, its lines.
func wantReleases(t *testing.T, release func(storage.RecordKey) (*storage.Record, error), log *bytes.Buffer) {
	t.Helper()
	for _, tc := range []struct {
		key     string
		want    error
		logLine string
	}{
		{"order-1", storage.ErrReleaseNotTransactional, `"refusal":"not_transactional"`},
		{"tx-ok", storage.ErrReleaseSuccess, `"refusal":"success"`},
		{"order-2", storage.ErrNoRecord, `"refusal":"no_record"`},
		{"tx-error", nil, `"outcome":"released","code":"INVALID_ARGUMENT"`},
		{"tx-error", storage.ErrNoRecord, `"refusal":"no_record"`},
	} {
		log.Reset()
		rec, err := release(storage.RecordKey{Scope: "alice", Key: tc.key})
		if !errors.Is(err, tc.want) || (err == nil) != (rec != nil) {
			t.Errorf("Release(%s) = %+v, %v; want %v", tc.key, rec, err, tc.want)
		}
		line := log.String()
		for _, want := range []string{tc.logLine, `"operator":"oncall"`, `"key":"` + tc.key + `"`, `"principal_hash":"` + auth.PrincipalHash("alice") + `"`} {
			if !strings.Contains(line, want) {
				t.Errorf("Release(%s) logged %q, want %s", tc.key, line, want)
			}
		}
		if strings.Contains(line, `"alice"`) {
			t.Errorf("Release(%s) logged the principal in clear: %s", tc.key, line)
		}
	}
}

func TestRelease_ThroughTheServer_RefusesOrReleasesAndTheServerLogs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	db := openForRelease(t, path)
	defer db.Close()
	_, log := serve(t, db)
	wantReleases(t, func(k storage.RecordKey) (*storage.Record, error) {
		rec, via, err := boltadmin.Release(context.Background(), path, k, "oncall", slog.New(slog.DiscardHandler))
		if !strings.Contains(via, "running server") && err == nil {
			t.Errorf("via %q, want the running server", via)
		}
		return rec, err
	}, log)
	if rec, _ := db.Get(context.Background(), storage.RecordKey{Scope: "alice", Key: "tx-ok"}); rec == nil {
		t.Error("a refused release deleted the record")
	}
}

func TestRelease_NoServer_InTheFileAndLogsItself(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	openForRelease(t, path).Close()
	var log bytes.Buffer
	wantReleases(t, func(k storage.RecordKey) (*storage.Record, error) {
		rec, _, err := boltadmin.Release(context.Background(), path, k, "oncall", slog.New(slog.NewJSONHandler(&log, nil)))
		return rec, err
	}, &log)
	if _, _, err := boltadmin.Release(context.Background(), path+"-missing", storage.RecordKey{Scope: "alice", Key: "k"}, "oncall", slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "no data file") {
		t.Errorf("Release in a missing file: %v, want no data file", err)
	}
}
