package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/erpsync/erpsync/internal/model"
)

// Checkpoint is where a (source, stream, login) stands. SweepID is 0 when
// no sweep is in progress.
type Checkpoint struct {
	Key           model.Key
	SweepID       int64
	SweepStarted  time.Time
	Cursor        string
	Pages         int64
	Rows          int64
	BulkLoad      bool
	LastSweepID   int64
	LastCompleted time.Time
	LastSweepRows int64 // rows the last complete sweep found (0: none yet)
	Held          Held
	// What the sweep in progress learnt of the list so far: the order of
	// its ids (unknown while fewer than two were read), the last id of
	// its last page and the sort key of its highest id.
	Order          model.Order
	LastID, MaxKey string
}

// Held is a deletion the guard did not apply: rows a complete sweep found
// gone, too many to mark on one sweep's word.
type Held struct {
	Rows   int64     // how many rows
	Digest []byte    // which rows: a digest of their ids
	Sweeps int       // consecutive complete sweeps that found these rows gone
	Since  time.Time // when the first of them did
}

// claimLegacyCheckpoint hands a checkpoint written before logins (its
// login empty) to the first login of its source that runs the stream,
// unless that login has one of its own: an upgrade then resumes the
// sweep, keeps the held deletion and the freshness.
func claimLegacyCheckpoint(ctx context.Context, q Querier, k model.Key) error {
	_, err := q.Exec(ctx, `
UPDATE erp.sync_checkpoints SET login = $3
WHERE source = $1 AND stream = $2 AND login = '' AND $3 <> ''
  AND NOT EXISTS (SELECT 1 FROM erp.sync_checkpoints WHERE source = $1 AND stream = $2 AND login = $3)`, k.Source, k.Stream, k.Login)
	if err != nil {
		return fmt.Errorf("claiming the checkpoint of %s: %w", k, Describe(err))
	}
	return nil
}

