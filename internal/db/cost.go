package db

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/model"
)

// ListSize is what the warehouse last saw of a stream read through a
// login, from which what its runs ask of the ERP is estimated.
type ListSize struct {
	// SweepRows are the rows its last complete sweep read (-1: none
	// recorded, as for a stream without sweeps).
	SweepRows int64
	// RunPages and RunRows are what its last succeeded sweep run read
	// (0: none), so that a page's rows are known as the ERP answered them,
	// whatever page size was asked for.
	RunPages, RunRows int64
	// WindowPages are the pages its last window run read (0: none yet).
	WindowPages int
}

// ListSizes returns, by key, what the warehouse last saw of a source's
// streams through each login.
func ListSizes(ctx context.Context, q Querier, source string) (map[model.Key]ListSize, error) {
	rows, err := q.Query(ctx, `
SELECT c.stream, c.login, coalesce(c.last_sweep_rows, -1), coalesce(r.pages, 0), coalesce(r.rows_seen, 0), coalesce(w.pages, 0)
FROM erp.sync_checkpoints c
LEFT JOIN erp.sync_window w USING (source, stream, login)
LEFT JOIN LATERAL (
    SELECT pages, rows_seen FROM erp.sync_runs
    WHERE source = c.source AND stream = c.stream AND login = c.login AND kind = $2 AND status = $3 AND pages > 0
    ORDER BY id DESC LIMIT 1
) r ON true
WHERE c.source = $1`, source, model.KindSweep, model.StatusSucceeded)
	if err != nil {
		return nil, fmt.Errorf("reading the sizes of %s's lists: %w", source, Describe(err))
	}
	out := map[model.Key]ListSize{}
	var k model.Key
	var s ListSize
	var window int32
	_, err = pgx.ForEachRow(rows, []any{&k.Stream, &k.Login, &s.SweepRows, &s.RunPages, &s.RunRows, &window}, func() error {
		k.Source, s.WindowPages = source, int(window)
		out[k] = s
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the sizes of %s's lists: %w", source, Describe(err))
	}
	return out, nil
}
