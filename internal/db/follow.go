package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Follow is how a login follows a paged list (erp.sync_follow).
type Follow struct {
	// SweepOrders are the orders its last complete sweeps listed ids in,
	// newest first, and ListOrder what they say of the list.
	SweepOrders []string
	ListOrder   string
	// DemotedWhy, when set, says why the list is swept and not followed
	// until the stream is reset.
	DemotedWhy string
	// MaxKey and FollowedKey are the sort keys of the highest id the login
	// has read, and of the highest a follow run has read ("" none).
	MaxKey, FollowedKey string
	// Anchors are the positions of the last non-empty pages read, newest
	// first.
	Anchors []Anchor
	// LastFollow is when the last follow run completed; LastSwept why it
	// read the whole list instead, if it did.
	LastFollow time.Time
	LastSwept  string
}

// Anchor is the position of a page read (the cursor or the start its
// request carried) and the ids it listed.
type Anchor struct {
	Cursor string   `json:"cursor,omitempty"`
	Start  int64    `json:"start,omitempty"`
	IDs    []string `json:"ids"`
}

// LoadFollow returns how a login follows a list; zero for one never swept.
func LoadFollow(ctx context.Context, q Querier, k StreamKey) (Follow, error) {
	var f Follow
	var order, demoted, maxKey, followed, swept *string
	var anchors []byte
	var last *time.Time
	err := q.QueryRow(ctx, `
SELECT sweep_orders, list_order, demoted_why, max_key, followed_key, anchors, last_follow_at, last_follow_swept
FROM erp.sync_follow WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login).
		Scan(&f.SweepOrders, &order, &demoted, &maxKey, &followed, &anchors, &last, &swept)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("loading how %s is followed: %w", k, Describe(err))
	}
	f.ListOrder, f.DemotedWhy, f.MaxKey, f.FollowedKey, f.LastSwept = deref(order), deref(demoted), deref(maxKey), deref(followed), deref(swept)
	f.LastFollow = deref(last)
	if err := json.Unmarshal(anchors, &f.Anchors); err != nil {
		return f, fmt.Errorf("reading the anchors of %s: %w", k, err)
	}
	return f, nil
}

// QueueFollowPage queues, in the transaction of a page a follow run
// writes, the anchors as they stand after it and the highest id read.
func QueueFollowPage(b *pgx.Batch, k StreamKey, anchors []Anchor, maxKey string) {
	doc, _ := json.Marshal(anchors) // strings and numbers only
	b.Queue(`
INSERT INTO erp.sync_follow AS f (source, stream, login, anchors, max_key, followed_key)
VALUES ($1, $2, $3, $4, nullif($5, ''), nullif($5, ''))
ON CONFLICT (source, stream, login) DO UPDATE SET anchors = EXCLUDED.anchors,
    max_key = greatest(f.max_key, EXCLUDED.max_key), followed_key = greatest(f.followed_key, EXCLUDED.followed_key),
    updated_at = now()`, k.Source, k.Stream, k.Login, doc, maxKey)
}

// LastFollowed returns, by login, when a follow run of a stream last read
// everything new (logins never followed are absent).
func LastFollowed(ctx context.Context, q Querier, source, stream string) (map[string]time.Time, error) {
	return loginTimes(ctx, q, `SELECT login, last_follow_at FROM erp.sync_follow
WHERE source = $1 AND stream = $2 AND last_follow_at IS NOT NULL`, source, stream, "followed")
}

// FollowCompleted records the end of a follow run: when, and why it read
// the whole list instead ("": it did not).
func FollowCompleted(ctx context.Context, q Querier, k StreamKey, swept string) (time.Time, error) {
	var at time.Time
	err := q.QueryRow(ctx, `
INSERT INTO erp.sync_follow AS f (source, stream, login, last_follow_at, last_follow_swept)
VALUES ($1, $2, $3, now(), nullif($4, ''))
ON CONFLICT (source, stream, login) DO UPDATE SET last_follow_at = now(), last_follow_swept = nullif($4, ''), updated_at = now()
RETURNING last_follow_at`, k.Source, k.Stream, k.Login, SafeText(swept, 2000)).Scan(&at)
	if err != nil {
		return at, fmt.Errorf("recording the follow run of %s: %w", k, Describe(err))
	}
	return at, nil
}

// SweepFollowed records, in the transaction that completes a sweep of a
// list that may be followed, the orders of the last sweeps (this one
// first) and what they say of the list, the highest id it read, and the
// anchors of its last pages (none: those kept stay).
func SweepFollowed(ctx context.Context, q Querier, k StreamKey, orders []string, listOrder, maxKey string, anchors []Anchor) error {
	var doc []byte
	if len(anchors) > 0 {
		doc, _ = json.Marshal(anchors)
	}
	_, err := q.Exec(ctx, `
INSERT INTO erp.sync_follow AS f (source, stream, login, sweep_orders, list_order, max_key, anchors)
VALUES ($1, $2, $3, $4, nullif($5, ''), nullif($6, ''), coalesce($7::jsonb, '[]'))
ON CONFLICT (source, stream, login) DO UPDATE SET sweep_orders = EXCLUDED.sweep_orders, list_order = EXCLUDED.list_order,
    max_key = greatest(f.max_key, EXCLUDED.max_key), anchors = coalesce($7::jsonb, f.anchors), updated_at = now()`,
		k.Source, k.Stream, k.Login, orders, listOrder, maxKey, doc)
	if err != nil {
		return fmt.Errorf("recording what the sweep of %s showed of its order: %w", k, Describe(err))
	}
	return nil
}

// DemoteFollow makes a login's list swept, not followed, until the stream
// is reset, and says why.
func DemoteFollow(ctx context.Context, q Querier, k StreamKey, why string) error {
	_, err := q.Exec(ctx, `
INSERT INTO erp.sync_follow AS f (source, stream, login, demoted_at, demoted_why, list_order) VALUES ($1, $2, $3, now(), $4, 'unordered')
ON CONFLICT (source, stream, login) DO UPDATE SET demoted_at = now(), demoted_why = $4, list_order = 'unordered', updated_at = now()`,
		k.Source, k.Stream, k.Login, SafeText(why, 2000))
	if err != nil {
		return fmt.Errorf("demoting %s to complete sweeps: %w", k, Describe(err))
	}
	return nil
}

// QueueSweepBounds queues the record of a sweep page's first and last id
// (see erp.sweep_bounds).
func QueueSweepBounds(b *pgx.Batch, sweepID, page int64, first, last string) {
	b.Queue(`INSERT INTO erp.sweep_bounds (sweep_id, page, first_id, last_id) VALUES ($1, $2, $3, $4)
ON CONFLICT (sweep_id, page) DO UPDATE SET first_id = EXCLUDED.first_id, last_id = EXCLUDED.last_id`, sweepID, page, first, last)
}

// Bound is the first and last id of a page of a sweep, by page number.
type Bound struct {
	Page        int64
	First, Last string
}

// SweepBounds lists the bounds of a sweep's pages, in page order.
func SweepBounds(ctx context.Context, q Querier, sweepID int64) ([]Bound, error) {
	rows, err := q.Query(ctx, `SELECT page, first_id, last_id FROM erp.sweep_bounds WHERE sweep_id = $1 ORDER BY page`, sweepID)
	if err != nil {
		return nil, fmt.Errorf("reading the sweep's page bounds: %w", Describe(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Bound])
	if err != nil {
		return nil, fmt.Errorf("reading the sweep's page bounds: %w", Describe(err))
	}
	return out, nil
}

// DeletionCandidates lists the rows a login's last complete sweep held
// for the next to confirm (erp.deletion_candidates).
func DeletionCandidates(ctx context.Context, q Querier, k StreamKey) (map[string]bool, error) {
	rows, err := q.Query(ctx, `SELECT id FROM erp.deletion_candidates WHERE source = $1 AND stream = $2 AND login = $3`,
		k.Source, k.Stream, k.Login)
	if err != nil {
		return nil, fmt.Errorf("reading the rows held for a second sweep: %w", Describe(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading the rows held for a second sweep: %w", Describe(err))
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// SetDeletionCandidates replaces the rows a login's sweep holds for the
// next to confirm (a row held already keeps the sweep that first held
// it).
func SetDeletionCandidates(ctx context.Context, q Querier, k StreamKey, sweepID int64, ids []string) error {
	if ids == nil {
		ids = []string{} // NULL would keep every row
	}
	_, err := q.Exec(ctx, `DELETE FROM erp.deletion_candidates WHERE source = $1 AND stream = $2 AND login = $3 AND id <> ALL($4)`,
		k.Source, k.Stream, k.Login, ids)
	if err == nil {
		_, err = q.Exec(ctx, `
INSERT INTO erp.deletion_candidates (source, stream, login, id, sweep_id)
SELECT $1, $2, $3, id, $4 FROM unnest($5::text[]) AS u(id)
ON CONFLICT (source, stream, login, id) DO NOTHING`, k.Source, k.Stream, k.Login, sweepID, ids)
	}
	if err != nil {
		return fmt.Errorf("holding rows for a second sweep: %w", Describe(err))
	}
	return nil
}

// ResetStream starts a stream over for a login, keeping every row and
// every version: it forgets the sweep in progress, the last complete
// sweep's page digests, the deletion the guard holds, the rows held for a
// second sweep and how the list is followed (its anchors, its order, a
// demotion), and records when. The data stay as fresh as they were.
func ResetStream(ctx context.Context, tx pgx.Tx, k StreamKey) error {
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM erp.sweep_seen WHERE sweep_id = (SELECT sweep_id FROM erp.sync_checkpoints WHERE source = $1 AND stream = $2 AND login = $3)`,
		k.Source, k.Stream, k.Login)
	b.Queue(`DELETE FROM erp.sweep_bounds WHERE sweep_id = (SELECT sweep_id FROM erp.sync_checkpoints WHERE source = $1 AND stream = $2 AND login = $3)`,
		k.Source, k.Stream, k.Login)
	b.Queue(`DELETE FROM erp.sweep_pages WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login)
	b.Queue(`DELETE FROM erp.deletion_candidates WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login)
	b.Queue(`DELETE FROM erp.sync_follow WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login)
	b.Queue(`
INSERT INTO erp.sync_checkpoints AS c (source, stream, login, reset_at, updated_at) VALUES ($1, $2, $3, now(), now())
ON CONFLICT (source, stream, login) DO UPDATE SET sweep_id = NULL, sweep_started_at = NULL, cursor = NULL, pages = 0, rows = 0,
    bulk_load = false, last_sweep_id = NULL, held_deletions = 0, held_digest = NULL, held_sweeps = 0, held_since = NULL,
    sweep_order = NULL, sweep_last_id = NULL, sweep_max_key = NULL, sweep_followed_key = NULL, reset_at = now(), updated_at = now()`,
		k.Source, k.Stream, k.Login)
	return SendBatch(ctx, tx, b, "resetting "+k.String())
}

// ResetSince reports whether the stream was reset for the login since its
// data were last complete: its next run reads everything again.
func ResetSince(ctx context.Context, q Querier, k StreamKey) (bool, error) {
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
