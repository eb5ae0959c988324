package boltadmin_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/boltadmin"
	"github.com/paymentsd/paymentsd/storage"
)

var (
	stored  = storage.RecordKey{Scope: "alice", Key: "order-1"}
	missing = storage.RecordKey{Scope: "alice", Key: "order-2"}
)

// openWithRecord opens a data file at path holding stored's completed
// record, whose status message is "declined".
func openWithRecord(t *testing.T, path string) *boltstore.DB {
	t.Helper()
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, claim, err := db.Claim(ctx, storage.ClaimRequest{
		Key: stored, Scheme: storage.FingerprintScheme, Now: time.Now(), Lease: time.Minute, TTL: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := claim.Completed(&storage.Result{Status: &spb.Status{Code: int32(codes.FailedPrecondition), Message: "declined"}})
	if err := db.Complete(ctx, stored, done); err != nil {
		t.Fatal(err)
	}
	return db
}

// serve serves db's admin socket for the test, logging to a buffer it
// returns.
func serve(t *testing.T, db *boltstore.DB) (*boltadmin.Server, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	s, err := boltadmin.Serve(db, slog.New(slog.NewJSONHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, &log
}

// wantSource checks what src reads of the file openWithRecord made.
func wantSource(t *testing.T, src boltadmin.Source) {
	t.Helper()
	ctx := context.Background()
	rec, err := src.Get(ctx, stored)
	if err != nil || rec == nil || rec.State != storage.StateCompleted || rec.Result.Status.GetMessage() != "declined" {
		t.Errorf("Get(stored) = %+v, %v; want the completed record", rec, err)
	}
	if rec, err := src.Get(ctx, missing); rec != nil || err != nil {
		t.Errorf("Get(missing) = %+v, %v; want nil, nil", rec, err)
	}
	if err := src.Check(ctx); err != nil {
		t.Errorf("Check = %v, want sound", err)
	}
	var copied bytes.Buffer
	if n, err := src.Backup(ctx, &copied); err != nil || n != int64(copied.Len()) || n == 0 {
		t.Errorf("Backup = %d, %v; wrote %d bytes", n, err, copied.Len())
	}
}

// wantBackup backs path up through boltadmin.Backup and checks the copy.
func wantBackup(t *testing.T, path, wantVia string) {
	t.Helper()
	dest := filepath.Join(t.TempDir(), "copy.db")
	n, via, err := boltadmin.Backup(context.Background(), path, dest)
	if err != nil || n == 0 || !strings.Contains(via, wantVia) {
		t.Fatalf("Backup = %d, %q, %v; want a copy %s", n, via, err, wantVia)
	}
	if info, err := os.Stat(dest); err != nil || info.Mode().Perm() != 0o600 || info.Size() != n {
		t.Errorf("the copy: %v, %v; want %d bytes of mode 0600", info, err, n)
	}
	ro, err := boltstore.OpenReadOnly(dest, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if rec, err := ro.Get(context.Background(), stored); err != nil || rec == nil {
		t.Errorf("the copy's record: %v, %v", rec, err)
	}
	if _, _, err := boltadmin.Backup(context.Background(), path, dest); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a second Backup to %s: %v, want it refused", dest, err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(dest)); len(entries) != 1 {
		t.Errorf("the copy's directory holds %v, want the copy alone", entries)
	}
}

func TestOpen_FileNobodyHolds_ReadDirectly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	if err := openWithRecord(t, path).Close(); err != nil {
		t.Fatal(err)
	}
	src, err := boltadmin.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := src.(*boltadmin.Client); ok {
		t.Error("Open of a file nobody holds asks a server")
	}
	wantSource(t, src)
	src.Close()
	wantBackup(t, path, "read directly")
	if via, err := boltadmin.Check(context.Background(), path); err != nil || !strings.Contains(via, "read directly") {
		t.Errorf("Check = %q, %v", via, err)
	}
}

func TestOpen_HeldFile_AsksTheServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db := openWithRecord(t, path)
	defer db.Close()
	s, log := serve(t, db)
	if info, err := os.Stat(s.Path()); err != nil || info.Mode()&os.ModeSocket == 0 || info.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket %v (%v), want a socket of mode 0600", info, err)
	}
	src, err := boltadmin.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := src.(*boltadmin.Client); !ok {
		t.Errorf("Open of a held file: %T, want a *Client", src)
	}
	wantSource(t, src)
	src.Close()
	wantBackup(t, path, "through the running server")
	if via, err := boltadmin.Check(context.Background(), path); err != nil || !strings.Contains(via, "through the running server") {
		t.Errorf("Check = %q, %v", via, err)
	}
	for _, secret := range []string{stored.Scope, stored.Key} {
		if strings.Contains(log.String(), secret) {
			t.Errorf("the admin log names %q:\n%s", secret, log)
		}
	}
	if !strings.Contains(log.String(), `"path":"/record","status":200`) {
		t.Errorf("the admin log has no line of GET /record:\n%s", log)
	}

	s.Close()
	if _, err := os.Stat(s.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("admin socket after Close: %v, want it removed", err)
	}
}

func TestServe_DamagedValue_FoundThroughTheServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db := openWithRecord(t, path)
	defer db.Close()
	serve(t, db)
	// Every stored value is sealed with a checksum: a changed one is damage.
	err := db.Update(context.Background(), func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("idempotency_records"))
		k, v := b.Cursor().First()
		return b.Put(bytes.Clone(k), append(bytes.Clone(v[:len(v)-1]), v[len(v)-1]^0xff))
	})
	if err != nil {
		t.Fatal(err)
	}
	src, err := boltadmin.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if rec, err := src.Get(context.Background(), stored); !errors.Is(err, boltstore.ErrDamaged) {
		t.Errorf("Get of a damaged record = %v, %v; want an ErrDamaged", rec, err)
	}
	if err := src.Check(context.Background()); !errors.Is(err, boltstore.ErrDamaged) {
		t.Errorf("Check of a damaged file = %v, want an ErrDamaged", err)
	}
}

