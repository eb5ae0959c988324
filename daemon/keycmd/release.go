package keycmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"time"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
	"github.com/paymentsd/paymentsd/daemon/recordview"
	"github.com/paymentsd/paymentsd/storage"
)

// releaseAbout is what paymentsd release -h says above its flags.
const releaseAbout = `Releases an idempotency key of a principal: deletes its stored result, so
that the key's next request runs fresh. Only a stored error of a
transactional method (paymentsd's creates and cancels), whose writes rolled
back with it, is released: nothing it did can be done twice. A stored
success, an error of a method that is not transactional (its handler may
have acted), a key in flight and a key with no live record are refused,
saying why. The principal and key are given as to paymentsd record.

Every release and refusal is logged with the operator (the user running
this command), the principal's hash, the key and the released code: by the
server holding a bbolt file, through its admin socket, otherwise by this
command on standard error. With PostgreSQL it returns once no replica can
still answer from the released record (a second). Exit 0 when released, 1
when refused or the file is damaged, 2 for a bad command line, 3 when the
release failed.`

// Release is paymentsd release: support's "let this customer retry with
// the same key".
func Release(ctx context.Context, sio *cli.Stdio, args []string) int {
	const name = "paymentsd release"
	q, code := parseRecordArgs(sio, name, releaseAbout, args)
	if q == nil {
		return code
	}
	k, err := q.recordKey(sio)
	if err != nil {
		return cli.Fail(sio, name, err)
	}
	db, err := q.pods.dbOf(ctx, q.db, k.Scope)
	switch {
	case err != nil:
		return cli.Fail(sio, name, err)
	case db == "": // placed on no pod: never used
		why, _ := recordview.RefusalText(storage.ErrNoRecord)
		fmt.Fprintf(sio.Err, "%s: refused: key %q of principal %q: %s\n", name, k.Key, k.Scope, why)
		return cli.ExitNo
	}
	release := recordview.ReleaseBolt
	if pgURL, _ := config.ParseDB(db); pgURL != "" {
		release, db = recordview.ReleasePostgres, pgURL
	}
	log := slog.New(slog.NewTextHandler(sio.Err, nil))
	rec, via, err := release(ctx, db, k, operator(), log)
	if why, ok := recordview.RefusalText(err); ok {
		fmt.Fprintf(sio.Err, "%s: refused: key %q of principal %q: %s\n", name, k.Key, k.Scope, why)
		return cli.ExitNo
	}
	if errors.Is(err, boltstore.ErrDamaged) {
		fmt.Fprintf(sio.Err, "%s: %v\n", name, err)
		return cli.ExitNo // as record and check answer a damaged file
	}
	if err != nil {
		return cli.Fail(sio, name, err)
	}
	v := recordview.New(k, rec, time.Now())
	if q.json {
		writeJSON(sio, v)
	} else {
		fmt.Fprintf(sio.Out, "released (%s); the key's next request runs fresh. It held:\n", via)
		v.WriteText(sio.Out, time.Now())
	}
	return cli.ExitOK
}

// operator names who runs the command, for the release's log line. It is
// the operating system's user, whom no flag can make someone else.
func operator() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return fmt.Sprintf("uid %d", os.Getuid())
}
