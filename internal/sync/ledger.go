package sync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// ledger is what a login has learnt of a paged list, kept in
// erp.sync_follow: the order its complete sweeps listed ids in and what
// that says of the list (followed or not, and whether it was demoted for
// good), the highest id read, and anchors (where the last pages read
// began) to read on from. Every way of reading the list tells the ledger
// what it read; the ledger alone writes that state, and none of the
// readings writes another's.
type ledger struct {
	key  model.Key
	kept db.Follow
}

// keptAnchors is how many anchors a login keeps, newest first: a ring as
// long as the largest window, where a window run of a list in ascending
// order starts, and a few more, so that the deletion of the records of
// the page an anchor names leaves an older one to ask from.
const keptAnchors = maxWindowPages + 3

func loadLedger(ctx context.Context, q db.Querier, k model.Key) (*ledger, error) {
	f, err := db.LoadFollow(ctx, q, k)
	if err != nil {
		return nil, err
	}
	return &ledger{key: k, kept: f}, nil
}

// followOrder is the order the list may be followed in, or why it may not
// be followed now (cp: the login's sweep checkpoint).
func (l *ledger) followOrder(cp db.Checkpoint) (model.Order, string) {
	switch {
	case cp.LastCompleted.IsZero():
		return "", "the login has no complete sweep yet"
	case l.kept.DemotedWhy != "":
		return "", l.kept.DemotedWhy
	case !l.kept.ListOrder.Strict():
		return "", fmt.Sprintf("the list is not in a strict order of ids (its last complete sweeps: %s)", sweptOrders(l.kept.SweepOrders))
	}
	return l.kept.ListOrder, ""
}

func sweptOrders(orders []model.Order) string {
	if len(orders) == 0 {
		return "none"
	}
	words := make([]string, len(orders))
	for i, o := range orders {
		words[i] = string(o)
		if o == model.OrderUnknown {
			words[i] = "fewer than two ids"
		}
	}
	return strings.Join(words, ", ")
}

// pushAnchor puts a, as the ledger keeps it (its page's first and last
// id only, so that the ring stays small), as the newest of the anchors
// kept. A page read again from where a kept anchor begins (a follow run
// reads its newest page again, to see what was added to it) takes that
// anchor's place, and the anchors newer than it go: the walk reads them
// again after it. So the ring keeps one anchor a page, each a page older
// than the one before it, and a window of n pages starts n-1 anchors
// back; else follow runs would fill it with copies of the newest page.
func pushAnchor(anchors []db.Anchor, a db.Anchor) []db.Anchor {
	if n := len(a.IDs); n > 2 {
		a.IDs = []string{a.IDs[0], a.IDs[n-1]}
	}
	for i, kept := range anchors {
		if samePlace(kept, a) {
			anchors = anchors[i+1:]
			break
		}
	}
	out := append([]db.Anchor{a}, anchors...)
	return out[:min(len(out), keptAnchors)]
}

// samePlace tells whether two anchors ask for the same page: by the
// cursor when they have one (a page asked for by cursor does not know its
// offset, one a sweep reached does), else by where the page starts.
func samePlace(a, b db.Anchor) bool {
	if a.Cursor != "" || b.Cursor != "" {
		return a.Cursor == b.Cursor
	}
	return a.Start == b.Start
}

// anchorOf is where page began, with its ids: asking from there asks for
// it again.
func anchorOf(page *preparedPage) db.Anchor {
	at := page.at
	at.IDs = page.ids
	return at
}

// keepsOrder is a page that keeps the list's order, as trail follows the
// walk; else the verdict that refuses it.
func keepsOrder(trail *orderTrail, page *preparedPage, order model.Order) verdict {
	if got := trail.extend(page.ids); got != model.OrderUnknown && got != order {
		return verdict{why: fmt.Sprintf("page %d lists ids out of the list's %s order", page.number, order)}
	}
	return verdict{}
}

