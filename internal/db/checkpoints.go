package db

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// StreamKey names what a checkpoint is of: a stream of a source, read
// through one login.
type StreamKey struct {
	Source, Stream, Login string
}

func (k StreamKey) String() string {
	if k.Login == "" {
		return k.Source + "/" + k.Stream
	}
	return k.Source + "/" + k.Stream + " (" + k.Login + ")"
}

// Checkpoint is where a (source, stream, login) stands. SweepID is 0 when
// no sweep is in progress.
type Checkpoint struct {
	Key           StreamKey
	SweepID       int64
	SweepStarted  time.Time
	Cursor        string
	Pages         int64
	Rows          int64
	BulkLoad      bool
	LastSweepID   int64
	LastCompleted time.Time
	Held          Held
	// What the sweep in progress learnt of the list so far: the order of
	// its ids ("" while fewer than two were read), the last id of its
	// last page, the sort key of its highest id, and that of the highest
	// id follow runs had read when it began.
	Order, LastID, MaxKey, FollowedKey string
}

// Held is a deletion the guard did not apply: rows a complete sweep found
// gone, too many to mark on one sweep's word.
type Held struct {
	Rows   int64     // how many rows
	Digest []byte    // which rows: a digest of their ids
	Sweeps int       // consecutive complete sweeps that found these rows gone
	Since  time.Time // when the first of them did
}

