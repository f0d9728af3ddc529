package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

func cmdStatus(e *env) error {
	fs, cfgFile := e.flags("status")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := e.parse(fs); err != nil {
		return err
	}
	cfg, err := e.loadConfig(*cfgFile, false)
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	pool, err := openPool(ctx, cfg, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := db.CheckSchema(ctx, pool); err != nil {
		return err
	}
	st, err := db.LoadStatus(ctx, pool)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if st == nil {
			st = []model.StreamStatus{}
		}
		return enc.Encode(st)
	}
	printStatus(e.stdout, st)
	return nil
}

func printStatus(w io.Writer, st []model.StreamStatus) {
	if len(st) == 0 {
		fmt.Fprintln(w, "no stream has run yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSTREAM\tLAST RUN\tFINISHED\tDATA AS OF\tFRESHNESS\tSWEEP\tLAST ERROR")
	for _, s := range st {
		sweep := "idle"
		if s.SweepInProgress {
			sweep = fmt.Sprintf("in progress: %d pages, %d rows", s.SweepPages, s.SweepRows)
		}
		fresh := "never"
		if s.FreshnessSecs != nil {
			fresh = (time.Duration(*s.FreshnessSecs) * time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Source, s.Stream, dash(string(s.LastRunStatus)), ts(s.LastRunFinished),
			ts(s.LastSuccess), fresh, sweep, dash(oneLine(s.LastError, 80)))
	}
	tw.Flush()
}

func ts(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string, n int) string {
	for i, c := range s {
		if c == '\n' || i >= n {
			return s[:i] + "..."
		}
	}
	return s
}
