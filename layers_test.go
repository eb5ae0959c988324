package paymentsd_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// floors places every package of the module on a floor. A package, test
// kits included, may import only packages on floors below its own. Its
// _test.go files may use any package, as an external test package does:
// a store's tests run the conformance suite above it. docs/layout.md says
// what each package is for. A new package must be given a floor here,
// which is the moment to decide what it may depend on.
var floors = [][]string{
	// The files of the top directory, embedded: the OpenAPI document, the
	// descriptors, VERSION.
	{""},
	// Which build this is, from VERSION and the go command's stamp.
	{"internal/version"},
	// The ground: no idempotency, no payments. The test kits of testkit/
	// stand here too.
	{"internal/bearer", "gen/idempotency/v1", "gen/payments/v1", "internal/safefile", "internal/sealed",
		"internal/dirsync", "internal/filewatch", "internal/devcerts", "internal/envflags",
		"internal/grpcreflect", "internal/requestid", "internal/cli", "internal/openapitidy",
		"internal/traceexport", "internal/connlimit", "internal/logattr", "internal/memlimit", "internal/grpcslog", "server/strictcodec",
		"testkit/testclock", "testkit/natstest", "testkit/proctest", "testkit/faultproxy", "testkit/rawgrpc", "testkit/grpctest", "testkit/logbuf",
		"testkit/pgtest", "testkit/patroni"},
	// Contracts: the idempotency wire and store contracts, credentials,
	// TLS files.
	{"wire", "storage", "auth", "tlsreload"},
	// What a process knows of its records beyond its store, shared by the
	// stores.
	{"internal/ledger"},
	// The rules of exactly-once with no transport: fingerprint, claim, run,
	// store, replay.
	{"once"},
	// The interceptor, the stores, the payments domain.
	{"interceptor", "interceptor/retry", "memstore", "boltstore", "pgstore", "server"},
	// Adapters: what the daemon needs of a database, observers, a running
	// bbolt store's admin socket, the HTTP face, the search of a
	// principal's intents, the conformance suites and the kits that open
	// real stores.
	{"backend", "interceptor/tracing", "metrics", "boltstore/boltadmin", "httpapi", "intentsearch",
		"storage/storagetest", "intenttest", "boltstore/bolttest"},
	// The daemon's parts: its databases (intents beside their records) and
	// what operators are shown of a record. In daemon/: its configuration,
	// credential files, metrics, log and store health. The tests of once's
	// rules, which open stores as the conformance suite does.
	{"once/oncetest", "boltintents", "pgintents", "recordview",
		"daemon/config", "daemon/credfiles", "daemon/prom", "daemon/rpclog", "daemon/storehealth"},
	// What stands on the daemon's parts: the operator console, which shows
	// records as recordview does. In daemon/: the listeners, bound from the
	// configuration, and the health, record and release subcommands.
	{"console", "daemon/listeners", "daemon/healthcmd", "daemon/keycmd"},
	// Programs, and the generator of the Grafana dashboard.
	{"cmd/paymentsd", "bench", "deploy", "deploy/grafana/gen", "robustness", "examples/jetstream"},
}

const module = "github.com/paymentsd/paymentsd"

// TestLayers_NoImportFromALowerFloorToAHigherOne checks the import graph
// against floors: no package imports one on its own floor
// or above, and no package is missing from floors.
func TestLayers_NoImportFromALowerFloorToAHigherOne(t *testing.T) {
	floor := map[string]int{}
	for i, pkgs := range floors {
		for _, p := range pkgs {
			floor[p] = i
		}
	}
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		name := rel(p.ImportPath)
		own, ok := floor[name]
		if !ok {
			t.Errorf("package %q has no floor in layers_test.go: give it one", name)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) || imp == p.ImportPath {
				continue
			}
			if f, ok := floor[rel(imp)]; ok && f >= own {
				t.Errorf("%s (floor %d) imports %s (floor %d)", name, own, rel(imp), f)
			}
		}
	}
}

func rel(importPath string) string {
	return strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
}
