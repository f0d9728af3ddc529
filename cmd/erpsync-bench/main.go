// Command erpsync-bench prints the performance reports behind `make bench`
// and `make freshness`: it measures the erpsync binary it is given
// (--binary, the release build in bin/erpsync by default) against the
// simulator. It is not part of the released binary: it creates and drops
// databases on the server TEST_DATABASE_URL names.
//
//	erpsync-bench [flags]            the sync report: the COPY limit of this machine, re-syncs, panels
//	erpsync-bench freshness [flags]  the freshness report: new records, edits and deletions, what the schedules cost the ERP
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/erpsync/erpsync/internal/bench"
)

const defaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "freshness" {
		freshness(os.Args[2:])
		return
	}
	o := bench.Options{AdminURL: adminURL()}
	fs, binary := reportFlags("erpsync-bench", &o.PageSize, 1000)
	fs.IntVar(&o.Invoices, "invoices", 1000000, "invoices to sync")
	fs.IntVar(&o.Baseline, "baseline-invoices", 10000, "invoices of the row-by-row baselines")
	fs.IntVar(&o.Runs, "runs", 3, "runs; the report gives medians")
	fs.IntVar(&o.Prefetch, "prefetch", 1, "pages fetched ahead of the page being written")
	fs.BoolVar(&o.Panels, "panels", true, "the panel report: the dashboard's invoice panels as each login, against a typed copy (after the first run)")
	fs.StringVar(&o.Dashboard, "dashboard", "deploy/grafana/warehouse.json", "the `dashboard` of the panel report")
	fs.IntVar(&o.PanelRuns, "panel-runs", 5, "timed executions of each panel query, after one warm-up; the report gives medians")
	fs.BoolVar(&o.Explain, "explain", false, "print EXPLAIN (ANALYZE, BUFFERS) of every panel query that misses a goal, as that login")
	fs.IntVar(&o.GoalInvoices, "goal-invoices", 0, "the goals apply from this many invoices; a smaller report checks none (default 1000000)")
	checkGoals := fs.Bool("check-goals", true, "exit 1 when a goal is missed (false: the report only)")
	fs.Parse(os.Args[1:])
	err := measure(*binary, func(ctx context.Context, binary string) error {
		o.Binary = binary
		return bench.Run(ctx, o, os.Stdout)
	})
	var missed *bench.GoalsMissed
	if errors.As(err, &missed) && !*checkGoals {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "erpsync-bench: %v\n", err)
		os.Exit(1)
	}
}

// freshness runs the freshness report; it exits 1 when a goal is missed,
// naming it.
func freshness(args []string) {
	o := bench.FreshnessOptions{AdminURL: adminURL()}
	fs, binary := reportFlags("erpsync-bench freshness", &o.PageSize, 100)
	sizes := fs.String("invoices", "100000,1000000", "invoices of the simulator, a report for each (`list` separated by commas)")
	fs.DurationVar(&o.Latency, "latency", 0, "of each ERP answer once the warehouse is loaded (default 100ms)")
	fs.DurationVar(&o.Follow, "follow", 0, "the daemon's follow schedule, @every this (default the stream's, 30s)")
	fs.DurationVar(&o.WindowEvery, "window-every", 0, "the daemon's window schedule, @every this (default the stream's, 10m)")
	fs.IntVar(&o.Samples, "samples", 0, "new invoices per shape outside sweeps, and as many during sweeps (default 10)")
	fs.DurationVar(&o.Spread, "spread", 0, "over which they are issued, at random moments (default five follow intervals)")
	fs.DurationVar(&o.EditSpread, "edit-spread", 0, "over which the edits are made, at random moments (default one window interval)")
	editPages := fs.String("edit-pages", "2,15", "edits inside the window, this many pages from the list's newest end (`list` separated by commas)")
	fs.IntVar(&o.DeletePages, "delete-pages", 2, "a deletion this many pages from the list's newest end")
	fs.IntVar(&o.FarPages, "far-pages", 500, "an edit this many pages from the list's newest end, outside the window (left to the sweep)")
	budgets := fs.String("budgets", "1000,400,200", "the requests_per_hour the policy's curve is modelled at (`list` separated by commas)")
	fs.IntVar(&o.GoalInvoices, "goal-invoices", 0, "the goals on freshness and requests an hour apply from this many invoices (default 1000000)")
	fs.Parse(args)
	o.Sizes = positives("--invoices", *sizes)
	o.EditPages = positives("--edit-pages", *editPages)
	o.Budgets = positives("--budgets", *budgets)
	err := measure(*binary, func(ctx context.Context, binary string) error {
		o.Binary = binary
		return bench.Freshness(ctx, o, os.Stdout)
	})
	if err != nil {
		var missed *bench.GoalsMissed
		if errors.As(err, &missed) {
			fmt.Fprintf(os.Stderr, "erpsync-bench freshness: %d goal(s) missed:\n", len(missed.Misses))
			for _, g := range missed.Misses {
				fmt.Fprintf(os.Stderr, "  %s\n", g)
			}
		} else {
			fmt.Fprintf(os.Stderr, "erpsync-bench freshness: %v\n", err)
		}
		os.Exit(1)
	}
}

// positives reads a list of positive numbers separated by commas; it
// exits when one is not.
func positives(flag, list string) []int {
	var out []int
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "erpsync-bench freshness: %s %q: %q is not a positive number\n", flag, list, s)
			os.Exit(2)
		}
		out = append(out, n)
	}
	return out
}

// reportFlags are the flags both reports take: the binary to measure, and
// the page size (the simulator's cap and the page_size asked), with the
// report's default.
func reportFlags(name string, pageSize *int, defaultPageSize int) (fs *flag.FlagSet, binary *string) {
	fs = flag.NewFlagSet(name, flag.ExitOnError)
	binary = fs.String("binary", "bin/erpsync", "the erpsync `binary` to measure")
	fs.IntVar(pageSize, "page-size", defaultPageSize, "invoices per page: the simulator's cap and the page_size asked")
	return fs, binary
}

// measure runs a report on the binary to measure (absolute) until SIGINT
// or SIGTERM.
func measure(binary string, report func(ctx context.Context, binary string) error) error {
	bin := binaryPath(binary)
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	return report(ctx, bin)
}

// adminURL is the server where the reports create their databases.
func adminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return defaultAdminURL
}

// binaryPath is the binary to measure, absolute; it exits when there is
// none.
func binaryPath(binary string) string {
	bin, err := filepath.Abs(binary)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "erpsync-bench: --binary: %v (build it with make build)\n", err)
		os.Exit(2)
	}
	return bin
}