// ClaimLegacyCheckpoint hands a checkpoint written before logins (its
// login empty) to the first login of its source that runs the stream, unless that
// login has one of its own: an upgrade then resumes the sweep, keeps the
// held deletion and the freshness.
func ClaimLegacyCheckpoint(ctx context.Context, q Querier, k StreamKey) error {
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
func LoadCheckpoint(ctx context.Context, q Querier, k StreamKey) (Checkpoint, error) {
	cp := Checkpoint{Key: k}
	var sweepID, lastSweep *int64
	var started, completed, heldSince *time.Time
	var cursor, order, lastID, maxKey, followed *string
	err := q.QueryRow(ctx, `
SELECT sweep_id, sweep_started_at, cursor, pages, rows, bulk_load, last_sweep_id, last_sweep_completed_at,
       held_deletions, held_digest, held_sweeps, held_since, sweep_order, sweep_last_id, sweep_max_key, sweep_followed_key
FROM erp.sync_checkpoints WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login).
		Scan(&sweepID, &started, &cursor, &cp.Pages, &cp.Rows, &cp.BulkLoad, &lastSweep, &completed,
			&cp.Held.Rows, &cp.Held.Digest, &cp.Held.Sweeps, &heldSince, &order, &lastID, &maxKey, &followed)
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
	cp.Held.Since = deref(heldSince)
	cp.Order, cp.LastID, cp.MaxKey, cp.FollowedKey = deref(order), deref(lastID), deref(maxKey), deref(followed)
	return cp, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
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

// StartSweep begins a new sweep from the first page and returns it.
// bulkLoad says the table holds no row of the source (Table.HasRows).
func StartSweep(ctx context.Context, q Querier, k StreamKey, bulkLoad bool) (Checkpoint, error) {
	cp := Checkpoint{Key: k, BulkLoad: bulkLoad}
	var heldSince *time.Time
	err := q.QueryRow(ctx, `
INSERT INTO erp.sync_checkpoints AS c (source, stream, login, sweep_id, sweep_started_at, cursor, pages, rows, bulk_load,
    sweep_followed_key, updated_at)
VALUES ($1, $2, $4, nextval('erp.sweep_id_seq'), now(), NULL, 0, 0, $3,
    (SELECT followed_key FROM erp.sync_follow WHERE source = $1 AND stream = $2 AND login = $4), now())
ON CONFLICT (source, stream, login) DO UPDATE SET
    sweep_id = EXCLUDED.sweep_id, sweep_started_at = EXCLUDED.sweep_started_at, cursor = NULL,
    pages = 0, rows = 0, bulk_load = EXCLUDED.bulk_load, sweep_order = NULL, sweep_last_id = NULL, sweep_max_key = NULL,
    sweep_followed_key = EXCLUDED.sweep_followed_key, updated_at = now()
RETURNING sweep_id, sweep_started_at, coalesce(last_sweep_id, 0), held_deletions, held_digest, held_sweeps, held_since,
    coalesce(sweep_followed_key, '')`,
		k.Source, k.Stream, bulkLoad, k.Login).
		Scan(&cp.SweepID, &cp.SweepStarted, &cp.LastSweepID, &cp.Held.Rows, &cp.Held.Digest, &cp.Held.Sweeps, &heldSince, &cp.FollowedKey)
	if err != nil {
		return cp, fmt.Errorf("starting sweep %s: %w", k, Describe(err))
	}
	cp.Held.Since = deref(heldSince)
	return cp, nil
}

// AbandonSweep forgets a sweep that cannot continue (its cursor was
// refused), or that completed: its seen-list and page bounds; nothing is
// marked deleted.
func AbandonSweep(ctx context.Context, q Querier, sweepID int64) error {
	if _, err := q.Exec(ctx, `DELETE FROM erp.sweep_seen WHERE sweep_id = $1`, sweepID); err != nil {
		return fmt.Errorf("abandoning sweep %d: %w", sweepID, Describe(err))
	}
	if _, err := q.Exec(ctx, `DELETE FROM erp.sweep_bounds WHERE sweep_id = $1`, sweepID); err != nil {
		return fmt.Errorf("abandoning sweep %d: %w", sweepID, Describe(err))
	}
	return nil
}

// QueueAdvanceCheckpoint queues, in the pages' transaction, the record of
// committed pages: the cursor of the next page, the counters, and what the
// sweep learnt of the list (next's Order, LastID and MaxKey). cp becomes
// next when the batch runs.
func QueueAdvanceCheckpoint(b *pgx.Batch, cp *Checkpoint, next Checkpoint, pages, rows int64) {
	b.Queue(`
UPDATE erp.sync_checkpoints SET cursor = $4, pages = pages + $5, rows = rows + $6, sweep_order = nullif($8, ''),
    sweep_last_id = nullif($9, ''), sweep_max_key = nullif($10, ''), updated_at = now()
WHERE source = $1 AND stream = $2 AND login = $7 AND sweep_id = $3`,
		cp.Key.Source, cp.Key.Stream, cp.SweepID, next.Cursor, pages, rows, cp.Key.Login, next.Order, next.LastID, next.MaxKey).
		Exec(func(tag pgconn.CommandTag) error {
			if tag.RowsAffected() != 1 {
				// Someone else moved this stream on: we are not the owner.
				return fmt.Errorf("advancing checkpoint %s: sweep %d is no longer current", cp.Key, cp.SweepID)
			}
			next.Pages, next.Rows = cp.Pages+pages, cp.Rows+rows
			*cp = next
			return nil
		})
}

// Now is the warehouse's time: rows' synced_at are in its clock.
func Now(ctx context.Context, q Querier) (time.Time, error) {
	var t time.Time
	if err := q.QueryRow(ctx, `SELECT now()`).Scan(&t); err != nil {
		return t, fmt.Errorf("reading the time: %w", Describe(err))
	}
	return t, nil
}

// SendBatch runs, in one round trip, the statements the Queue* functions
// queued in tx, and returns the first error.
func SendBatch(ctx context.Context, tx pgx.Tx, b *pgx.Batch, what string) error {
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("%s: %w", what, Describe(err))
	}
	return nil
}

// SeenIntact reports whether sweep_seen still holds every id the sweep
// wrote (one per row of each page). Postgres empties UNLOGGED tables after a crash; a sweep that
// lived through one must not mark rows deleted from a partial list.
func SeenIntact(ctx context.Context, q Querier, cp Checkpoint) (bool, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM erp.sweep_seen WHERE sweep_id = $1`, cp.SweepID).Scan(&n); err != nil {
		return false, fmt.Errorf("counting sweep_seen: %w", Describe(err))
	}
	return n == cp.Rows, nil
}

// CompleteSweep closes the sweep in the transaction of its last page and
// returns the time it completed: the data of the stream is as fresh as
// that (see MarkComplete for streams without sweeps).
func CompleteSweep(ctx context.Context, q Querier, cp Checkpoint) (time.Time, error) {
	var at time.Time
	if err := q.QueryRow(ctx, `
UPDATE erp.sync_checkpoints SET sweep_id = NULL, cursor = NULL, last_sweep_id = sweep_id,
    last_sweep_started_at = sweep_started_at, last_sweep_completed_at = now(),
    last_sweep_rows = rows, sweep_started_at = NULL, updated_at = now()
WHERE source = $1 AND stream = $2 AND login = $4 AND sweep_id = $3
RETURNING last_sweep_completed_at`, cp.Key.Source, cp.Key.Stream, cp.SweepID, cp.Key.Login).Scan(&at); err != nil {
		return at, fmt.Errorf("completing sweep: %w", Describe(err))
	}
	return at, AbandonSweep(ctx, q, cp.SweepID)
}

// MarkComplete records that a stream without sweeps (a snapshot, or one
// request per document) read everything it had to: its data is as fresh
// as the returned time. It is the same column a completed sweep sets, so
// freshness has one definition for every stream.
func MarkComplete(ctx context.Context, q Querier, k StreamKey) (time.Time, error) {
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
func SetWarning(ctx context.Context, q Querier, k StreamKey, warning string) error {
	_, err := q.Exec(ctx, `
INSERT INTO erp.sync_checkpoints AS c (source, stream, login, warning, updated_at) VALUES ($1, $2, $3, nullif($4, ''), now())
ON CONFLICT (source, stream, login) DO UPDATE SET warning = nullif($4, ''), updated_at = now()
WHERE c.warning IS DISTINCT FROM nullif($4, '')`, k.Source, k.Stream, k.Login, SafeText(warning, 2000))
	if err != nil {
		return fmt.Errorf("recording the warning of %s: %w", k, Describe(err))
	}
	return nil
}

// SetListScope records what a complete sweep showed of the stream's lists
// through the login: "branch" (its branch's records), "company" (the
// whole company's: a fact of the installation, recorded for every login
// of the source's stream), "" (it could not tell; what was known stays).
func SetListScope(ctx context.Context, q Querier, k StreamKey, scope string) error {
	if scope == "" {
		return nil
	}
	if _, err := q.Exec(ctx, `UPDATE erp.sync_checkpoints SET list_scope = $4 WHERE source = $1 AND stream = $2
AND (login = $3 OR $4 = 'company') AND list_scope IS DISTINCT FROM $4`, k.Source, k.Stream, k.Login, scope); err != nil {
		return fmt.Errorf("recording the list scope of %s: %w", k, Describe(err))
	}
	return nil
}

// SetHeld records the deletion the guard holds for a stream and login, or,
// with a zero Held, that none is held.
func SetHeld(ctx context.Context, q Querier, k StreamKey, h Held) error {
	var since *time.Time
	if !h.Since.IsZero() {
		since = &h.Since
	}
	_, err := q.Exec(ctx, `
INSERT INTO erp.sync_checkpoints AS c (source, stream, login, held_deletions, held_digest, held_sweeps, held_since, updated_at)
VALUES ($1, $2, $7, $3, $4, $5, $6, now())
ON CONFLICT (source, stream, login) DO UPDATE SET held_deletions = $3, held_digest = $4, held_sweeps = $5,
    held_since = $6, updated_at = now()`, k.Source, k.Stream, h.Rows, h.Digest, h.Sweeps, since, k.Login)
	if err != nil {
		return fmt.Errorf("recording held deletions of %s: %w", k, Describe(err))
	}
	return nil
}

// SeenDistinct is how many distinct ids a sweep has seen so far.
func SeenDistinct(ctx context.Context, q Querier, sweepID int64) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(DISTINCT id) FROM erp.sweep_seen WHERE sweep_id = $1`, sweepID).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting the sweep's ids: %w", Describe(err))
	}
	return n, nil
}

// QueueNoFlush lets the transaction's commit return before its WAL
// reaches the disk (synchronous_commit off, for this transaction only).
// Only transactions whose loss a Postgres crash may cost without harm use
// it: see the caller.
func QueueNoFlush(b *pgx.Batch) {
	b.Queue(`SET LOCAL synchronous_commit = off`)
}

// PageDigest is what one request of a sweep was answered with.
type PageDigest struct {
	Request, Answer [sha256.Size]byte
}

// Answers are the digests of what a sweep's requests were answered with,
// by the digest of the request.
type Answers map[[sha256.Size]byte][sha256.Size]byte

// PageDigests returns what each request of a sweep was answered with.
func PageDigests(ctx context.Context, q Querier, k StreamKey, sweepID int64) (Answers, error) {
	rows, err := q.Query(ctx, `SELECT request, answer FROM erp.sweep_pages WHERE source = $1 AND stream = $2 AND login = $4 AND sweep_id = $3`,
		k.Source, k.Stream, sweepID, k.Login)
	if err != nil {
		return nil, fmt.Errorf("reading page digests: %w", Describe(err))
	}
	out := Answers{}
	var req, ans []byte
	_, err = pgx.ForEachRow(rows, []any{&req, &ans}, func() error {
		if len(req) == sha256.Size && len(ans) == sha256.Size {
			out[[sha256.Size]byte(req)] = [sha256.Size]byte(ans)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading page digests: %w", Describe(err))
	}
	return out, nil
}

// QueueRecordPageDigests queues the record of what requests of a sweep
// were answered with.
func QueueRecordPageDigests(b *pgx.Batch, k StreamKey, sweepID int64, pages []PageDigest) {
	if len(pages) == 0 {
		return
	}
	reqs, answers := make([][]byte, len(pages)), make([][]byte, len(pages))
	for i := range pages {
		reqs[i], answers[i] = pages[i].Request[:], pages[i].Answer[:]
	}
	b.Queue(`
INSERT INTO erp.sweep_pages (source, stream, login, sweep_id, request, answer)
SELECT $1, $2, $6, $3, u.request, u.answer FROM unnest($4::bytea[], $5::bytea[]) AS u(request, answer)
ON CONFLICT (source, stream, sweep_id, request) DO UPDATE SET answer = EXCLUDED.answer`,
		k.Source, k.Stream, sweepID, reqs, answers, k.Login)
}

// ForgetPageDigests drops the page digests of every sweep of the stream
// and login but keep.
func ForgetPageDigests(ctx context.Context, q Querier, k StreamKey, keep int64) error {
	if _, err := q.Exec(ctx, `DELETE FROM erp.sweep_pages WHERE source = $1 AND stream = $2 AND login = $4 AND sweep_id <> $3`,
		k.Source, k.Stream, keep, k.Login); err != nil {
		return fmt.Errorf("forgetting page digests: %w", Describe(err))
	}
	return nil
}

// QueueMarkSeen queues the record of ids as seen by a sweep, for pages
// not written.
func QueueMarkSeen(b *pgx.Batch, sweepID int64, ids []string) {
	b.Queue(seenSQL, sweepID, ids)
}