func TestServe_LongPath(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux reaches a long path through /proc/self/fd")
	}
	// A data file deep enough that its socket's path is longer than a Unix
	// socket's address can be.
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	path := filepath.Join(dir, "paymentsd.db")
	db := openWithRecord(t, path)
	defer db.Close()
	serve(t, db)
	src, err := boltadmin.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	wantSource(t, src)
}

func TestServe_StaleSocketReplaced_OtherFileRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db := openWithRecord(t, path)
	defer db.Close()

	// A socket left by a server that was killed.
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: boltadmin.SocketPath(path), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	lis.SetUnlinkOnClose(false)
	lis.Close()
	s, _ := serve(t, db)
	src, err := boltadmin.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	wantSource(t, src)
	src.Close()
	s.Close()

	if err := os.WriteFile(boltadmin.SocketPath(path), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := boltadmin.Serve(db, nil); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Serve over a regular file: %v, want it refused", err)
	}
	if b, _ := os.ReadFile(boltadmin.SocketPath(path)); string(b) != "mine" {
		t.Errorf("the regular file holds %q after Serve, want it untouched", b)
	}
}

func TestOpen_NoFile_NoSocket(t *testing.T) {
	missingPath := filepath.Join(t.TempDir(), "missing.db")
	if _, err := boltadmin.Open(missingPath); err == nil || !strings.Contains(err.Error(), "no data file") {
		t.Errorf("Open of a missing file: %v", err)
	}
	if _, err := os.Stat(missingPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open created %s: %v", missingPath, err)
	}

	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db := openWithRecord(t, path)
	defer db.Close()
	if _, err := boltadmin.Open(path); err == nil || !strings.Contains(err.Error(), "no admin socket") {
		t.Errorf("Open of a held file without a socket: %v", err)
	}
}

func TestServer_NilCloses(t *testing.T) {
	var s *boltadmin.Server
	s.Close()
}