// LoadCheckpoint returns the checkpoint, or a zero one for a new stream.
func LoadCheckpoint(ctx context.Context, q Querier, k model.Key) (Checkpoint, error) {
	cp := Checkpoint{Key: k}
	var sweepID, lastSweep, lastRows *int64
	var started, completed, heldSince *time.Time
	var cursor, order, lastID, maxKey *string
	err := q.QueryRow(ctx, `
SELECT sweep_id, sweep_started_at, cursor, pages, rows, bulk_load, last_sweep_id, last_sweep_completed_at, last_sweep_rows,
       held_deletions, held_digest, held_sweeps, held_since, sweep_order, sweep_last_id, sweep_max_key
FROM erp.sync_checkpoints WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login).
		Scan(&sweepID, &started, &cursor, &cp.Pages, &cp.Rows, &cp.BulkLoad, &lastSweep, &completed, &lastRows,
			&cp.Held.Rows, &cp.Held.Digest, &cp.Held.Sweeps, &heldSince, &order, &lastID, &maxKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, nil
	}
	if err != nil {
		return cp, fmt.Errorf("loading checkpoint %s: %w", k, Describe(err))
	}
	cp.SweepID = deref(sweepID)
	cp.LastSweepID = deref(lastSweep)
	cp.Cursor = deref(cursor)
	cp.SweepStarted = deref(started)
	cp.LastCompleted = deref(completed)
	cp.LastSweepRows = deref(lastRows)
	cp.Held.Since = deref(heldSince)
	cp.Order, cp.LastID, cp.MaxKey = model.ParseOrder(deref(order)), deref(lastID), deref(maxKey)
	return cp, nil
}

// LastCompleted returns, by login, when each login's reading of a stream
// was last complete (logins that never completed one are absent).
func LastCompleted(ctx context.Context, q Querier, source, stream string) (map[string]time.Time, error) {
	return loginTimes(ctx, q, `SELECT login, last_sweep_completed_at FROM erp.sync_checkpoints
WHERE source = $1 AND stream = $2 AND last_sweep_completed_at IS NOT NULL`, source, stream, "complete")
}

// loginTimes reads a time per login of a stream with query.
func loginTimes(ctx context.Context, q Querier, query, source, stream, what string) (map[string]time.Time, error) {
	rows, err := q.Query(ctx, query, source, stream)
	if err != nil {
		return nil, fmt.Errorf("reading when %s/%s was %s: %w", source, stream, what, Describe(err))
	}
	out := map[string]time.Time{}
	var login string
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&login, &at}, func() error {
		out[login] = at
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading when %s/%s was %s: %w", source, stream, what, Describe(err))
	}
	return out, nil
}

// StartSweep begins a new sweep of was.Key from the first page and
// returns it. The sweep was has in progress, if any, is forgotten (see
// abandonSweep: it marks nothing). The new sweep is a bulk load when t
// holds no row of the key's source: every row there when it completes is
// one it wrote. It compares every page (sync_checkpoints.sweep_compares_all,
// see KnownPages) when it is a bulk load, when the login has no complete
// sweep whose pages it could know, or when the login's last full
// comparison began more than fullComparisonEvery ago by the database's
// clock. Its start is the database's: a trigger stamps it.
func StartSweep(ctx context.Context, q Querier, was Checkpoint, t *Table) (Checkpoint, error) {
	k := was.Key
	has, err := t.hasRows(ctx, q, k.Source)
	if err != nil {
		return Checkpoint{Key: k}, err
	}
	if was.SweepID != 0 {
		if err := abandonSweep(ctx, q, was.SweepID); err != nil {
			return Checkpoint{Key: k}, err
		}
	}
	bulkLoad := !has
	cp := Checkpoint{Key: k, BulkLoad: bulkLoad}
	var heldSince *time.Time
	err = q.QueryRow(ctx, `
INSERT INTO erp.sync_checkpoints AS c (source, stream, login, sweep_id, cursor, pages, rows, bulk_load, sweep_compares_all, updated_at)
VALUES ($1, $2, $4, nextval('erp.sweep_id_seq'), NULL, 0, 0, $3, true, now())
ON CONFLICT (source, stream, login) DO UPDATE SET
    sweep_id = EXCLUDED.sweep_id, cursor = NULL,
    pages = 0, rows = 0, bulk_load = EXCLUDED.bulk_load, sweep_order = NULL, sweep_last_id = NULL, sweep_max_key = NULL,
    sweep_compares_all = EXCLUDED.bulk_load OR c.last_sweep_id IS NULL OR NOT EXISTS (
        SELECT 1 FROM erp.full_comparisons f WHERE f.source = $1 AND f.stream = $2 AND f.login = $4 AND f.began_at > now() - $5::interval),
    updated_at = now()
RETURNING sweep_id, sweep_started_at, coalesce(last_sweep_id, 0), held_deletions, held_digest, held_sweeps, held_since`,
		k.Source, k.Stream, bulkLoad, k.Login, fullComparisonEvery).
		Scan(&cp.SweepID, &cp.SweepStarted, &cp.LastSweepID, &cp.Held.Rows, &cp.Held.Digest, &cp.Held.Sweeps, &heldSince)
	if err != nil {
		return cp, fmt.Errorf("starting sweep %s: %w", k, Describe(err))
	}
	cp.Held.Since = deref(heldSince)
	return cp, nil
}

// queueAdvanceCheckpoint queues, in the pages' transaction, the record of
// committed pages: the cursor of the next page, the counters (pages and
// rows more), and what the sweep learnt of the list (next's Order, LastID
// and MaxKey). It fails the transaction when the sweep is no longer the
// login's current one.
func queueAdvanceCheckpoint(b *pgx.Batch, next Checkpoint, pages, rows int64) {
	k := next.Key
	b.Queue(`
UPDATE erp.sync_checkpoints SET cursor = $4, pages = pages + $5, rows = rows + $6, sweep_order = nullif($8, ''),
    sweep_last_id = nullif($9, ''), sweep_max_key = nullif($10, ''), updated_at = now()
WHERE source = $1 AND stream = $2 AND login = $7 AND sweep_id = $3`,
		k.Source, k.Stream, next.SweepID, next.Cursor, pages, rows, k.Login, string(next.Order), next.LastID, next.MaxKey).
		Exec(func(tag pgconn.CommandTag) error {
			if tag.RowsAffected() != 1 {
				// Someone else moved this stream on: we are not the owner.
				return fmt.Errorf("advancing checkpoint %s: sweep %d is no longer current", k, next.SweepID)
			}
			return nil
		})
}

// CompleteSweep closes the sweep in the transaction of its last page and
// returns the time it completed: the data of the stream is as fresh as
// that (see MarkComplete for streams without sweeps). It records what the
// sweep showed of the lists (see setListScope), keeps the page digests of
// this sweep for the next (keepDigests), or of none, and records a sweep
// that compared every page as the login's last full comparison (see
// KnownPages). A trigger stamps when the last complete sweep started.
func CompleteSweep(ctx context.Context, q Querier, cp Checkpoint, listScope string, keepDigests bool) (time.Time, error) {
	var at time.Time
	keep := int64(0)
	if keepDigests {
		keep = cp.SweepID
	}
	if err := forgetPageDigests(ctx, q, cp.Key, keep); err != nil {
		return at, err
	}
	if err := setListScope(ctx, q, cp.Key, listScope); err != nil {
		return at, err
	}
	if _, err := q.Exec(ctx, `
SELECT erp.record_full_comparison(source, stream, login, sweep_id) FROM erp.sync_checkpoints
WHERE source = $1 AND stream = $2 AND login = $4 AND sweep_id = $3 AND sweep_compares_all`,
		cp.Key.Source, cp.Key.Stream, cp.SweepID, cp.Key.Login); err != nil {
		return at, fmt.Errorf("recording a full comparison: %w", Describe(err))
	}
	if err := q.QueryRow(ctx, `
UPDATE erp.sync_checkpoints SET sweep_id = NULL, cursor = NULL, last_sweep_id = sweep_id, last_sweep_completed_at = now(),
    last_sweep_rows = rows, updated_at = now()
WHERE source = $1 AND stream = $2 AND login = $4 AND sweep_id = $3
RETURNING last_sweep_completed_at`, cp.Key.Source, cp.Key.Stream, cp.SweepID, cp.Key.Login).Scan(&at); err != nil {
		return at, fmt.Errorf("completing sweep: %w", Describe(err))
	}
	return at, abandonSweep(ctx, q, cp.SweepID)
}

// MarkComplete records that a stream without sweeps (a snapshot, or one
// request per document) read everything it had to: its data is as fresh
// as the returned time. It is the same column a completed sweep sets, so
// freshness has one definition for every stream.
func MarkComplete(ctx context.Context, q Querier, k model.Key) (time.Time, error) {
	var at time.Time
	err := q.QueryRow(ctx, `
INSERT INTO erp.sync_checkpoints AS c (source, stream, login, last_sweep_completed_at, updated_at)
VALUES ($1, $2, $3, now(), now())
ON CONFLICT (source, stream, login) DO UPDATE SET last_sweep_completed_at = now(), updated_at = now()
RETURNING last_sweep_completed_at`, k.Source, k.Stream, k.Login).Scan(&at)
	if err != nil {
		return at, fmt.Errorf("recording %s complete: %w", k, Describe(err))
	}
	return at, nil
}

// SetWarning records what an operator should know of the login's last
// run of a stream ("" clears it): erpsync status shows it.
func SetWarning(ctx context.Context, q Querier, k model.Key, warning string) error {
	_, err := q.Exec(ctx, `
INSERT INTO erp.sync_checkpoints AS c (source, stream, login, warning, updated_at) VALUES ($1, $2, $3, nullif($4, ''), now())
ON CONFLICT (source, stream, login) DO UPDATE SET warning = nullif($4, ''), updated_at = now()
WHERE c.warning IS DISTINCT FROM nullif($4, '')`, k.Source, k.Stream, k.Login, safeText(warning, 2000))
	if err != nil {
		return fmt.Errorf("recording the warning of %s: %w", k, Describe(err))
	}
	return nil
}

// AddWarning adds to the login's standing warning what a run that did not
// read the whole stream warned of (a follow run's drift), unless it says
// so already: such a run reads too little to clear what a complete read
// warned of.
func AddWarning(ctx context.Context, q Querier, k model.Key, warning string) error {
	w := safeText(warning, 2000)
	_, err := q.Exec(ctx, `
INSERT INTO erp.sync_checkpoints AS c (source, stream, login, warning, updated_at) VALUES ($1, $2, $3, $4, now())
ON CONFLICT (source, stream, login) DO UPDATE SET warning = left(concat_ws('; ', c.warning, $4), 2000), updated_at = now()
WHERE c.warning IS NULL OR strpos(c.warning, $4) = 0`, k.Source, k.Stream, k.Login, w)
	if err != nil {
		return fmt.Errorf("recording the warning of %s: %w", k, Describe(err))
	}
	return nil
}

// setListScope records what a complete sweep showed of the stream's lists
// through the login: "branch" (its branch's records), "company" (the
// whole company's: a fact of the installation, recorded for every login
// of the source's stream), "" (it could not tell; what was known stays).
func setListScope(ctx context.Context, q Querier, k model.Key, scope string) error {
	if scope == "" {
		return nil
	}
	if _, err := q.Exec(ctx, `UPDATE erp.sync_checkpoints SET list_scope = $4 WHERE source = $1 AND stream = $2
AND (login = $3 OR $4 = 'company') AND list_scope IS DISTINCT FROM $4`, k.Source, k.Stream, k.Login, scope); err != nil {
		return fmt.Errorf("recording the list scope of %s: %w", k, Describe(err))
	}
	return nil
}

// queueSetHeld queues the record of the deletion the guard holds for a
// stream and login's reads of a kind, or, with a zero Held, that none is
// held: a sweep's in its checkpoint, a window run's in its window.
func queueSetHeld(b *pgx.Batch, k model.Key, kind model.RunKind, h Held) {
	var since *time.Time
	if !h.Since.IsZero() {
		since = &h.Since
	}
	if kind == model.KindWindow {
		b.Queue(`
INSERT INTO erp.sync_window AS w (source, stream, login, held_deletions, held_digest, held_sweeps, held_since, updated_at)
VALUES ($1, $2, $7, $3, $4, $5, $6, now())
ON CONFLICT (source, stream, login) DO UPDATE SET held_deletions = $3, held_digest = $4, held_sweeps = $5,
    held_since = $6, updated_at = now()`, k.Source, k.Stream, h.Rows, h.Digest, h.Sweeps, since, k.Login)
		return
	}
	b.Queue(`
INSERT INTO erp.sync_checkpoints AS c (source, stream, login, held_deletions, held_digest, held_sweeps, held_since, updated_at)
VALUES ($1, $2, $7, $3, $4, $5, $6, now())
ON CONFLICT (source, stream, login) DO UPDATE SET held_deletions = $3, held_digest = $4, held_sweeps = $5,
    held_since = $6, updated_at = now()`, k.Source, k.Stream, h.Rows, h.Digest, h.Sweeps, since, k.Login)
}

// queueLoadHeld queues the read of the deletion the guard holds for a
// stream and login's reads of a kind into h (zero when none).
func queueLoadHeld(b *pgx.Batch, k model.Key, kind model.RunKind, h *Held) {
	table := "erp.sync_checkpoints"
	if kind == model.KindWindow {
		table = "erp.sync_window"
	}
	b.Queue(`SELECT held_deletions, held_digest, held_sweeps, held_since FROM `+table+`
WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login).Query(func(rows pgx.Rows) error {
		var since *time.Time
		_, err := pgx.ForEachRow(rows, []any{&h.Rows, &h.Digest, &h.Sweeps, &since}, func() error {
			h.Since = deref(since)
			return nil
		})
		return err
	})
}

