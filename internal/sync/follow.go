package sync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
)

// Follow runs read only what is new in a paged list since the last read,
// between complete sweeps, and write it; they never mark a row deleted.
// Neither the API reference nor a read-only client can tell what a cursor
// encodes (a position in the list, or the last key seen), so a follow
// proves, with what it reads, that it missed nothing, whichever it is:
//
//   - A list whose last two complete sweeps listed ids strictly
//     ascending takes new records last. A follow asks again for the last
//     non-empty page read (an anchor: its cursor or start, kept with each
//     page's commit) and reads on while the list says there is more.
//     Continuity is proved only when that page begins with an id the
//     warehouse holds and no higher than the highest the login has read;
//     else an older anchor is tried (the records of the last page may be
//     gone), and without one the run sweeps.
//   - A list whose sweeps listed ids strictly descending takes new records
//     first. A follow reads from the first page and stops at a page whose
//     records were all stored, unchanged, before the run began.
//   - Every page must keep the list's order. After a follow of several
//     pages, each page but the last is asked for again: a record not in
//     the warehouse within the ids read means the list shifted under the
//     reader (a deletion inside a page read moves a record across a page
//     boundary when cursors are positions), and the follow is repeated a
//     few times, then the run sweeps.
//
// A follow that cannot prove continuity runs a complete sweep in the same
// run and records why; a list in no strict order is always swept.
type follow struct {
	run   *Run
	list  *List
	order string
	at    db.Anchor // where the walk starts: an anchor, or the first page
	high  string    // sort key of the highest id the login had read
	// read is when the login's last complete read of the list (a follow
	// run or a sweep) ended: what was stored by then holds everything
	// below it. A row stored since, by a run that was stopped before it
	// read on, or by this run, proves nothing.
	read  time.Time
	first bool // the next page admitted is the walk's first
	trail orderTrail

	anchors, nextAnchors []db.Anchor // the login's anchors, newest first
	walked, nextWalked   []db.Anchor // the pages this walk committed, in order
}

// followRepeats bounds how many times a follow whose second look differed
// is made again before the run sweeps.
const followRepeats = 3

// notProved is a follow that could not prove it read everything new: the
// run sweeps instead, saying why. noOverlap: the page at an anchor does not
// begin where the warehouse stands, and an older anchor may.
type notProved struct {
	why       string
	noOverlap bool
}

func (e *notProved) Error() string { return "follow not proved: " + e.why }

// followList runs one follow run of the list through the run's login: a
// follow if the list may be followed and continuity is proved, else a
// complete sweep, with the reason recorded.
func (l *List) followList(ctx context.Context, r *Run) error {
	f, err := db.LoadFollow(ctx, r.conn, r.scope.Key)
	if err != nil {
		return err
	}
	cp, err := db.LoadCheckpoint(ctx, r.conn, r.scope.Key)
	if err != nil {
		return err
	}
	order := followable(f.ListOrder)
	var why string
	switch {
	case cp.LastCompleted.IsZero():
		why = "the login has no complete sweep yet"
	case f.DemotedWhy != "":
		why = f.DemotedWhy
	case order == "":
		why = fmt.Sprintf("the list is not in a strict order of ids (its last complete sweeps: %s)", sweptOrders(f.SweepOrders))
	default:
		if why, err = l.follow(ctx, r, f, cp, order); err != nil {
			return err
		}
	}
	if why != "" {
		r.Note("follow run swept the whole list: %s", why)
		r.log.Info("follow run sweeps the whole list", "why", why)
		r.swept = why
		busy, err := r.withSweepLock(ctx, func() error { return l.sweepList(ctx, r) })
		if err != nil {
			return err
		}
		if busy {
			// A sweep is under way in another run: it reads what is new
			// too. A follow never abandons a sweep under way.
			r.Note("a complete sweep is under way in another run; this follow run leaves the list to it")
			return nil
		}
	}
	r.followedAt, err = db.FollowCompleted(ctx, r.conn, r.scope.Key, why)
	return err
}

func sweptOrders(orders []string) string {
	if len(orders) == 0 {
		return "none"
	}
	return strings.Join(orders, ", ")
}

// follow follows the list, repeating a follow whose second look differs;
// it returns why the run must sweep instead ("" when it need not).
func (l *List) follow(ctx context.Context, r *Run, f db.Follow, cp db.Checkpoint, order string) (string, error) {
	read := f.LastFollow
	if cp.LastCompleted.After(read) {
		read = cp.LastCompleted
	}
	for attempt := 0; ; attempt++ {
		// Each attempt starts where the run started: a repeat reads again
		// what the second look found changed.
		p := &follow{run: r, list: l, order: order, high: f.MaxKey, read: read, anchors: f.Anchors}
		why, err := l.followOnce(ctx, p)
		if err != nil || why != "" {
			return why, err
		}
		differ, err := l.secondLook(ctx, r, p.walked)
		if err != nil || differ == "" {
			return "", err
		}
		if attempt == followRepeats {
			return fmt.Sprintf("the list changed under every second look (%d follows): %s", attempt+1, differ), nil
		}
		r.Note("follow: a second look differed (%s); following again", differ)
		r.log.Info("follow: a second look differed; following again", "why", differ)
	}
}

