package paymentsd_test

import (
	"encoding/json"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// floors places every package of the repository's modules on a floor. A
// package, test kits included, may import only packages on floors below
// its own. Its _test.go files may use any package, as an external test
// package does: a store's tests run the conformance suite above it.
// docs/layout.md says what each package is for. A new package must be
// given a floor here, which is the moment to decide what it may depend on.
var floors = [][]string{
	// The files the top directories embed: VERSION, and the service's
	// OpenAPI document and descriptors.
	{"", "daemon"},
	// Which build this is, from VERSION and the go command's stamp.
	{"daemon/internal/version"},
	// The ground: no idempotency, no payments. The test kits stand here
	// too, and the placement directory, which knows etcd and pod names.
	{"internal/bearer", "gen/idempotency/v1", "daemon/gen/payments/v1", "internal/safefile", "internal/sealed",
		"internal/dirsync", "daemon/internal/filewatch", "daemon/internal/devcerts", "daemon/internal/envflags",
		"daemon/internal/grpcreflect", "daemon/internal/requestid", "daemon/internal/cli", "daemon/internal/openapitidy",
		"daemon/internal/traceexport", "daemon/internal/connlimit", "daemon/internal/logattr", "daemon/internal/memlimit",
		"daemon/internal/grpcslog", "daemon/server/strictcodec", "daemon/placement",
		"internal/testkit/testclock", "internal/testkit/faultproxy", "internal/testkit/pgtest",
		"daemon/testkit/natstest", "daemon/testkit/proctest", "daemon/testkit/rawgrpc", "daemon/testkit/grpctest",
		"daemon/testkit/logbuf", "daemon/testkit/patroni", "daemon/testkit/etcdtest"},
	// Contracts: the idempotency wire and store contracts, credentials,
	// TLS files.
	{"wire", "storage", "daemon/auth", "daemon/tlsreload"},
	// What a process knows of its records beyond its store, shared by the
	// stores.
	{"internal/ledger"},
	// The rules of exactly-once with no transport: fingerprint, claim, run,
	// store, replay.
	{"once"},
	// The interceptor, the stores, the payments domain.
	{"interceptor", "interceptor/retry", "memstore", "boltstore", "pgstore", "daemon/server"},
	// Adapters: what the daemon needs of a database, observers, a running
	// bbolt store's admin socket, the HTTP face, the search of a
	// principal's intents, the conformance suites and the kits that open
	// real stores.
	{"daemon/intents", "interceptor/tracing", "metrics", "daemon/boltadmin", "daemon/httpapi", "daemon/intentsearch",
		"storage/storagetest", "daemon/intents/intenttest", "boltstore/bolttest"},
	// The daemon's parts: its databases (intents beside their records),
	// what operators are shown of a record, its configuration, credential
	// files, metrics, log and store health. The tests of once's rules,
	// which open stores as the conformance suite does.
	{"once/oncetest", "daemon/intents/boltintents", "daemon/intents/pgintents", "daemon/recordview",
		"daemon/config", "daemon/credfiles", "daemon/prom", "daemon/rpclog", "daemon/storehealth"},
	// What stands on the daemon's parts: the operator console, which shows
	// records as recordview does, the listeners, bound from the
	// configuration, the router over several pods, opened from it, the
	// move of a principal between pods, and the health, record and release
	// subcommands, and those that make credentials.
	{"daemon/console", "daemon/listeners", "daemon/intents/pods", "daemon/podmove", "daemon/healthcmd", "daemon/keycmd", "daemon/credcmd"},
	// Programs, and the generator of the Grafana dashboard.
	{"daemon/cmd/paymentsd", "daemon/bench", "deploy", "deploy/grafana/gen", "daemon/robustness", "examples/jetstream"},
}

const module = "github.com/paymentsd/paymentsd"

// modules are the directories of the repository's modules (see
// docs/layout.md), each listed by go list from its own directory.
var modules = []string{".", "metrics", "daemon", "deploy", "examples"}

// goPackage is what the layer tests read of a package.
type goPackage struct {
	ImportPath string
	Imports    []string
}

// listPackages returns every package of every module.
func listPackages(t *testing.T) []goPackage {
	t.Helper()
	var all []goPackage
	for _, dir := range modules {
		cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", dir, err)
		}
		dec := json.NewDecoder(strings.NewReader(string(out)))
		for {
			var p goPackage
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			all = append(all, p)
		}
	}
	return all
}

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
	for _, p := range listPackages(t) {
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

// TestLayers_NoFolderImportsOneThatImportsItBack checks the folders: a
// folder holds a package and those below it, such as once/ with
// once/oncetest. No chain of imports between folders may lead back to
// the folder it left. The directories that only group folders (daemon/,
// internal/, testkit/, gen/) are not folders themselves.
func TestLayers_NoFolderImportsOneThatImportsItBack(t *testing.T) {
	edges := map[string]map[string]bool{}
	for _, p := range listPackages(t) {
		from := folder(rel(p.ImportPath))
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			if to := folder(rel(imp)); to != from {
				if edges[from] == nil {
					edges[from] = map[string]bool{}
				}
				edges[from][to] = true
			}
		}
	}
	// A depth-first walk: a folder met again while still on the path
	// closes a circle.
	state := map[string]int{} // 1 on the path, 2 done
	var path []string
	var walk func(f string)
	walk = func(f string) {
		state[f] = 1
		path = append(path, f)
		for _, to := range slices.Sorted(maps.Keys(edges[f])) {
			switch state[to] {
			case 0:
				walk(to)
			case 1:
				i := slices.Index(path, to)
				t.Errorf("folders import each other back: %s -> %s; move what the lower one needs below it", strings.Join(path[i:], " -> "), to)
			}
		}
		path = path[:len(path)-1]
		state[f] = 2
	}
	for _, f := range slices.Sorted(maps.Keys(edges)) {
		if state[f] == 0 {
			walk(f)
		}
	}
}

// folder is the folder a package is in: its path up to and including the
// first element that is not a grouping directory.
func folder(pkg string) string {
	parts := strings.Split(pkg, "/")
	for i, p := range parts {
		switch p {
		case "daemon", "internal", "testkit", "gen":
			continue
		}
		return strings.Join(parts[:i+1], "/")
	}
	return pkg
}

func rel(importPath string) string {
	return strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
}
