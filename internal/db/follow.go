package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/model"
)

// Follow is how a login follows a paged list (erp.sync_follow).
type Follow struct {
	// SweepOrders are the orders its last complete sweeps listed ids in,
	// newest first, and ListOrder what they say of the list.
	SweepOrders []model.Order
	ListOrder   model.Order
	// DemotedWhy, when set, says why the list is swept and not followed
	// until the stream is reset.
	DemotedWhy string
	// MaxKey and FollowedKey are the sort keys of the highest id the login
	// has read, and of the highest a follow run has read ("" none);
	// SweepFollowedKey is FollowedKey as it stood when the login's sweep in
	// progress began.
	MaxKey, FollowedKey, SweepFollowedKey string
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
func LoadFollow(ctx context.Context, q Querier, k model.Key) (Follow, error) {
	var f Follow
	var order, demoted, maxKey, followed, sweepFollowed, swept *string
	var orders []string
	var anchors []byte
	var last *time.Time
	err := q.QueryRow(ctx, `
SELECT sweep_orders, list_order, demoted_why, max_key, followed_key, sweep_followed_key, anchors, last_follow_at, last_follow_swept
FROM erp.sync_follow WHERE source = $1 AND stream = $2 AND login = $3`, k.Source, k.Stream, k.Login).
		Scan(&orders, &order, &demoted, &maxKey, &followed, &sweepFollowed, &anchors, &last, &swept)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("loading how %s is followed: %w", k, Describe(err))
	}
	for _, o := range orders {
		f.SweepOrders = append(f.SweepOrders, model.ParseOrder(o))
	}
	f.ListOrder, f.DemotedWhy, f.LastSwept = model.ParseOrder(deref(order)), deref(demoted), deref(swept)
	f.MaxKey, f.FollowedKey, f.SweepFollowedKey = deref(maxKey), deref(followed), deref(sweepFollowed)
	f.LastFollow = deref(last)
	if err := json.Unmarshal(anchors, &f.Anchors); err != nil {
		return f, fmt.Errorf("reading the anchors of %s: %w", k, err)
	}
	return f, nil
}

// QueueFollowPage queues, in the transaction of a page a follow run
// writes, the anchors as they stand after it and the highest id read.
func QueueFollowPage(b *pgx.Batch, k model.Key, anchors []Anchor, maxKey string) {
	doc, _ := json.Marshal(anchors) // strings and numbers only
	b.Queue(`
INSERT INTO erp.sync_follow AS f (source, stream, login, anchors, max_key, followed_key)
VALUES ($1, $2, $3, $4, nullif($5, ''), nullif($5, ''))
ON CONFLICT (source, stream, login) DO UPDATE SET anchors = EXCLUDED.anchors,
    max_key = greatest(f.max_key, EXCLUDED.max_key), followed_key = greatest(f.followed_key, EXCLUDED.followed_key),
    updated_at = now()`, k.Source, k.Stream, k.Login, doc, maxKey)
}

// SweepStarted records, as a login's sweep begins, the highest id its
// follow runs had read: a record the sweep inserts at or below it is one
// they missed.
func SweepStarted(ctx context.Context, q Querier, k model.Key) error {
	if _, err := q.Exec(ctx, `UPDATE erp.sync_follow SET sweep_followed_key = followed_key, updated_at = now()
WHERE source = $1 AND stream = $2 AND login = $3 AND sweep_followed_key IS DISTINCT FROM followed_key`, k.Source, k.Stream, k.Login); err != nil {
		return fmt.Errorf("recording where the follow runs of %s stood: %w", k, Describe(err))
	}
	return nil
}

// orderTexts are orders as sweep_orders keeps them ("unknown" where a
// sweep read fewer than two ids).
func orderTexts(orders []model.Order) []string {
	out := make([]string, len(orders))
	for i, o := range orders {
		out[i] = string(o)
		if o == model.OrderUnknown {
			out[i] = "unknown"
		}
	}
	return out
}

// LastFollowed returns, by login, when a follow run of a stream last read
// everything new (logins never followed are absent).
func LastFollowed(ctx context.Context, q Querier, source, stream string) (map[string]time.Time, error) {
	return loginTimes(ctx, q, `SELECT login, last_follow_at FROM erp.sync_follow
WHERE source = $1 AND stream = $2 AND last_follow_at IS NOT NULL`, source, stream, "followed")
}

// FollowCompleted records the end of a follow run: when, and why it read
// the whole list instead ("": it did not).
func FollowCompleted(ctx context.Context, q Querier, k model.Key, swept string) (time.Time, error) {
	var at time.Time
	err := q.QueryRow(ctx, `
INSERT INTO erp.sync_follow AS f (source, stream, login, last_follow_at, last_follow_swept)
VALUES ($1, $2, $3, now(), nullif($4, ''))
ON CONFLICT (source, stream, login) DO UPDATE SET last_follow_at = now(), last_follow_swept = nullif($4, ''), updated_at = now()
RETURNING last_follow_at`, k.Source, k.Stream, k.Login, safeText(swept, 2000)).Scan(&at)
	if err != nil {
		return at, fmt.Errorf("recording the follow run of %s: %w", k, Describe(err))
	}
	return at, nil
}

// SweepFollowed records, in the transaction that completes a sweep of a
// list that may be followed, what the sweep showed: f's SweepOrders (the
// last sweeps', this one first) and ListOrder, the highest id it read
// (MaxKey), the anchors of its last pages (none: those kept stay), and,
// when f.DemotedWhy says why, that the list is swept, not followed, until
// the stream is reset.
func SweepFollowed(ctx context.Context, q Querier, k model.Key, f Follow) error {
	var doc []byte
	if len(f.Anchors) > 0 {
		doc, _ = json.Marshal(f.Anchors)
	}
	_, err := q.Exec(ctx, `
INSERT INTO erp.sync_follow AS f (source, stream, login, sweep_orders, list_order, max_key, anchors)
VALUES ($1, $2, $3, $4, nullif($5, ''), nullif($6, ''), coalesce($7::jsonb, '[]'))
ON CONFLICT (source, stream, login) DO UPDATE SET sweep_orders = EXCLUDED.sweep_orders, list_order = EXCLUDED.list_order,
    max_key = greatest(f.max_key, EXCLUDED.max_key), anchors = coalesce($7::jsonb, f.anchors), updated_at = now()`,
		k.Source, k.Stream, k.Login, orderTexts(f.SweepOrders), string(f.ListOrder), f.MaxKey, doc)
	if err != nil {
		return fmt.Errorf("recording what the sweep of %s showed of its order: %w", k, Describe(err))
	}
	if f.DemotedWhy == "" {
		return nil
	}
	_, err = q.Exec(ctx, `
INSERT INTO erp.sync_follow AS f (source, stream, login, demoted_at, demoted_why, list_order) VALUES ($1, $2, $3, now(), $4, 'unordered')
ON CONFLICT (source, stream, login) DO UPDATE SET demoted_at = now(), demoted_why = $4, list_order = 'unordered', updated_at = now()`,
		k.Source, k.Stream, k.Login, safeText(f.DemotedWhy, 2000))
	if err != nil {
		return fmt.Errorf("demoting %s to complete sweeps: %w", k, Describe(err))
	}
	return nil
}
