SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DELETE_ON_ERROR:
.DEFAULT_GOAL := test

# buf, protoc-gen-go and protoc-gen-go-grpc are pinned in tools/go.mod and run
# through `go tool`, so a fresh clone needs nothing but Go.
BUF := go tool -modfile=tools/go.mod buf
STATICCHECK := go tool -modfile=$(CURDIR)/tools/go.mod staticcheck
DEADCODE := go tool -modfile=$(CURDIR)/tools/go.mod deadcode -test
# The build tags, each a variant staticcheck reads too: the
# bench's baselines, its profiler, and the robustness suite's builds.
BUILD_VARIANTS := benchbaseline benchnolimits benchpprof robustness_broken robustness_durable

# The modules of the repository: the library at the top, then metrics, the
# service (daemon), the deployment files' tests and the examples (see
# docs/layout.md). Each is built and tested against its own go.mod, as
# those who depend on it get it.
MODULES := . metrics daemon deploy examples
GHZ_VERSION := v0.120.0
# The binaries we hand out say which commit they were built from
# (paymentsd version) wherever git can tell, even where GOFLAGS turns that
# off (-buildvcs=false).
STAMP := -buildvcs=auto
# The image's name and build context (make image).
IMAGE ?= paymentsd:$(strip $(file < VERSION))
IMAGE_CONTEXT ?= bin/image
# The image's OCI labels: the release, the commit (+dirty when the tree has
# changes, as paymentsd version says) and when it was built, in UTC.
IMAGE_REVISION = $(shell git rev-parse HEAD 2>/dev/null || echo unknown)$(if $(shell git status --porcelain 2>/dev/null),+dirty)
IMAGE_ARGS = --build-arg VERSION=$(strip $(file < VERSION)) --build-arg REVISION=$(IMAGE_REVISION) \
	--build-arg CREATED=$(shell date -u +%Y-%m-%dT%H:%M:%SZ)

.PHONY: run test lint generate crashtest robustness bench certs image image-context

## run: start paymentsd in dev mode: gRPC on localhost:50051, HTTP/JSON on
## localhost:8080, data in ./data/
## (flags through ARGS, e.g. make run ARGS='--in-flight-wait 5s'). The
## binary is run itself, not through go run, so that Ctrl-C reaches it
## alone and its clean exit is what make sees.
run:
	go build -C daemon $(STAMP) -o ../bin/paymentsd ./cmd/paymentsd
	exec bin/paymentsd $(ARGS)

## certs: a development CA and server and client certificates in ./certs/,
## to try TLS and mutual TLS (never for production); refuses to overwrite
certs:
	go build -C daemon -o ../bin/paymentsd ./cmd/paymentsd
	bin/paymentsd dev-certs certs

## test: every test of every module, with the race detector. grpcurl
## (tools/go.mod), which the TLS tests run, is built first, so that its
## build, minutes on a cold cache, is not counted in their package's timeout.
## The Patroni kit's own test runs alone, last: it checks that a leader keeps
## its lock through an etcd election, which the clusters of the packages
## tested beside it can starve on two cores.
test:
	go build -modfile=tools/go.mod -o /dev/null github.com/fullstorydev/grpcurl/cmd/grpcurl
	for m in $(MODULES); do go test -C $$m -race -count=1 -timeout 25m $$(go list -C $$m ./... | grep -v '/daemon/testkit/patroni$$'); done
	go test -C daemon -race -count=1 -timeout 10m ./testkit/patroni

