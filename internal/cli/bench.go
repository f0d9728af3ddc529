package cli

import (
	"os"

	"github.com/erpsync/erpsync/internal/bench"
)

// cmdBench prints the performance report (make bench).
func cmdBench(e *env) error {
	fs, _ := e.flags("bench")
	o := bench.Options{AdminURL: demoAdminURL}
	fs.IntVar(&o.Invoices, "invoices", 1000000, "invoices to sync")
	fs.IntVar(&o.Baseline, "baseline-invoices", 10000, "invoices of the row-by-row baselines")
	fs.IntVar(&o.Runs, "runs", 3, "runs; the report gives medians")
	fs.IntVar(&o.PageSize, "page-size", 1000, "invoices per page")
	fs.IntVar(&o.Prefetch, "prefetch", 1, "pages fetched ahead of the page being written")
	if err := e.parse(fs); err != nil {
		return err
	}
	if u := e.getenv("TEST_DATABASE_URL"); u != "" {
		o.AdminURL = u
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	o.Binary = bin
	ctx, cancel := signalContext()
	defer cancel()
	return bench.Run(ctx, o, e.stdout)
}