// ResetStream starts a stream over for a login, keeping every row and
// every version: it forgets the sweep in progress, the last complete
// sweep's page digests, the deletion the guard holds, the rows held for a
// second sweep and how the list is followed (its anchors, its order, a
// demotion), and records when. The data stay as fresh as they were.
func ResetStream(ctx context.Context, tx Tx, k model.Key) error {
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM erp.sweep_seen WHERE sweep_id = (SELECT sweep_id FROM erp.sync_checkpoints WHERE source = $1 AND stream = $2 AND login = $3)`,
		k.Source, k.Stream, k.Login)
	b.Queue(`DELETE FROM erp.sweep_bounds WHERE sweep_id = (SELECT sweep_id FROM erp.sync_checkpoints WHERE source = $1 AND stream = $2 AND login = $3)`,
		k.Source, k.Stream, k.Login)
	b.Queue(`DELETE FROM erp.sweep_pages WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login)
	b.Queue(`DELETE FROM erp.deletion_candidates WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login)
	b.Queue(`DELETE FROM erp.sync_follow WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login)
	b.Queue(`DELETE FROM erp.sweep_seen WHERE sweep_id = (SELECT read_id FROM erp.sync_window WHERE source = $1 AND stream = $2 AND login = $3)`,
		k.Source, k.Stream, k.Login)
	b.Queue(`DELETE FROM erp.sync_window WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login)
	b.Queue(`DELETE FROM erp.change_positions WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login)
	b.Queue(`
INSERT INTO erp.sync_checkpoints AS c (source, stream, login, reset_at, updated_at) VALUES ($1, $2, $3, now(), now())
ON CONFLICT (source, stream, login) DO UPDATE SET sweep_id = NULL, cursor = NULL, pages = 0, rows = 0,
    bulk_load = false, last_sweep_id = NULL, held_deletions = 0, held_digest = NULL, held_sweeps = 0, held_since = NULL,
    sweep_order = NULL, sweep_last_id = NULL, sweep_max_key = NULL, reset_at = now(), updated_at = now()`,
		k.Source, k.Stream, k.Login)
	return sendBatch(ctx, tx, b, "resetting "+k.String())
}

// ResetSince reports whether the stream was reset for the login since its
// data were last complete: its next run reads everything again.
func ResetSince(ctx context.Context, q Querier, k model.Key) (bool, error) {
	var reset bool
	err := q.QueryRow(ctx, `SELECT coalesce(reset_at > coalesce(last_sweep_completed_at, '-infinity'), false)
FROM erp.sync_checkpoints WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login).Scan(&reset)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading whether %s was reset: %w", k, Describe(err))
	}
	return reset, nil
}