## crashtest: kill -9 paymentsd under load for 200 rounds; fails on a
## single orphan intent (make test runs a 20-round version). Its
## PostgreSQL twin, three replicas killed in turn, the database restarted
## and one replica's connections cut, runs 30 rounds here (6 in make test;
## PAYMENTSD_REPLICA_ROUNDS sets them). The failover test, three replicas
## on a primary with a synchronous standby, the primary killed with
## SIGKILL (every third time silenced with SIGSTOP) and the standby
## promoted, fails over 10 times here, in about 4 minutes (once in make
## test; PAYMENTSD_FAILOVER_ROUNDS sets them). The Patroni test, three
## replicas on three PostgreSQL members under Patroni and etcd, runs 10
## leader kills, 3 switchovers, 3 pauses past the TTL and an etcd member
## killed here (each kind once in make test). The pods test, three
## replicas on two pods, kills one pod's PostgreSQL 20 times (twice in make
## test; PAYMENTSD_PODS_ROUNDS sets them), then on two Patroni clusters,
## pod b's leader killed and failed over as often (not in make test)
crashtest:
	PAYMENTSD_CRASH_ROUNDS=200 PAYMENTSD_FAILOVER_ROUNDS=10 PAYMENTSD_PATRONI_ROUNDS=crashtest PAYMENTSD_PODS_ROUNDS=20 go test -C daemon -count=1 -timeout 60m -v -run '^TestCrash' ./cmd/paymentsd

## robustness: the robustness suite for about 30 minutes: 20 runs on bbolt
## and 20 on three PostgreSQL replicas, random operations under a seeded
## schedule of faults (each kind in turn), every history checked with
## porcupine; 5 runs of about a minute on three replicas on a Patroni
## cluster (PAYMENTSD_ROBUSTNESS_PATRONI_RUNS), its leader killed, switched
## over and paused past the TTL, an etcd member killed; 10 runs on three
## replicas on two pods (PAYMENTSD_ROBUSTNESS_PODS_RUNS), a pod's
## PostgreSQL killed, a principal moved by paymentsd move, an etcd member
## killed; then 20 message
## runs of examples/jetstream on each backend, with duplicates, reuses,
## SIGKILLs, pauses past AckWait and nats-server restarts; make test runs
## one short run of each. A failure names its seed and how to replay its
## schedule (PAYMENTSD_ROBUSTNESS_SEED=... PAYMENTSD_ROBUSTNESS_RUNS=1, or
## PAYMENTSD_ROBUSTNESS_PATRONI_RUNS=1, PAYMENTSD_ROBUSTNESS_PODS_RUNS=1) and where its report went
## (PAYMENTSD_ROBUSTNESS_OUT)
robustness:
	PAYMENTSD_ROBUSTNESS_RUNS=$${PAYMENTSD_ROBUSTNESS_RUNS:-20} PAYMENTSD_ROBUSTNESS_DURATION=$${PAYMENTSD_ROBUSTNESS_DURATION:-10s} \
	PAYMENTSD_ROBUSTNESS_PATRONI_RUNS=$${PAYMENTSD_ROBUSTNESS_PATRONI_RUNS:-5} PAYMENTSD_ROBUSTNESS_PODS_RUNS=$${PAYMENTSD_ROBUSTNESS_PODS_RUNS:-10} \
		go test -C daemon -count=1 -timeout 55m -v -run '^TestRobustness' ./robustness

## bench: Go benchmarks of the store, the interceptor and the HTTP face's
## observation, then ghz against the real binary with and without the
## interceptor (and without the limits), the data file's bytes per create,
## and PostgreSQL's instructions per create counted by valgrind (see
## BENCHMARKS.md)
bench: bin/ghz
	go build -C daemon -o ../bin/paymentsd ./cmd/paymentsd
	go build -C daemon -tags benchbaseline -o ../bin/paymentsd-baseline ./cmd/paymentsd
	go build -C daemon -tags benchnolimits -o ../bin/paymentsd-nolimits ./cmd/paymentsd
	go build -C daemon -o ../bin/bench ./bench
	go test -run '^$$' -bench . -benchmem -count 3 ./boltstore ./interceptor
	go test -C daemon -run '^$$' -bench . -benchmem -count 3 ./httpapi
	PAYMENTSD_SCALE_RECORDS=1000000 go test -count=1 -run '^TestScale$$' -v -timeout 20m ./boltstore
	bin/bench
	bin/bench -disk 6000,100000
	daemon/bench/pg-instructions.sh

bin/ghz:
	GOBIN=$(CURDIR)/bin go install github.com/bojand/ghz/cmd/ghz@$(GHZ_VERSION)

