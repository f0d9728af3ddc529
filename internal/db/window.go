package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/model"
)

// A login's window of a paged list (erp.sync_window): the re-read of its
// newest pages, where its records change most, and where the changes of
// every kind of run were seen (erp.change_positions), from which the
// window is sized.

// Window is where a login's window stands.
type Window struct {
	Pages   int    // how many pages its last window run read (0: none yet)
	SizeWhy string // why the window has that size
	FromID  string // the lowest id its last window run read
	// ReadID is the seen-list of a window run begun and not completed
	// (0: none).
	ReadID        int64
	LastStarted   time.Time
	LastCompleted time.Time
	Held          Held
}

// LoadWindow returns a login's window; zero when it never had one.
func LoadWindow(ctx context.Context, q Querier, k model.Key) (Window, error) {
	var w Window
	var pages *int32
	var why, from *string
	var read *int64
	var started, completed, since *time.Time
	err := q.QueryRow(ctx, `
SELECT pages, size_why, from_id, read_id, last_window_started_at, last_window_at, held_deletions, held_digest, held_sweeps, held_since
FROM erp.sync_window WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login).
		Scan(&pages, &why, &from, &read, &started, &completed, &w.Held.Rows, &w.Held.Digest, &w.Held.Sweeps, &since)
	if errors.Is(err, pgx.ErrNoRows) {
		return w, nil
	}
	if err != nil {
		return w, fmt.Errorf("loading the window of %s: %w", k, Describe(err))
	}
	w.Pages, w.SizeWhy, w.FromID, w.ReadID = int(deref(pages)), deref(why), deref(from), deref(read)
	w.LastStarted, w.LastCompleted, w.Held.Since = deref(started), deref(completed), deref(since)
	return w, nil
}

// StartWindow begins a window run of a login: a seen-list of its own (a
// number of erp.sweep_id_seq) and the time it began, by the database's
// clock. The seen-list of a window run that never completed is forgotten.
func StartWindow(ctx context.Context, q Querier, k model.Key, was Window) (Read, error) {
	if was.ReadID != 0 {
		if err := abandonSweep(ctx, q, was.ReadID); err != nil {
			return Read{}, err
		}
	}
	read := Read{Kind: model.KindWindow}
	err := q.QueryRow(ctx, `
INSERT INTO erp.sync_window AS w (source, stream, login, read_id, last_window_started_at, updated_at)
VALUES ($1, $2, $3, nextval('erp.sweep_id_seq'), now(), now())
ON CONFLICT (source, stream, login) DO UPDATE SET read_id = EXCLUDED.read_id, last_window_started_at = EXCLUDED.last_window_started_at,
    updated_at = now()
RETURNING read_id, last_window_started_at`, k.Source, k.Stream, k.Login).Scan(&read.ID, &read.Began)
	if err != nil {
		return read, fmt.Errorf("starting the window run of %s: %w", k, Describe(err))
	}
	return read, nil
}

// CompleteWindow closes a window run in the transaction of its last page:
// how many pages it read, why the window had that size and the lowest id
// it read; it forgets its seen-list and returns when it completed.
func CompleteWindow(ctx context.Context, q Querier, k model.Key, read Read, pages int, why string) (time.Time, error) {
	var at time.Time
	err := q.QueryRow(ctx, `
UPDATE erp.sync_window SET pages = $5, size_why = nullif($6, ''), from_id = nullif($7, ''), read_id = NULL, last_window_at = now(), updated_at = now()
WHERE source = $1 AND stream = $2 AND login = $3 AND read_id = $4
RETURNING last_window_at`, k.Source, k.Stream, k.Login, read.ID, pages, safeText(why, 2000), read.From).Scan(&at)
	if err != nil {
		return at, fmt.Errorf("completing the window run of %s: %w", k, Describe(err))
	}
	return at, abandonSweep(ctx, q, read.ID)
}

// LastWindowed returns, by login, when a window run of a stream last
// completed (logins without one are absent).
func LastWindowed(ctx context.Context, q Querier, source, stream string) (map[string]time.Time, error) {
	return loginTimes(ctx, q, `SELECT login, last_window_at FROM erp.sync_window
WHERE source = $1 AND stream = $2 AND last_window_at IS NOT NULL`, source, stream, "windowed")
}

// ChangedPages are the pages of a read that held changed records (or
// records gone), with how many; FromEnd is each page's distance in pages
// from the list's newest end, when the read knows it as it writes (-1:
// not yet).
type ChangedPages struct {
	Kind    model.RunKind
	ReadID  int64
	Pages   []int64
	FromEnd []int64
	Changes []int64
}

// QueueChangePositions queues the record of where a read found changes.
func QueueChangePositions(b *pgx.Batch, k model.Key, c ChangedPages) {
	if len(c.Pages) == 0 {
		return
	}
	b.Queue(`
INSERT INTO erp.change_positions (source, stream, login, kind, read_id, page, pages_from_end, changes)
SELECT $1, $2, $3, $4, $5, u.page, nullif(u.from_end, -1), u.changes FROM unnest($6::bigint[], $7::bigint[], $8::bigint[]) AS u(page, from_end, changes)`,
		k.Source, k.Stream, k.Login, string(c.Kind), c.ReadID, c.Pages, c.FromEnd, c.Changes)
}

// PlaceChanges sets, once a read of a list in ascending order has read its
// newest end (its page last), how far from that end each page it found
// changes on lay.
func PlaceChanges(ctx context.Context, q Querier, k model.Key, kind model.RunKind, readID, last int64) error {
	if _, err := q.Exec(ctx, `UPDATE erp.change_positions SET pages_from_end = $6 - page
WHERE source = $1 AND stream = $2 AND login = $3 AND kind = $4 AND read_id = $5 AND pages_from_end IS NULL`,
		k.Source, k.Stream, k.Login, string(kind), readID, last); err != nil {
		return fmt.Errorf("placing the changes of %s: %w", k, Describe(err))
	}
	return nil
}

// ChangesByPosition counts, by pages from the newest end, the changes a
// login's reads of a list saw since a time.
func ChangesByPosition(ctx context.Context, q Querier, k model.Key, since time.Time) (map[int64]int64, error) {
	rows, err := q.Query(ctx, `SELECT pages_from_end, sum(changes)::bigint FROM erp.change_positions
WHERE source = $1 AND stream = $2 AND login = $3 AND seen_at >= $4 AND pages_from_end IS NOT NULL GROUP BY 1`,
		k.Source, k.Stream, k.Login, since)
	if err != nil {
		return nil, fmt.Errorf("reading where the changes of %s were: %w", k, Describe(err))
	}
	out := map[int64]int64{}
	var at, n int64
	_, err = pgx.ForEachRow(rows, []any{&at, &n}, func() error {
		out[at] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading where the changes of %s were: %w", k, Describe(err))
	}
	return out, nil
}

// ForgetChangePositions drops the positions of changes seen before a time.
func ForgetChangePositions(ctx context.Context, q Querier, before time.Time) (int64, error) {
	tag, err := q.Exec(ctx, `DELETE FROM erp.change_positions WHERE seen_at < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("forgetting where changes were: %w", Describe(err))
	}
	return tag.RowsAffected(), nil
}
