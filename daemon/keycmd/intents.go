package keycmd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/paymentsd/paymentsd/daemon/auth"
	"github.com/paymentsd/paymentsd/daemon/boltadmin"
	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/intents/pgintents"
	"github.com/paymentsd/paymentsd/daemon/intentsearch"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
	"github.com/paymentsd/paymentsd/daemon/internal/envflags"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/internal/bearer"
	"github.com/paymentsd/paymentsd/pgstore"
)

// intentsAbout is what paymentsd intents -h says above its flags.
const intentsAbout = `Lists a principal's payment intents, newest first, with the key that created
each: those created in [--since, --until), and with --payer, --merchant or
--amount only those that match. With --duplicates it lists instead the
suspected double payments: intents for the same payment (chain, token,
payer, merchant and amount) created under different keys, each within
--window of the one before, the charge a client makes twice when it makes
a new key for each retry.

The principal is named as paymentsd record names it (--principal, or
--token-stdin with --api-keys). The store is read as record reads it: a
bbolt file directly when no server holds it, otherwise through the running
server's admin socket; a postgres:// URL directly, never migrated. Exit 0
with intents or groups, 1 when there are none, 2 for a bad command line,
3 when the search failed.`

// intentsQuery is what paymentsd intents was asked.
type intentsQuery struct {
	db, apiKeys      string
	tokenStdin, json bool
	search           intentSearch
	pods             onPods
}

// Intents is paymentsd intents: support's "did this customer pay twice?".
func Intents(ctx context.Context, sio *cli.Stdio, args []string) int {
	q, code := parseIntentsArgs(sio, args)
	if q == nil {
		return code
	}
	if q.tokenStdin {
		token, err := bearer.ReadToken(sio.In)
		if err == nil {
			q.search.Owner, err = auth.PrincipalOfToken(token, q.apiKeys)
		}
		if err != nil {
			return cli.Fail(sio, "paymentsd intents", err)
		}
	}
	a, err := q.run(ctx)
	if err != nil {
		return cli.Fail(sio, "paymentsd intents", err)
	}
	if q.json {
		writeJSON(sio, a)
	} else {
		a.writeText(sio.Out)
	}
	if len(a.Intents) == 0 && len(a.Groups) == 0 {
		return cli.ExitNo
	}
	return cli.ExitOK
}

// run searches the store q names.
func (q *intentsQuery) run(ctx context.Context) (*intentsAnswer, error) {
	db, err := q.pods.dbOf(ctx, q.db, q.search.Owner)
	switch {
	case err != nil:
		return nil, err
	case db == "": // placed on no pod: no intents
		return new(intentsAnswer), nil
	}
	if pgURL, _ := config.ParseDB(db); pgURL != "" {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		pg, err := pgstore.Open(ctx, pgURL, &pgstore.Options{MaxConns: 2, NoMigrate: true})
		if err != nil {
			return nil, err
		}
		defer pg.Close()
		return q.search.run(ctx, pgintents.NewReader(pg))
	}
	ro, c, err := boltadmin.OpenEither(db)
	if err != nil {
		return nil, err
	}
	if ro != nil {
		defer ro.Close()
		return q.search.run(ctx, boltintents.NewReader(ro))
	}
	defer c.Close()
	a := new(intentsAnswer)
	return a, c.GetJSON(ctx, "/intents?"+q.search.values().Encode(), a)
}