## lint: buf lint; go vet, staticcheck and deadcode of every module (both
## pinned in tools/go.mod); gofmt; and the house's shape: no package
## importing a floor above its own, no folders importing each other, no
## function over 60 lines, daemon/cmd/paymentsd under 900 lines
## (layers_test.go, shape_test.go). deadcode starts from the daemon's
## programs and every test, the library's included; an Example without an
## Output comment is compiled, never run, so it is not dead
lint:
	$(BUF) lint
	for m in $(MODULES); do go vet -C $$m ./...; done
	for m in $(MODULES); do (cd $$m && $(STATICCHECK) ./...); done
	for tags in $(BUILD_VARIANTS); do for m in . daemon; do (cd $$m && $(STATICCHECK) -tags $$tags ./...); done; done
	mkdir -p bin
	(cd daemon && $(DEADCODE) -filter '^github.com/paymentsd/paymentsd' ./... github.com/paymentsd/paymentsd/...) > bin/deadcode.txt
	for m in deploy examples; do (cd $$m && $(DEADCODE) -filter "^github.com/paymentsd/paymentsd/$$m" ./...); done >> bin/deadcode.txt
	@! grep -v ': unreachable func: Example' bin/deadcode.txt || { echo 'deadcode: nothing reaches the functions above: delete them'; exit 1; }
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt: files above need formatting'; exit 1; }
	go test -count=1 -run '^(TestLayers|TestShape)_' .

## generate: regenerate gen/ (the library's stored record) and daemon/gen/
## (the service) from proto/, and the descriptors with their
## comments that paymentsd's server reflection serves; openapitidy then
## drops the OpenAPI definitions nothing uses, makes the cancel's empty
## body optional, declares the echoed Idempotency-Key on every answer of
## create and cancel, and sets info.version to VERSION's release, which
## protoc-gen-openapiv2 has no option for. Then the Grafana dashboard,
## deploy/grafana/paymentsd.json, from its Go source (deploy/grafana/gen)
generate:
	$(BUF) generate --template buf.gen.yaml --path proto/idempotency
	$(BUF) generate --template buf.gen.payments.yaml --path proto/payments
	$(BUF) generate --template buf.gen.openapi.yaml
	go run -C daemon ./internal/openapitidy -version "$$(cat VERSION)" gen/payments/v1/payments.swagger.json
	$(BUF) build --exclude-imports -o daemon/gen/descriptors.binpb
	go run -C deploy ./grafana/gen grafana/paymentsd.json

## image: the container image $(IMAGE) (Containerfile) with Podman, or
## Buildah when Podman is missing (apt-get install podman): the static
## binary (CGO off, time zones embedded) built here into the build context
## $(IMAGE_CONTEXT)/, on scratch; no base image is pulled. Built without
## the layer cache: Podman and Buildah reuse a cached LABEL layer whatever
## its build arguments, which would keep an earlier build's created label,
## and each layer is a copy of a file built just before, nothing to save
image: image-context
	if command -v podman >/dev/null; then \
	  podman build --no-cache --format docker $(IMAGE_ARGS) -f Containerfile -t $(IMAGE) $(IMAGE_CONTEXT); \
	elif command -v buildah >/dev/null; then \
	  buildah bud --no-cache --format docker $(IMAGE_ARGS) -f Containerfile -t $(IMAGE) $(IMAGE_CONTEXT); \
	else \
	  echo 'make image: needs podman or buildah (apt-get install podman)'; exit 1; \
	fi

## image-context: the Containerfile's build context in $(IMAGE_CONTEXT)/:
## the static binary without its symbol table and debug information (a
## panic's stack trace keeps its names and lines), this machine's CA
## certificates, LICENSE, NOTICE and the empty data directory (for docker
## build -f Containerfile $(IMAGE_CONTEXT))
image-context:
	rm -rf $(IMAGE_CONTEXT)
	mkdir -p $(IMAGE_CONTEXT)/data/paymentsd
	chmod 0700 $(IMAGE_CONTEXT)/data/paymentsd
	CGO_ENABLED=0 go build -C daemon $(STAMP) -trimpath -tags timetzdata -ldflags='-s -w' -o $(abspath $(IMAGE_CONTEXT))/paymentsd ./cmd/paymentsd
	cp /etc/ssl/certs/ca-certificates.crt LICENSE NOTICE $(IMAGE_CONTEXT)/
