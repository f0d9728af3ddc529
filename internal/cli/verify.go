package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/erpsync/erpsync/internal/metrics"
	"github.com/erpsync/erpsync/internal/sync"
)

// cmdVerify re-reads the ERP and compares it with the warehouse, stream
// by stream, writing to neither: rows missing, extra or different, and
// the exact money sums per company, branch and month. It exits 0 when
// everything agrees and 1 when not, for a scheduled job; the job's
// metric goes to a textfile or a Pushgateway.
func cmdVerify(e *command) error {
	fs, cfgFile := e.flags("verify")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	sample := fs.Int("sample", 10, "ids listed per kind of difference")
	lockWait := fs.Duration("lock-wait", 15*time.Minute, "how long to wait for a stream a sync is writing")
	metricsFile := fs.String("metrics-file", "", "write erpsync_verify_* metrics to `file` (node_exporter textfile collector)")
	pushURL := fs.String("pushgateway", "", "push erpsync_verify_* metrics to the Pushgateway at `url`")
	if err := e.parse(fs); err != nil {
		return err
	}
	if *sample < 0 {
		return usageErrorf("--sample: %d is negative", *sample)
	}
	cfg, err := e.loadConfigForStreams(*cfgFile)
	if err != nil {
		return err
	}
	log := newLogger(cfg, e.term)
	ctx, cancel := e.signalContext()
	defer cancel()
	pool, err := openReader(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	var reports []sync.VerifyReport
	for _, src := range cfg.Sources {
		streams, err := e.streamsFor(src, e.positional())
		if err != nil {
			return err
		}
		t, err := targetOf(src, log, nil)
		if err != nil {
			return err
		}
		// Its own session: it is made read-only, and is not returned to
		// the pool.
		pc, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conn := pc.Hijack()
		reps, err := sync.Verify(ctx, conn, t, streams, sync.VerifyOptions{Sample: *sample, LockWait: *lockWait})
		conn.Close(ctx)
		sync.RevokeTokens([]sync.Target{t}, cfg.Shutdown.Revoke, log)
		if err != nil {
			return fmt.Errorf("source %s: %w", src.Name, err)
		}
		reports = append(reports, reps...)
	}

	if *asJSON {
		if err := e.writeJSON(reports); err != nil {
			return err
		}
	} else {
		printVerify(e.stdout, reports)
	}
	if *metricsFile != "" || *pushURL != "" {
		reg := metrics.Verification(verified(reports), time.Now())
		if *metricsFile != "" {
			if err := metrics.WriteTextfile(*metricsFile, reg); err != nil {
				return err
			}
		}
		if *pushURL != "" {
			if err := metrics.Push(*pushURL, reg); err != nil {
				return err
			}
		}
	}
	bad := 0
	for _, r := range reports {
		if !r.Agree() {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("the warehouse and the ERP differ in %d of %d streams; see above", bad, len(reports))
	}
	return nil
}

func verified(reports []sync.VerifyReport) []metrics.Verified {
	var out []metrics.Verified
	for _, r := range reports {
		if r.Skipped != "" {
			continue
		}
		v := metrics.Verified{Source: r.Source, Stream: r.Stream, Done: r.Problem == "", MismatchedRows: r.Mismatched()}
		for _, s := range r.Sums {
			if !s.Agree {
				v.MismatchedGroups++
			}
		}
		out = append(out, v)
	}
	return out
}

// printVerify prints one line per stream, then what differs.
func printVerify(w io.Writer, reports []sync.VerifyReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSTREAM\tERP ROWS\tWAREHOUSE ROWS\tMISSING\tEXTRA\tDIFFERENT\tREJECTED\tSUMS AGREE\tRESULT")
	for _, r := range reports {
		if r.Problem != "" || r.Skipped != "" {
			result := "skipped: " + r.Skipped
			if r.Problem != "" {
				result = "NOT VERIFIED: " + r.Problem
			}
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t%s\n", r.Source, r.Stream, oneLine(result, 100))
			continue
		}
		agree := 0
		for _, s := range r.Sums {
			if s.Agree {
				agree++
			}
		}
		result := "agree"
		if !r.Agree() {
			result = "DIFFER"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d/%d\t%s\n", r.Source, r.Stream, r.ERPRows, r.WarehouseRows,
			r.Missing, r.Extra, r.Different, r.Rejected, agree, len(r.Sums), result)
	}
	tw.Flush()
	for _, r := range reports {
		name := r.Source + "/" + r.Stream
		for _, k := range []struct {
			what string
			n    int64
			ids  []string
		}{{"missing from the warehouse", r.Missing, r.MissingIDs}, {"live in the warehouse, no longer listed", r.Extra, r.ExtraIDs},
			{"different", r.Different, r.DifferentIDs}} {
			if k.n > 0 {
				fmt.Fprintf(w, "%s: %d %s: %s%s\n", name, k.n, k.what, strings.Join(k.ids, ", "), more(k.n, len(k.ids)))
			}
		}
		for _, s := range r.Sums {
			if !s.Agree {
				fmt.Fprintf(w, "%s: sum of %s, company %s branch %s month %s: ERP %s, warehouse %s (difference %s)\n", name, s.Column,
					s.CompanyID, s.BranchID, dash(s.Month), s.ERP, s.Warehouse, s.Warehouse.Sub(s.ERP))
			}
		}
	}
}

func more(n int64, shown int) string {
	if n > int64(shown) {
		return fmt.Sprintf(" (and %d more)", n-int64(shown))
	}
	return ""
}
