# erpsync: every habit of the project in one place.
# Tests need the local Postgres (127.0.0.1:5432, user postgres, trust auth)
# or TEST_DATABASE_URL pointing at a server where they may create databases.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/erpsync/erpsync/internal/buildinfo.Version=$(VERSION)

.PHONY: build demo test test-short bench freshness fleet mutate lint fmt

## build: the static binary in ./bin/erpsync
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/erpsync ./cmd/erpsync

## demo: sync the built-in ERP simulator into the local database erpsync_demo
demo:
	$(GO) run ./cmd/erpsync demo

## test: every test, with the race detector, against the real Postgres (what CI runs)
test:
	$(GO) test -race -count=1 ./...

## test-short: the fast tests only (skips end-to-end runs of the binary)
test-short:
	$(GO) test -race -count=1 -short ./...

## bench: the performance report (N invoices, default 1,000,000; make bench N=100000), measured on
## the release binary bin/erpsync by cmd/erpsync-bench (which is not part of it), ending with the
## panel report of the warehouse dashboard's invoice panels per login (RUNS=1 for one run;
## BENCH_FLAGS=--panels=false skips the panel report, BENCH_FLAGS=--explain prints the plans of
## the panels that miss their goal); exits 1 when a goal is missed, after the whole report and the
## list of misses (BENCH_FLAGS=--check-goals=false: the report only). The goals are stated for
## 1,000,000 invoices: a smaller N lists the figures past one and checks none
N ?= 1000000
RUNS ?= 3
BENCH_FLAGS ?=
bench: build
	$(GO) run ./cmd/erpsync-bench --binary bin/erpsync --invoices $(N) --runs $(RUNS) $(BENCH_FLAGS)

## freshness: the freshness report, measured on bin/erpsync by cmd/erpsync-bench against the
## simulator at 100,000 and 1,000,000 invoices (100 a page, 100 ms an answer, the four list
## shapes), the daemon at the invoices' default schedules (follow, window, sweep): seconds from a
## new invoice to the warehouse, outside and during a complete sweep; from an edit 2 and 15 pages
## from the newest end and a deletion 2 pages from it (inside the window) to the warehouse; what
## an edit 500 pages back (outside it) waits for, derived from the sweep schedule and a measured
## sweep; ERP requests an hour per kind of run against sweeps back to back; the policy's curve at
## three budgets (a model). It exits 1 naming a goal missed (about an hour, mostly waiting for
## window runs; FRESHNESS_N=10000 for a quick look; FRESHNESS_FLAGS=--goal-invoices=100000 checks
## the goals at 100,000, see go run ./cmd/erpsync-bench freshness --help)
FRESHNESS_N ?= 100000,1000000
FRESHNESS_FLAGS ?=
freshness: build
	$(GO) run ./cmd/erpsync-bench freshness --binary bin/erpsync --invoices $(FRESHNESS_N) $(FRESHNESS_FLAGS)

## fleet: the fleet report: 200 sources x the 4 core streams, 3000 invoices each, two replicas of
## `erpsync run` for about 5 minutes (without -race: a report, not a timed test; ERPSYNC_FLEET_*
## override the sizes, ERPSYNC_FLEET_REPORT=file also writes it as markdown)
fleet:
	ERPSYNC_FLEET=full $(GO) test -count=1 -run '^TestRun$$/^KeepsAFleetExactAndFreshWithTwoReplicas$$' -v -timeout 30m ./internal/e2e/

## mutate: mutation testing of the code that decides what is deleted, committed and parsed, one
## file at a time with its own tests and the test cache off (gremlins, pinned, built into bin/);
## prints each file's efficacy beside its goal and the survivors, exits 1 when a goal is missed.
## Not part of CI: a file takes minutes. FILES=internal/sync/guard.go,... or PKG=internal/erp for
## some; MUTATE_FLAGS=--list for the targets; see docs/testing.md
FILES ?=
PKG ?=
MUTATE_FLAGS ?=
mutate:
	$(GO) run ./cmd/erpsync-mutate --files '$(FILES)' --pkg '$(PKG)' $(MUTATE_FLAGS)

## lint: formatting and vet
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

## fmt: format the code
fmt:
	gofmt -w $$(git ls-files '*.go')
