// Command erpsync-bench prints the performance report behind `make bench`:
// it measures the erpsync binary it is given (--binary, the release build
// in bin/erpsync by default) against the simulator and the COPY limit of
// this machine. It is not part of the released binary: it creates and
// drops databases on the server TEST_DATABASE_URL names.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/erpsync/erpsync/internal/bench"
)

func main() {
	o := bench.Options{AdminURL: "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"}
	fs := flag.NewFlagSet("erpsync-bench", flag.ExitOnError)
	binary := fs.String("binary", "bin/erpsync", "the erpsync `binary` to measure")
	fs.IntVar(&o.Invoices, "invoices", 1000000, "invoices to sync")
	fs.IntVar(&o.Baseline, "baseline-invoices", 10000, "invoices of the row-by-row baselines")
	fs.IntVar(&o.Runs, "runs", 3, "runs; the report gives medians")
	fs.IntVar(&o.PageSize, "page-size", 1000, "invoices per page")
	fs.IntVar(&o.Prefetch, "prefetch", 1, "pages fetched ahead of the page being written")
	fs.BoolVar(&o.Panels, "panels", true, "the panel report: the dashboard's invoice panels as each login, against a typed copy (after the first run)")
	fs.StringVar(&o.Dashboard, "dashboard", "deploy/grafana/warehouse.json", "the `dashboard` of the panel report")
	fs.IntVar(&o.PanelRuns, "panel-runs", 5, "timed executions of each panel query, after one warm-up; the report gives medians")
	fs.BoolVar(&o.Explain, "explain", false, "print EXPLAIN (ANALYZE, BUFFERS) of every panel query that misses a goal, as that login")
	checkGoals := fs.Bool("check-goals", true, "exit 1 when a goal is missed (false: the report only)")
	fs.Parse(os.Args[1:])
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		o.AdminURL = u
	}
	bin, err := filepath.Abs(*binary)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "erpsync-bench: --binary: %v (build it with make build)\n", err)
		os.Exit(2)
	}
	o.Binary = bin
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	err = bench.Run(ctx, o, os.Stdout)
	var missed *bench.GoalsMissed
	if errors.As(err, &missed) && !*checkGoals {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "erpsync-bench: %v\n", err)
		os.Exit(1)
	}
}
