package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/paymentsd/paymentsd/once"
	"github.com/paymentsd/paymentsd/storage"
)

// config is what the flags say.
type config struct {
	natsURL  string
	user     string
	password string // from --password, else NATS_PASSWORD
	creds    string
	stream   string
	durable  string
	db       string // a bbolt file
	postgres string // where the PostgreSQL URL is read: a file, or env:NAME
	plain    bool
	workers  int
	fetch    int
	wait     time.Duration // once.Options.InFlightWait
	retry    time.Duration // the redelivery delay after a store failure
	lease    time.Duration // once.Options.Lease
	ttl      time.Duration // once.Options.TTL, and the streams' MaxAge under --setup
	sweep    time.Duration // how often expired records are deleted
	verbose  bool

	setup        bool          // create the streams and the durable consumer, then exit
	publish      string        // publish a command of this key, print its reply, then exit
	msgID        string        // the published command's Nats-Msg-Id
	replyTimeout time.Duration // how long --publish waits for the reply
}

// parseFlags reads the command line into a config.
func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("jetstream", flag.ContinueOnError)
	fs.StringVar(&c.natsURL, "nats", "nats://127.0.0.1:4222", "the NATS server's URL")
	fs.StringVar(&c.user, "user", "", "the NATS user (with --password)")
	fs.StringVar(&c.password, "password", os.Getenv("NATS_PASSWORD"), "the NATS user's password (default $NATS_PASSWORD)")
	fs.StringVar(&c.creds, "creds", "", "a NATS credentials file, instead of --user and --password")
	fs.StringVar(&c.stream, "stream", "PAYMENTS", "the stream of create commands")
	fs.StringVar(&c.durable, "durable", "creator", "the durable pull consumer to read them through")
	fs.StringVar(&c.db, "db", "paymentsd.db", "the bbolt file of the records and intents")
	fs.StringVar(&c.postgres, "postgres", "", "read a PostgreSQL URL from this file, or from env:NAME, instead of --db")
	fs.BoolVar(&c.plain, "plain", false, "create without the exactly-once core, for the benchmark only")
	fs.IntVar(&c.workers, "workers", 8, "commands handled at once")
	fs.IntVar(&c.fetch, "fetch", 64, "commands buffered from the broker")
	fs.DurationVar(&c.wait, "in-flight-wait", time.Second, "how long a duplicate waits for its first to end")
	fs.DurationVar(&c.retry, "retry-delay", time.Second, "the redelivery delay after a store failure")
	fs.DurationVar(&c.lease, "lease", once.DefaultLease, "how long a claim holds before a redelivery may take it over")
	fs.DurationVar(&c.ttl, "ttl", once.DefaultTTL, "how long a record lives; after it the key runs fresh (with --setup: the streams' MaxAge)")
	fs.DurationVar(&c.sweep, "sweep-interval", time.Minute, "how often expired records are deleted")
	fs.BoolVar(&c.verbose, "v", false, "log every command")
	fs.BoolVar(&c.setup, "setup", false, "create or update the streams and the durable consumer, as an admin user, then exit")
	fs.StringVar(&c.publish, "publish", "", "publish a create command with this key, its body read from standard input, as --user; print its reply, then exit")
	fs.StringVar(&c.msgID, "msg-id", "", "with --publish: the command's Nats-Msg-Id, for the broker's dedup window")
	fs.DurationVar(&c.replyTimeout, "reply-timeout", 30*time.Second, "with --publish: how long to wait for the reply")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, errors.New("no operands are taken")
	case c.creds != "" && c.user != "":
		return c, errors.New("give --creds or --user, not both")
	case c.workers < 1 || c.fetch < 1:
		return c, errors.New("--workers and --fetch must be at least 1")
	case c.lease <= 0 || c.ttl <= c.lease || c.ttl > storage.MaxTTL:
		return c, fmt.Errorf("need 0 < --lease < --ttl <= %v, got %v and %v", storage.MaxTTL, c.lease, c.ttl)
	case c.sweep <= 0:
		return c, errors.New("--sweep-interval must be positive")
	case c.setup && c.publish != "":
		return c, errors.New("give --setup or --publish, not both")
	case c.publish != "" && c.user == "":
		return c, errors.New("--publish needs --user: it publishes as that principal")
	case c.msgID != "" && c.publish == "":
		return c, errors.New("--msg-id goes with --publish")
	}
	return c, nil
}
