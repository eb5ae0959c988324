package main

import (
	"path/filepath"
	"testing"

	"github.com/paymentsd/paymentsd/daemon/testkit/proctest"
)

// startConsumer starts the example with args, logging to name.log in dir.
func startConsumer(t testing.TB, dir, name string, env []string, args ...string) *proctest.Proc {
	t.Helper()
	return proctest.Start(t, binary(t), filepath.Join(dir, name+".log"), env, args...)
}

// stopConsumer stops p with SIGTERM and fails the test on an unclean exit.
func stopConsumer(t testing.TB, p *proctest.Proc) {
	t.Helper()
	if err := p.Stop(); err != nil {
		t.Errorf("%v\nlast lines of %s:\n%s", err, p.Log, p.Tail(30))
	}
}
