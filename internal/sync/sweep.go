package sync

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// sweep is the reading of a complete sweep: it starts where its
// checkpoint stands, records in every transaction the checkpoint past its
// pages, what their requests were answered with and what it learnt of the
// list's order, and ends, in the transaction of the last page, by
// deciding what it found deleted, telling the login's ledger what it
// showed (a list that is followed) and completing.
type sweep struct {
	run    *Run
	list   *List
	ledger *ledger // nil: a list that is not followed
	known  knownPages
	state  sweepState // as committed
}

// sweepState is where a sweep stands: its checkpoint, and what its pages
// showed so far.
type sweepState struct {
	cp    db.Checkpoint
	trail orderTrail
	lists listScope
	notes sweepNotes
}

// newSweep is the reading of the sweep at cp, knowing the pages of the
// login's last complete sweep.
func (l *List) newSweep(ctx context.Context, r *Run, cp db.Checkpoint, lg *ledger) (*sweep, error) {
	var answers db.Answers
	var changed []string
	if !cp.BulkLoad && cp.LastSweepID != 0 {
		var err error
		if answers, changed, err = l.Table.db.KnownPages(ctx, r.conn, r.scope.Key, cp.LastSweepID); err != nil {
			return nil, err
		}
	}
	s := &sweep{run: r, list: l, ledger: lg, known: l.knownPages(r.scope, answers, changed),
		state: sweepState{cp: cp, trail: orderTrail{order: cp.Order, last: cp.LastID, max: cp.MaxKey}}}
	if cp.Pages > 0 && cp.Order == model.OrderUnknown && cp.LastID == "" {
		// A sweep begun by a release that did not follow the order of
		// ids: what its first pages listed is not known.
		s.state.trail.order = model.OrderUnordered
	}
	return s, nil
}

func (s *sweep) plan() walkPlan {
	cp := s.state.cp
	p := walkPlan{request: s.list.request(s.run.target, cp.Cursor), before: cp.Pages, known: s.known, bulk: cp.BulkLoad, ahead: true}
	if !cp.BulkLoad {
		p.seenBy = cp.SweepID
	}
	return p
}

func (s *sweep) admit(context.Context, *preparedPage) (admission, error) { return admission{}, nil }

// stage queues the ids seen of pages not written, the checkpoint past the
// pages, what their requests were answered with, and their bounds; on the
// sweep's last page, its end.
func (s *sweep) stage(statements *pgx.Batch, bk *book) staged {
	next := s.state
	progress := db.SweepProgress{Pages: int64(len(bk.pages)), Seen: bk.seen}
	for _, page := range bk.pages {
		next.lists.observe(page, bk.othersListed)
		progress.Rows += int64(len(page.rows))
		if page.digest != nil {
			progress.Digests = append(progress.Digests, *page.digest)
		}
		next.trail.extend(page.ids)
		if len(page.ids) > 0 && !next.cp.BulkLoad {
			progress.Bounds = append(progress.Bounds, db.Bound{Page: page.number, First: page.ids[0], Last: page.ids[len(page.ids)-1]})
		}
	}
	if s.ledger != nil {
		next.notes = s.ledger.after(next.notes, bk)
	}
	db.QueueChangePositions(statements, s.run.scope.Key, changedPage(model.KindSweep, next.cp.SweepID, next.trail.order, bk))
	last := bk.pages[len(bk.pages)-1]
	cp := &next.cp
	cp.Cursor, cp.Order, cp.LastID, cp.MaxKey = last.cursor, next.trail.order, next.trail.last, next.trail.max
	cp.Pages, cp.Rows = cp.Pages+progress.Pages, cp.Rows+progress.Rows
	db.QueueSweepProgress(statements, next.cp, progress)
	st := staged{adopt: func(ctx context.Context, e ended) {
		s.adopt(ctx, next, e)
		s.run.result.read.sweptTo(next.cp.Rows, last.total)
	}}
	if last.last {
		st.last = true
		st.end = func(ctx context.Context, tx db.Tx, bk *book) (ended, error) { return s.end(ctx, tx, bk, next) }
	}
	return st
}

// adopt takes the state the sweep committed; a sweep completed makes the
// stream's data as fresh as its end.
func (s *sweep) adopt(ctx context.Context, next sweepState, e ended) {
	s.state = next
	if e.at.IsZero() {
		return
	}
	s.run.result.freshAt = e.at
	if next.cp.BulkLoad {
		s.run.analyze(ctx, s.list.Table.db, next.cp.Rows)
	}
	if next.notes.missed > 0 {
		s.run.runner.obs().FollowMissed(s.run.target.Source, s.run.scope.Stream, s.run.scope.Login, next.notes.missed)
	}
}

