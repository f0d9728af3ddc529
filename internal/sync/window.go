package sync

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// Window runs re-read the newest part of a paged list, where its records
// change most (a draft posted, an invoice cancelled, an amount corrected),
// and decide its deletions there, between complete sweeps:
//
//   - A list in descending order (new records first) is read from its
//     first page, size pages.
//   - A list in ascending order (new records last) is read from the anchor
//     size pages before its newest end (the login's ledger keeps a ring of
//     them, fed by sweeps and follow runs) to its end. The start is proved
//     as a follow run's is: its first page must begin with an id the
//     warehouse holds, no higher than the highest read; else an older
//     anchor is tried (the window reads a page more).
//
// Every page must keep the list's order. The window's range is the ids
// from the lowest it read to the list's newest end, open there, so that a
// deleted newest record is judged; its deletions are decided by the one
// deletion decision within that range, on rows stored before the run
// began, with rows held at a page boundary and the guard's count kept
// apart from the sweeps'. A window run never touches a sweep under way: it
// has a seen-list and a lock of its own.
type window struct {
	run   *Run
	list  *List
	order model.Order
	size  int       // pages to read (a descending list's; an ascending list reads on to its end)
	why   string    // why the window has that size
	at    db.Anchor // where the walk starts (zero: the first page)
	high  string    // sort key of the highest id the login had read
	read  db.Read   // its seen-list and when it began
	first bool      // the next page admitted is the walk's first
	trail orderTrail
	state windowState // as committed
}

// windowState is what a window's walk committed: its pages and rows, the
// lowest id it read, and the last page's number.
type windowState struct {
	pages, rows, last int64
	lowest            string
}

func (w *window) plan() walkPlan {
	// A window of a list in descending order ends at its size: a page
	// fetched ahead would be asked for nothing.
	return walkPlan{request: w.list.requestAt(w.run.target, w.at), seenBy: w.read.ID, ahead: w.order == model.OrderAscending}
}

// admit checks that the page keeps the list's order and, for the first
// page read from an anchor, that it overlaps what the warehouse holds; a
// window of a list in descending order ends at its size.
func (w *window) admit(ctx context.Context, page *preparedPage) (admission, error) {
	first := w.first
	w.first = false
	if v := keepsOrder(&w.trail, page, w.order); v.why != "" {
		return admission{refused: v}, nil
	}
	last := w.order == model.OrderDescending && page.number >= int64(w.size)
	if !first || w.order != model.OrderAscending || w.at.Cursor == "" && w.at.Start == 0 {
		return admission{last: last}, nil
	}
	v, err := overlaps(ctx, w.run, w.list.Table, page, w.high, "the window's start")
	return admission{refused: v}, err
}

// stage queues each page's bounds and where it changed records; the
// window's last page ends it.
func (w *window) stage(statements *pgx.Batch, bk *book) staged {
	next := w.state
	for _, page := range bk.pages {
		next.pages++
		next.rows += int64(len(page.rows))
		next.last = page.number
		for _, id := range page.ids {
			if next.lowest == "" || compareIDs(id, next.lowest) < 0 {
				next.lowest = id
			}
		}
		if len(page.ids) > 0 {
			db.QueueSweepBounds(statements, w.read.ID, db.Bound{Page: page.number, First: page.ids[0], Last: page.ids[len(page.ids)-1]})
		}
	}
	db.QueueChangePositions(statements, w.run.scope.Key, changedPage(model.KindWindow, w.read.ID, w.order, bk))
	end := bk.pages[len(bk.pages)-1]
	st := staged{adopt: func(_ context.Context, e ended) {
		w.state = next
		if !e.at.IsZero() {
			w.run.result.windowedAt = e.at
		}
	}}
	if end.last || w.order == model.OrderDescending && end.number >= int64(w.size) {
		st.last = true
		st.end = func(ctx context.Context, tx db.Tx, bk *book) (ended, error) { return w.end(ctx, tx, next) }
	}
	return st
}

// end closes the window run in the transaction of its last page: the
// deletions inside its range, where its changes lay, and its completion.
func (w *window) end(ctx context.Context, tx db.Tx, next windowState) (ended, error) {
	r, table := w.run, w.list.Table.db
	read := w.read
	read.From, read.Bounds = next.lowest, true
	if err := placeChanges(ctx, tx, r.scope.Key, model.KindWindow, read.ID, w.order, next.last); err != nil {
		return ended{}, err
	}
	var deleted int64
	if next.lowest != "" {
		ev, err := table.DeletionEvidence(ctx, tx, r.scope, read)
		if err != nil {
			return ended{}, err
		}
		evidence := deletionEvidence{read: fmt.Sprintf("window %d", read.ID), within: idRange{from: next.lowest, order: w.order},
			seenList: true, rows: next.rows, seen: ev.Seen, distinct: ev.Distinct, pages: next.pages, stated: -1,
			order: w.order, bounds: ev.Bounds, gone: ev.Gone, live: int64(len(ev.Gone)) + next.rows, candidates: ev.Candidates, held: ev.Held}
		deleted, err = r.settleDeletions(ctx, evidence, func(ctx context.Context, d db.Deletions) (int64, error) {
			d.Where = goneAt(model.KindWindow, read.ID, w.order, ev.Bounds, d.Mark)
			return table.ApplyDeletions(ctx, tx, r.scope, read, d)
		})
		if err != nil {
			return ended{}, err
		}
	}
	at, err := db.CompleteWindow(ctx, tx, r.scope.Key, read, int(next.pages), w.why)
	return ended{at: at, deleted: deleted}, err
}
