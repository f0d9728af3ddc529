package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/db"
)

// streamStatus is one line of `erpsync status`.
type streamStatus struct {
	Source          string     `json:"source"`
	Stream          string     `json:"stream"`
	LastRunStatus   string     `json:"last_run_status,omitempty"`
	LastRunStarted  *time.Time `json:"last_run_started,omitempty"`
	LastRunFinished *time.Time `json:"last_run_finished,omitempty"`
	LastError       string     `json:"last_error,omitempty"`
	LastSuccess     *time.Time `json:"last_success,omitempty"`
	FreshnessSecs   *float64   `json:"freshness_seconds,omitempty"`
	SweepInProgress bool       `json:"sweep_in_progress"`
	SweepPages      int64      `json:"sweep_pages"`
	SweepRows       int64      `json:"sweep_rows"`
	LastSweepDone   *time.Time `json:"last_sweep_completed,omitempty"`
	LastSweepRows   *int64     `json:"last_sweep_rows,omitempty"`
	Rows            int64      `json:"rows_last_run"`
}

const statusSQL = `
WITH keys AS (
    SELECT source, stream FROM erp.sync_checkpoints
    UNION SELECT DISTINCT source, stream FROM erp.sync_runs
), last AS (
    SELECT DISTINCT ON (source, stream) source, stream, status, started_at, finished_at, error, rows_seen
    FROM erp.sync_runs ORDER BY source, stream, id DESC
), lastok AS (
    SELECT source, stream, max(finished_at) AS finished_at
    FROM erp.sync_runs WHERE status = 'succeeded' GROUP BY source, stream
), lasterr AS (
    SELECT DISTINCT ON (source, stream) source, stream, error
    FROM erp.sync_runs WHERE status = 'failed' ORDER BY source, stream, id DESC
)
SELECT k.source, k.stream, coalesce(l.status, ''), l.started_at, l.finished_at,
       coalesce(CASE WHEN l.status = 'failed' THEN l.error ELSE e.error END, ''),
       ok.finished_at, extract(epoch FROM now() - ok.finished_at)::float8,
       c.sweep_id IS NOT NULL, coalesce(c.pages, 0), coalesce(c.rows, 0),
       c.last_sweep_completed_at, c.last_sweep_rows, coalesce(l.rows_seen, 0)
FROM keys k
LEFT JOIN last l USING (source, stream)
LEFT JOIN lastok ok USING (source, stream)
LEFT JOIN lasterr e USING (source, stream)
LEFT JOIN erp.sync_checkpoints c USING (source, stream)
ORDER BY k.source, k.stream`

func loadStatus(ctx context.Context, pool *pgxpool.Pool) ([]streamStatus, error) {
	rows, err := pool.Query(ctx, statusSQL)
	if err != nil {
		return nil, fmt.Errorf("reading status: %w", db.Describe(err))
	}
	defer rows.Close()
	var out []streamStatus
	for rows.Next() {
		var s streamStatus
		if err := rows.Scan(&s.Source, &s.Stream, &s.LastRunStatus, &s.LastRunStarted, &s.LastRunFinished, &s.LastError,
			&s.LastSuccess, &s.FreshnessSecs, &s.SweepInProgress, &s.SweepPages, &s.SweepRows, &s.LastSweepDone,
			&s.LastSweepRows, &s.Rows); err != nil {
			return nil, fmt.Errorf("reading status: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

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
	if err := cfg.RequireDatabase(); err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	pool, err := db.Open(ctx, cfg.DatabaseURL.Value())
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := loadStatus(ctx, pool)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if st == nil {
			st = []streamStatus{}
		}
		return enc.Encode(st)
	}
	printStatus(e.stdout, st)
	return nil
}

func printStatus(w io.Writer, st []streamStatus) {
	if len(st) == 0 {
		fmt.Fprintln(w, "no stream has run yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSTREAM\tLAST RUN\tFINISHED\tLAST SUCCESS\tFRESHNESS\tSWEEP\tLAST ERROR")
	for _, s := range st {
		sweep := "idle"
		if s.SweepInProgress {
			sweep = fmt.Sprintf("in progress: %d pages, %d rows", s.SweepPages, s.SweepRows)
		}
		fresh := "never"
		if s.FreshnessSecs != nil {
			fresh = (time.Duration(*s.FreshnessSecs) * time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Source, s.Stream, dash(s.LastRunStatus), ts(s.LastRunFinished),
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