// end closes the sweep in the transaction of its last page: it decides
// what the sweep found deleted, tells the ledger what it showed of the
// list, and completes it, returning when.
func (s *sweep) end(ctx context.Context, tx db.Tx, bk *book, next sweepState) (ended, error) {
	r, table, cp := s.run, s.list.Table.db, next.cp
	read := db.Read{Kind: model.KindSweep, ID: cp.SweepID, Began: cp.SweepStarted, Bounds: cp.Order.Strict()}
	var ev db.DeletionEvidence
	if !cp.BulkLoad {
		// A bulk load began on a table without rows of the source: every
		// row there now is one it wrote, and it keeps no seen-list.
		var err error
		if ev, err = table.DeletionEvidence(ctx, tx, r.scope, read); err != nil {
			return ended{}, err
		}
	}
	last := bk.pages[len(bk.pages)-1]
	deleted, err := r.settleDeletions(ctx, sweepEvidence(cp, last, ev), func(ctx context.Context, d db.Deletions) (int64, error) {
		d.Where = goneAt(model.KindSweep, cp.SweepID, cp.Order, ev.Bounds, d.Mark)
		return table.ApplyDeletions(ctx, tx, r.scope, read, d)
	})
	if err != nil {
		return ended{}, err
	}
	if err := placeChanges(ctx, tx, r.scope.Key, model.KindSweep, cp.SweepID, cp.Order, cp.Pages); err != nil {
		return ended{}, err
	}
	if s.ledger != nil {
		demoted, err := s.ledger.sweepEnded(ctx, tx, cp.SweepID, cp.Order, cp.MaxKey, next.notes)
		if err != nil {
			return ended{}, err
		}
		if demoted != "" {
			r.Warn("%s", demoted)
		}
	}
	// The pages of this sweep are known to the next only if no id came
	// twice in it: a row listed on two pages ends as the later copy, so
	// the earlier page would not be as the warehouse has it (in a bulk
	// load, a second copy made the COPY fall back). Descending lists keep
	// none: a record added at their head moves every record after it, so
	// their pages are never answered the same twice.
	twice := ev.Distinct < cp.Rows
	if cp.BulkLoad {
		twice = bk.fellBack
	}
	keepDigests := !twice && cp.Order != model.OrderDescending
	at, err := db.CompleteSweep(ctx, tx, cp, next.lists.scope(), keepDigests)
	return ended{at: at, deleted: deleted}, err
}

// sweepEvidence is what the deletions of the complete sweep at cp, whose
// last page is last, are decided on.
func sweepEvidence(cp db.Checkpoint, last *preparedPage, ev db.DeletionEvidence) deletionEvidence {
	out := deletionEvidence{read: fmt.Sprintf("sweep %d", cp.SweepID), within: wholeList, bulkLoad: cp.BulkLoad,
		seenList: true, rows: cp.Rows, seen: ev.Seen, distinct: ev.Distinct, pages: cp.Pages, stated: last.total,
		order: cp.Order, bounds: ev.Bounds, gone: ev.Gone, live: int64(len(ev.Gone)) + cp.Rows,
		candidates: ev.Candidates, held: ev.Held}
	if last.cut {
		out.cut = last.received
	}
	return out
}

// startSweep begins a sweep from the first page in place of the one was
// has in progress, if any; on a table without rows of the source it is a
// bulk load. A list that is followed tells its ledger.
func (l *List) startSweep(ctx context.Context, r *Run, was db.Checkpoint, lg *ledger) (db.Checkpoint, error) {
	cp, err := db.StartSweep(ctx, r.conn, was, l.Table.db)
	if err != nil {
		return db.Checkpoint{}, err
	}
	if lg != nil {
		if err := lg.sweepBegan(ctx, r.conn); err != nil {
			return db.Checkpoint{}, err
		}
	}
	r.log.Debug("sweep started", "sweep_id", cp.SweepID, "bulk_load", cp.BulkLoad)
	return cp, nil
}

// resumable: only a cursor says where an interrupted sweep stopped.
func (l *List) resumable() bool { return l.Paging == erp.CursorPaged }

// listScope gathers what a sweep shows of the stream's lists: records of
// other branches (their own labels say so), or rows another login of the
// source listed first, mean the lists hold the whole company's records
// (every login of the company reads each one); records all carrying the
// login's own branch mean the branch's. Without labels, a login that
// lists rows no other login does cannot tell which: nothing is said.
type listScope struct {
	companyWide bool // evidence of company-wide lists
	labelled    int  // records with their own labels
}

func (l *listScope) observe(page *preparedPage, othersListed int64) {
	l.companyWide = l.companyWide || page.otherBranch > 0 || othersListed > 0
	l.labelled += page.labelled
}

// scope is what the sweep showed: "company", "branch", or "".
func (l listScope) scope() string {
	switch {
	case l.companyWide:
		return "company"
	case l.labelled > 0:
		return "branch"
	}
	return ""
}