// parseIntentsArgs parses paymentsd intents' arguments. It returns nil
// and the exit code when they ask for nothing: -h, or a usage error.
func parseIntentsArgs(sio *cli.Stdio, args []string) (*intentsQuery, int) {
	fs := cli.NewFlagSet(sio, "paymentsd intents", "(--principal P | --token-stdin [--api-keys FILE]) [--since 24h] [--duplicates] [--db DB] [--json]", intentsAbout)
	q := new(intentsQuery)
	var since, until, after string
	fs.StringVar(&q.db, "db", config.Default().DB, "the bbolt data file, or a postgres:// URL, as given to the server")
	fs.StringVar(&q.search.Owner, "principal", "", `the principal: as listed in --api-keys, "dev:<hex>" in dev mode, or a client certificate's (spiffe://... or dns:<name>)`)
	fs.BoolVar(&q.tokenStdin, "token-stdin", false, "read the client's bearer token from standard input and search its principal's intents")
	fs.StringVar(&q.apiKeys, "api-keys", "", "with --token-stdin: the server's --api-keys file, to find the token's principal; without it, dev mode's")
	fs.StringVar(&since, "since", "24h", "the oldest creation time: a duration before now (90m, 24h) or a time (RFC 3339)")
	fs.StringVar(&until, "until", "", "the creation time the search stops before, as --since; none: now")
	fs.StringVar(&q.search.Payer, "payer", "", "only intents of this payer address")
	fs.StringVar(&q.search.Merchant, "merchant", "", "only intents of this merchant address")
	fs.StringVar(&q.search.Amount, "amount", "", "only intents of this amount, in the token's smallest unit")
	fs.BoolVar(&q.search.Duplicates, "duplicates", false, "list suspected double payments instead")
	fs.DurationVar(&q.search.Window, "window", intentsearch.DefaultWindow, "with --duplicates: how far apart two intents of one payment may be")
	fs.IntVar(&q.search.Limit, "limit", 50, "the most intents listed (not with --duplicates)")
	fs.StringVar(&after, "after", "", "list on from the position a listing printed as next")
	fs.BoolVar(&q.json, "json", false, "print JSON, for scripts")
	q.pods.define(fs)
	operands, code, err := cli.ParseArgs(fs, args, config.SharedDefaults)
	if err != nil {
		return nil, code
	}
	err = q.pods.check()
	now := time.Now()
	if err == nil {
		q.search.From, err = parseSince(since, now)
	}
	if err == nil && until != "" {
		q.search.To, err = parseSince(until, now)
	}
	if err == nil && after != "" {
		q.search.After, err = parsePosition(after)
	}
	switch {
	case err != nil:
		return nil, cli.UsageError(fs, "%v", err)
	case len(operands) > 0:
		return nil, cli.UsageError(fs, "unexpected arguments %q", operands)
	case q.db == "":
		return nil, cli.UsageError(fs, config.NoDB)
	case (q.search.Owner == "") == !q.tokenStdin:
		return nil, cli.UsageError(fs, "give one of --principal and --token-stdin")
	case envflags.Given(fs, "api-keys") && !q.tokenStdin:
		return nil, cli.UsageError(fs, "--api-keys goes with --token-stdin")
	}
	if err := q.search.check(); err != nil {
		return nil, cli.UsageError(fs, "%v", err)
	}
	if _, err := config.ParseDB(q.db); err != nil {
		return nil, cli.UsageError(fs, "%v", err)
	}
	return q, 0
}

// parseSince reads a time as --since takes it: a duration before now, or
// an RFC 3339 time.
func parseSince(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a duration before now (24h) nor an RFC 3339 time", v)
	}
	return t, nil
}

// parsePosition reads a position as formatPosition writes it.
func parsePosition(v string) (server.Position, error) {
	at, id, ok := strings.Cut(v, "/")
	t, err := time.Parse(time.RFC3339Nano, at)
	if !ok || err != nil || id == "" {
		return server.Position{}, fmt.Errorf("--after %q is no position: pass the next a listing printed", v)
	}
	return server.Position{CreateTime: t, ID: id}, nil
}

// formatPosition writes p for --after: its time, a slash, its id.
func formatPosition(p server.Position) string {
	if p == (server.Position{}) {
		return ""
	}
	return p.CreateTime.UTC().Format(time.RFC3339Nano) + "/" + p.ID
}

// intentSearch is a search as the command and the admin socket's route
// both take it.
type intentSearch struct {
	intentsearch.Query
	Duplicates bool
	Window     time.Duration
	Limit      int
	After      server.Position
}

// check refuses a search that asks for nothing sensible.
func (s intentSearch) check() error {
	switch {
	case s.Owner != "" && !auth.ValidPrincipal(s.Owner) && !auth.ValidDevPrincipal(s.Owner) && !auth.ValidCertPrincipal(s.Owner):
		return fmt.Errorf("principal %q names no principal", s.Owner)
	case s.Window <= 0:
		return errors.New("--window must be more than 0")
	case s.Limit < 1 || s.Limit > server.MaxPageSize:
		return fmt.Errorf("--limit must be 1 to %d", server.MaxPageSize)
	case !s.To.IsZero() && !s.To.After(s.From):
		return errors.New("--until must come after --since")
	}
	return nil
}

// values is s as the admin socket's route reads it (searchOf).
func (s intentSearch) values() url.Values {
	v := url.Values{"principal": {s.Owner}, "since": {s.From.Format(time.RFC3339Nano)},
		"payer": {s.Payer}, "merchant": {s.Merchant}, "amount": {s.Amount},
		"window": {s.Window.String()}, "limit": {strconv.Itoa(s.Limit)}, "after": {formatPosition(s.After)}}
	if !s.To.IsZero() {
		v.Set("until", s.To.Format(time.RFC3339Nano))
	}
	if s.Duplicates {
		v.Set("duplicates", "true")
	}
	return v
}
