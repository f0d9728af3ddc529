package db

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/model"
)

// statusSQL takes freshness from erp.stream_freshness, the one definition
// analysts, `erpsync status` and the metrics share: the time of the last
// completed sweep, and of the last follow and window runs. Streams that never completed one still show, from
// their runs. Runs from before logins (login NULL) show as a line of
// their own only until a login of the stream has run: that login claimed
// their checkpoint and speaks for the stream from then on. The last error
// is that of the last run that ended, if it failed: a success after a
// failure clears it (erp.stream_failures keeps the last failure).
const statusSQL = `
WITH keys AS (
    SELECT source, stream, login FROM erp.sync_checkpoints
    UNION SELECT DISTINCT source, stream, coalesce(login, '') FROM erp.sync_runs
), last AS (
    SELECT DISTINCT ON (source, stream, coalesce(login, '')) source, stream, coalesce(login, '') AS login,
           id, status, started_at, finished_at, error, rows_seen, kind, host, pid
    FROM erp.sync_runs ORDER BY source, stream, coalesce(login, ''), id DESC
), ended AS (
    SELECT DISTINCT ON (source, stream, coalesce(login, '')) source, stream, coalesce(login, '') AS login, status, error
    FROM erp.sync_runs WHERE status <> $2 ORDER BY source, stream, coalesce(login, ''), id DESC
)
SELECT k.source, k.stream, k.login, coalesce(l.id, 0), coalesce(l.status, ''), coalesce(l.kind, ''), coalesce(l.host, ''), coalesce(l.pid, 0),
       l.started_at, l.finished_at,
       coalesce(CASE WHEN e.status = $1 THEN e.error END, ''),
       f.last_sweep_completed_at, extract(epoch FROM f.age)::float8,
       coalesce(f.sweep_in_progress, false), coalesce(c.pages, 0), coalesce(c.rows, 0), c.cursor IS NOT NULL,
       c.last_sweep_rows, coalesce(l.rows_seen, 0), coalesce(c.held_deletions, 0),
       coalesce(c.warning, ''), coalesce(c.list_scope, ''),
       coalesce(f.list_order, ''), f.last_follow_at, extract(epoch FROM f.new_records_age)::float8, coalesce(f.last_follow_swept, ''),
       f.last_window_at, extract(epoch FROM f.recent_changes_age)::float8, coalesce(w.pages, 0), coalesce(w.from_id, ''), coalesce(w.size_why, '')
FROM keys k
LEFT JOIN last l USING (source, stream, login)
LEFT JOIN ended e USING (source, stream, login)
LEFT JOIN erp.stream_freshness f USING (source, stream, login)
LEFT JOIN erp.sync_checkpoints c USING (source, stream, login)
LEFT JOIN erp.sync_window w USING (source, stream, login)
WHERE k.login <> '' OR NOT EXISTS (SELECT 1 FROM keys o WHERE o.source = k.source AND o.stream = k.stream AND o.login <> '')
ORDER BY k.source, k.stream, k.login`

// LoadStatus returns where every (source, stream, login) that ever ran
// stands, and whether a run recorded as running still has its process
// (on the primary, which holds the runs' locks).
func LoadStatus(ctx context.Context, q Querier) ([]model.StreamStatus, error) {
	rows, err := q.Query(ctx, statusSQL, model.StatusFailed, model.StatusRunning)
	if err != nil {
		return nil, fmt.Errorf("reading status: %w", Describe(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.StreamStatus, error) {
		var s model.StreamStatus
		err := r.Scan(&s.Source, &s.Stream, &s.Login, &s.LastRunID, &s.LastRunStatus, &s.LastRunKind, &s.LastRunHost, &s.LastRunPID,
			&s.LastRunStarted, &s.LastRunFinished, &s.LastError,
			&s.LastSuccess, &s.FreshnessSecs, &s.SweepInProgress, &s.SweepPages, &s.SweepRows, &s.SweepResumable,
			&s.LastSweepRows, &s.Rows, &s.HeldDeletions, &s.StreamWarning, &s.ListScope,
			&s.ListOrder, &s.LastFollow, &s.NewRecordsSecs, &s.FollowSwept,
			&s.LastWindow, &s.RecentChangesSecs, &s.WindowPages, &s.WindowFromID, &s.WindowSizeWhy)
		s.FirstLoad = s.SweepInProgress && s.LastSuccess == nil
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading status: %w", Describe(err))
	}
	// A hot standby sees none of the primary's locks: there, whether a
	// run's process is gone cannot be told.
	var standby bool
	if err := q.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
		return nil, fmt.Errorf("reading status: %w", Describe(err))
	}
	for i := range out {
		s := &out[i]
		if s.LastRunStatus != model.StatusRunning || standby {
			continue
		}
		if s.ProcessGone, err = runGone(ctx, q, s.Source, s.Stream, s.LastRunKind, s.LastRunID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// LastRun is the outcome of the latest run of one stream.
type LastRun struct {
	Stream                                                    string
	Pages, Seen, Inserted, Updated, Unchanged, Rejected, Gone int64
}

// LastRuns returns the latest run of every stream of a source.
func LastRuns(ctx context.Context, q Querier, source string) ([]LastRun, error) {
	rows, err := q.Query(ctx, `
SELECT stream, pages, rows_seen, rows_inserted, rows_updated, rows_unchanged, rows_rejected, rows_deleted
FROM (SELECT DISTINCT ON (stream) * FROM erp.sync_runs WHERE source = $1 ORDER BY stream, id DESC) r ORDER BY stream`, source)
	if err != nil {
		return nil, fmt.Errorf("reading runs: %w", Describe(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LastRun, error) {
		var l LastRun
		err := r.Scan(&l.Stream, &l.Pages, &l.Seen, &l.Inserted, &l.Updated, &l.Unchanged, &l.Rejected, &l.Gone)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading runs: %w", Describe(err))
	}
	return out, nil
}

// LiveTotal is the exact sum of a money column over a source's live rows,
// as text.
func LiveTotal(ctx context.Context, q Querier, table, column, source string) (string, error) {
	var sum string
	err := q.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(sum(%s), 0)::text FROM %s WHERE source = $1 AND deleted_at IS NULL`,
		pgx.Identifier{column}.Sanitize(), pgx.Identifier(strings.Split(table, ".")).Sanitize()), source).Scan(&sum)
	if err != nil {
		return "", fmt.Errorf("summing %s.%s: %w", table, column, Describe(err))
	}
	return sum, nil
}
