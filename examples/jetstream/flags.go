package main

import (
	"errors"
	"flag"
	"os"
	"time"
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
	verbose  bool
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
	fs.BoolVar(&c.verbose, "v", false, "log every command")
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
	}
	return c, nil
}