// followOnce walks once: a list in ascending order from its newest anchor
// that proves continuity, one in descending order from its first page.
func (l *List) followOnce(ctx context.Context, p *follow) (string, error) {
	if p.order == descending {
		p.first = true
		return proved(l.walk(ctx, p.run, p))
	}
	if len(p.anchors) == 0 {
		return "no anchor is kept to follow from", nil
	}
	why := ""
	for _, a := range slices.Clone(p.anchors) {
		p.at, p.first, p.trail = a, true, orderTrail{}
		err := l.walk(ctx, p.run, p)
		var refused *erp.CursorRefusedError
		var np *notProved
		switch {
		case err == nil:
			return "", nil
		case errors.As(err, &refused):
			why = "the ERP refused the anchor's cursor (" + refused.Err.Error() + ")"
		case errors.As(err, &np) && np.noOverlap:
			why = np.why
		case errors.As(err, &np):
			return np.why, nil
		default:
			return "", err
		}
		p.run.log.Debug("follow: anchor not proved; trying an older one", "why", why)
	}
	return why, nil
}

// proved turns a walk's notProved into the reason to sweep.
func proved(err error) (string, error) {
	var np *notProved
	if errors.As(err, &np) {
		return np.why, nil
	}
	return "", err
}

func (p *follow) start() (erp.ListRequest, int64) {
	return p.list.requestAt(p.run.target, p.at), 0
}

func (p *follow) known() knownPages { return knownPages{} }

func (p *follow) seenBy() int64 { return 0 }

func (p *follow) bulk() bool { return false }

// ahead: a follow of a list in descending order ends at a page the
// warehouse had: a page fetched ahead of it would be asked for nothing.
func (p *follow) ahead() bool { return p.order != descending }

// admit checks that the page keeps the list's order and, for the first
// page read from an anchor, that it overlaps what the warehouse holds.
func (p *follow) admit(ctx context.Context, page *preparedPage) error {
	first := p.first
	p.first = false
	if got := p.trail.extend(page.ids); got != "" && got != p.order {
		return &notProved{why: fmt.Sprintf("page %d lists ids out of the list's %s order", page.number, p.order)}
	}
	if !first || p.order != ascending {
		return nil
	}
	if len(page.ids) == 0 {
		return &notProved{why: "no overlap: the page at the anchor lists no record", noOverlap: true}
	}
	id := page.ids[0]
	if idKey(id) > p.high {
		return &notProved{why: fmt.Sprintf("no overlap: the page at the anchor begins with id %s, above the highest id read", id), noOverlap: true}
	}
	stored, err := p.list.table.db.Stored(ctx, p.run.conn, p.run.scope.Source, []string{id})
	if err != nil {
		return err
	}
	if !stored[id] {
		return &notProved{why: fmt.Sprintf("no overlap: the page at the anchor begins with id %s, which the warehouse does not hold", id), noOverlap: true}
	}
	return nil
}

// queue queues, with each page, the anchors after it and the highest id
// read. A follow ends no sweep: it never reports the last transaction.
func (p *follow) queue(statements *pgx.Batch, bk *book) bool {
	p.nextAnchors, p.nextWalked = p.anchors, p.walked
	for _, page := range bk.pages {
		if len(page.ids) == 0 {
			continue
		}
		at := page.at
		at.IDs = page.ids
		p.nextWalked = append(p.nextWalked, at)
		if p.order == ascending {
			p.nextAnchors = pushAnchor(p.nextAnchors, at)
		}
	}
	db.QueueFollowPage(statements, p.run.scope.Key, p.nextAnchors, p.trail.max)
	return false
}

func (p *follow) end(context.Context, pgx.Tx, *book) (time.Time, int64, error) {
	return time.Time{}, 0, nil
}

func (p *follow) committed(context.Context, time.Time) {
	p.anchors, p.walked = p.nextAnchors, p.nextWalked
}

// done ends a follow of a list in descending order at a page that ends
// with a record stored, unchanged, by the end of the login's last complete
// read: every record after it in the list is older still (the order of
// every page is checked), so it was read then too, and the records before
// it on the page were just written. One request is then enough when at
// most a page is new. (The end of the last complete read, not the start
// of this run: a follow stopped after its first page stored records
// whose next page it never read.)
func (p *follow) done(ctx context.Context, page *preparedPage) (bool, error) {
	if p.order != descending || len(page.ids) == 0 {
		return false, nil
	}
	last := page.ids[len(page.ids)-1]
	i := slices.IndexFunc(page.rows, func(r db.Row) bool { return r.ID == last })
	if i < 0 {
		return false, nil
	}
	same, err := p.list.table.db.SameBy(ctx, p.run.conn, p.run.scope.Source, []string{last}, [][]byte{page.rows[i].Hash[:]}, p.read)
	return same == 1, err
}

// secondLook asks again for each page of a follow but the last, and says
// what differs ("": nothing): a record the warehouse does not hold whose
// id lies within the ids the follow read was not read.
func (l *List) secondLook(ctx context.Context, r *Run, walked []db.Anchor) (string, error) {
	if len(walked) < 2 {
		return "", nil
	}
	var keys []string
	for _, w := range walked {
		for _, id := range w.IDs {
			keys = append(keys, idKey(id))
		}
	}
	if len(keys) == 0 {
		return "", nil
	}
	low, high := slices.Min(keys), slices.Max(keys)
	for _, w := range walked[:len(walked)-1] {
		if err := r.Stopped(); err != nil {
			return "", err
		}
		page, err := r.login.Client.List(l.requestAt(r.target, w)).Next(ctx)
		if err != nil {
			return "", fmt.Errorf("%s: asking again for a page followed: %w", l.Stream, err)
		}
		var within []string
		for i := range page.Records {
			if id, ok, err := item(page, i).Record.Text("id"); err == nil && ok {
				if k := idKey(id); k >= low && k <= high {
					within = append(within, id)
				}
			}
		}
		page.Release()
		stored, err := l.table.db.Stored(ctx, r.conn, r.scope.Source, within)
		if err != nil {
			return "", err
		}
		for _, id := range within {
			if !stored[id] {
				return fmt.Sprintf("record %s is listed among the ids read but was not read", id), nil
			}
		}
	}
	return "", nil
}
