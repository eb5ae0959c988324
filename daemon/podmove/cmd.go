package podmove

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/paymentsd/paymentsd/daemon/config"
	"github.com/paymentsd/paymentsd/daemon/internal/cli"
	"github.com/paymentsd/paymentsd/daemon/placement"
	"github.com/paymentsd/paymentsd/pgstore"
)

// about is what paymentsd move -h says above its flags.
const about = `Moves a principal's idempotency records and payment intents to another pod
of the --pods file, while the replicas serve: its calls are refused for
the move's second or so (UNAVAILABLE, retry after 1s), and every key
replays afterwards the bytes it replayed before. Each step is recorded in
the placement directory: a move that was stopped (killed, a database
down) is finished by running the same command again, or undone, before
its flip, by moving the principal to the pod it is on. It logs each step.
Exit 0 once the principal lives on --to, 3 when the move failed.`

// Run is paymentsd move.
func Run(ctx context.Context, sio *cli.Stdio, args []string) int {
	const name = "paymentsd move"
	fs := cli.NewFlagSet(sio, name, "--principal P --to POD [--pods FILE] [--placement-etcd URLS] [--timeout D]", about)
	c := config.Default()
	fs.StringVar(&c.PodsPath, "pods", "", "the pods file, as given to the servers")
	fs.StringVar(&c.PlacementEtcd, "placement-etcd", "", "the placement directory's etcd client URLs, comma-separated, as given to the servers")
	fs.StringVar(&c.PlacementPrefix, "placement-prefix", c.PlacementPrefix, "the directory's etcd key prefix, as given to the servers")
	principal := fs.String("principal", "", "the principal to move")
	to := fs.String("to", "", "the pod to move it to")
	timeout := fs.Duration("timeout", time.Minute, "how long the move may take, waiting for the principal's calls in progress included; run it again to go on")
	operands, code, err := cli.ParseArgs(fs, args, config.SharedDefaults)
	switch {
	case err != nil:
		return code
	case len(operands) > 0:
		return cli.UsageError(fs, "unexpected arguments %q", operands)
	case *principal == "" || *to == "":
		return cli.UsageError(fs, "--principal and --to are required")
	case c.PodsPath == "" || c.PlacementEtcd == "":
		return cli.UsageError(fs, "--pods and --placement-etcd are required, as the servers have them")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	log := slog.New(slog.NewJSONHandler(sio.Err, nil))
	if err := move(ctx, c, log, *principal, *to); err != nil {
		return cli.Fail(sio, name, err)
	}
	return cli.ExitOK
}

// move opens the pods and the directory c names, and moves principal.
func move(ctx context.Context, c config.Config, log *slog.Logger, principal, to string) error {
	list, err := config.ReadPods(c.PodsPath)
	if err != nil {
		return err
	}
	m := &Mover{Pods: map[string]*pgstore.DB{}, Log: log, By: mover()}
	defer func() {
		for _, db := range m.Pods {
			db.Close()
		}
	}()
	var names []string
	for _, p := range list {
		db, err := pgstore.Open(ctx, p.URL, &pgstore.Options{NoMigrate: true, MaxConns: 4})
		if err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
		m.Pods[p.Name], names = db, append(names, p.Name)
	}
	m.Dir, err = placement.Open(ctx, placement.Config{Endpoints: c.Etcd(), Prefix: c.PlacementPrefix, Pods: names, Logger: log})
	if err != nil {
		return err
	}
	defer m.Dir.Close()
	// A mover killed holds its lock until its lease runs out: wait for it.
	for err = m.Move(ctx, principal, to); errors.Is(err, placement.ErrLocked); err = m.Move(ctx, principal, to) {
		log.Info("move: waiting for the other mover, or its lease to run out", "err", err.Error())
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w: run the command again to go on from the last step done", err)
	}
	return err
}

// mover names this process in the placement and the lock.
func mover() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("paymentsd move on %s pid %d", host, os.Getpid())
}