// overlaps proves where a walk from an anchor (what: "the anchor", "the
// window's start") begins: its first page begins with an id the warehouse
// holds, no higher than the highest the login had read (high). Else the
// verdict says why, and an older anchor may do.
func overlaps(ctx context.Context, r *Run, t *Table, page *preparedPage, high, what string) (verdict, error) {
	if len(page.ids) == 0 {
		return verdict{why: "no overlap: the page at " + what + " lists no record", elsewhere: true}, nil
	}
	id := page.ids[0]
	if idKey(id) > high {
		return verdict{why: fmt.Sprintf("no overlap: the page at %s begins with id %s, above the highest id read", what, id), elsewhere: true}, nil
	}
	stored, err := t.db.Stored(ctx, r.conn, r.scope.Source, []string{id})
	if err != nil || stored[id] {
		return verdict{}, err
	}
	return verdict{why: fmt.Sprintf("no overlap: the page at %s begins with id %s, which the warehouse does not hold", what, id), elsewhere: true}, nil
}

// anchorRefused is why a walk from an anchor ended, when it ended in the
// ERP refusing the anchor's cursor; "" when err is not that. An older
// anchor, or a complete sweep, may still be read.
func anchorRefused(err error) string {
	var refused *erp.CursorRefusedError
	if errors.As(err, &refused) {
		return "the ERP refused the anchor's cursor (" + refused.Err.Error() + ")"
	}
	return ""
}

// sweepBegan records, as a sweep of the login begins, how far its follow
// runs had read: a record the sweep inserts at or below that is one they
// missed.
func (l *ledger) sweepBegan(ctx context.Context, q db.Querier) error {
	if err := db.SweepStarted(ctx, q, l.key); err != nil {
		return err
	}
	l.kept.SweepFollowedKey = l.kept.FollowedKey
	return nil
}

// sweepNotes is what a sweep in progress tells the ledger of its pages:
// the anchors of its last non-empty pages, and how many records it
// inserted that follow runs had missed.
type sweepNotes struct {
	anchors []db.Anchor
	missed  int64
}

// after is n once the pages of bk are committed.
func (l *ledger) after(n sweepNotes, bk *book) sweepNotes {
	for _, page := range bk.pages {
		if len(page.ids) > 0 {
			n.anchors = pushAnchor(n.anchors, anchorOf(page))
		}
	}
	if followed := l.kept.SweepFollowedKey; followed != "" {
		for _, id := range bk.newIDs {
			if idKey(id) <= followed {
				n.missed++
			}
		}
	}
	return n
}

// sweepEnded records, in the transaction that completes a sweep of the
// login, what the sweep showed: the order its ids came in, its highest id
// and the anchors of its last pages. A sweep that found records the
// follow runs missed demotes the list to complete sweeps until the stream
// is reset; the reason is returned ("" when not).
func (l *ledger) sweepEnded(ctx context.Context, tx db.Tx, sweepID int64, order model.Order, maxKey string, n sweepNotes) (string, error) {
	f, err := db.LoadFollow(ctx, tx, l.key)
	if err != nil {
		return "", err
	}
	orders := append([]model.Order{order}, f.SweepOrders...)[:min(len(f.SweepOrders)+1, 2)]
	showed := db.Follow{SweepOrders: orders, ListOrder: listOrder(orders, f.DemotedWhy != ""), MaxKey: maxKey, Anchors: n.anchors}
	if n.missed > 0 {
		showed.DemotedWhy = fmt.Sprintf("sweep %d found %d records at or below the highest id follow runs had read, which they missed: the list is not followed until `erpsync reset %s`",
			sweepID, n.missed, l.key.Stream)
	}
	if err := db.SweepFollowed(ctx, tx, l.key, showed); err != nil {
		return "", err
	}
	return showed.DemotedWhy, nil
}

// followedPages queues, with the pages of a follow run, the anchors as
// they stand after them and the highest id read.
func (l *ledger) followedPages(b *pgx.Batch, anchors []db.Anchor, maxKey string) {
	db.QueueFollowPage(b, l.key, anchors, maxKey)
}

// followEnded records the end of a follow run: why it read the whole list
// instead ("": it did not), and returns when.
func (l *ledger) followEnded(ctx context.Context, q db.Querier, swept string) (at time.Time, err error) {
	return db.FollowCompleted(ctx, q, l.key, swept)
}
