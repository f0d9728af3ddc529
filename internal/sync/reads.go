package sync

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// The runs of a list: which readings a run of each kind walks, in which
// order, and under which lock. The readings never call each other; what
// one cannot do (a follow run that cannot prove it missed nothing) is
// decided here.

// read runs the list as the run's kind asks.
func (l *List) read(ctx context.Context, r *Run) error {
	switch r.kind {
	case model.KindFollow:
		return l.followRun(ctx, r)
	case model.KindWindow:
		return l.windowRun(ctx, r)
	}
	return l.sweepRun(ctx, r)
}

// sweepRun walks the list route in a complete sweep: from the first page
// (or, for a cursor-paged route, from the page after the last one
// committed) to the last, each page (or group of pages during a bulk
// load) committed in one transaction with the checkpoint. When the sweep
// completes, the rows it did not see are marked deleted.
func (l *List) sweepRun(ctx context.Context, r *Run) error {
	cp, err := db.LoadCheckpoint(ctx, r.conn, r.scope.Key)
	if err != nil {
		return err
	}
	var lg *ledger
	if l.follows() {
		if lg, err = loadLedger(ctx, r.conn, r.scope.Key); err != nil {
			return err
		}
	}
	first := firstLoad(cp)
	if first {
		r.result.firstLoad = true
		r.log = r.log.With("first_load", true)
		r.Note("first load: the login had no complete sweep of the list yet")
	}
	r.result.read.total = cp.LastSweepRows
	// Only a cursor says where a sweep stopped; any other paging starts
	// over, and the unfinished sweep marks nothing.
	if cp.SweepID != 0 && l.resumable() {
		r.log.Info("resuming sweep", "sweep_id", cp.SweepID, "pages_done", cp.Pages, "rows_done", cp.Rows)
	} else {
		if first {
			r.log.Info("first load: reading the whole list")
		}
		if cp, err = l.startSweep(ctx, r, cp, lg); err != nil {
			return err
		}
	}
	for restarted := false; ; restarted = true {
		r.result.sweepID = cp.SweepID
		s, err := l.newSweep(ctx, r, cp, lg)
		if err != nil {
			return err
		}
		_, err = l.walk(ctx, r, s)
		var refused *erp.CursorRefusedError
		if !errors.As(err, &refused) || restarted {
			return err
		}
		// A cursor the ERP no longer accepts (expired, or the ERP was
		// upgraded) cannot be repaired: start over once, and record it.
		cp = s.state.cp
		r.log.Warn("saved cursor refused; starting a new sweep", "sweep_id", cp.SweepID, "pages_done", cp.Pages, "err", refused.Err)
		r.Note("sweep %d: the ERP refused the saved cursor after page %d (%v); started a new sweep", cp.SweepID, cp.Pages, refused.Err)
		if cp, err = l.startSweep(ctx, r, cp, lg); err != nil {
			return err
		}
	}
}

// followRun runs one follow run of the list through the run's login: a
// follow if the list may be followed and continuity is proved, else a
// complete sweep under the sweep's lock too, with the reason recorded.
func (l *List) followRun(ctx context.Context, r *Run) error {
	lg, cp, order, why, err := l.order(ctx, r)
	if err != nil {
		return err
	}
	if why == "" {
		if why, err = l.follow(ctx, r, lg, cp, order); err != nil {
			return err
		}
	}
	if why != "" {
		if !firstLoad(cp) { // a first load says so itself
			r.Note("follow run swept the whole list: %s", why)
			r.log.Info("follow run sweeps the whole list", "why", why)
		}
		r.result.swept = why
		busy, err := r.withSweepLock(ctx, func() error { return l.sweepRun(ctx, r) })
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
	r.result.followedAt, err = lg.followEnded(ctx, r.conn, why)
	return err
}

// order is what the login's ledger and sweep checkpoint say of the list's
// order: the order it may be read in (followed, or its window re-read),
// or why it may not be now.
func (l *List) order(ctx context.Context, r *Run) (*ledger, db.Checkpoint, model.Order, string, error) {
	lg, err := loadLedger(ctx, r.conn, r.scope.Key)
	if err != nil {
		return nil, db.Checkpoint{}, "", "", err
	}
	cp, err := db.LoadCheckpoint(ctx, r.conn, r.scope.Key)
	if err != nil {
		return nil, db.Checkpoint{}, "", "", err
	}
	order, why := lg.followOrder(cp)
	return lg, cp, order, why, nil
}

// firstLoad: the login has no complete sweep of the list yet, so a run
// reads it whole, whatever its kind.
func firstLoad(cp db.Checkpoint) bool { return cp.LastCompleted.IsZero() }

// windowRun re-reads the newest pages of the list through the run's
// login (see window.go): from its first page for a list in descending
// order; for one in ascending order from the anchor as many pages before
// its newest end as the window is large, or an older one when that start
// is not proved, or from the first page when the ledger keeps too few. A
// list whose order is not known yet has no window: the run reads nothing
// and says why it waits.
func (l *List) windowRun(ctx context.Context, r *Run) error {
	lg, _, order, why, err := l.order(ctx, r)
	if err != nil {
		return err
	}
	if why != "" {
		r.result.waited = why
		r.Note("window run waits: %s", why)
		r.log.Info("window run waits", "why", why)
		return nil
	}
	seen, err := db.ChangesByPosition(ctx, r.conn, r.scope.Key, time.Now().Add(-learnWindow))
	if err != nil {
		return err
	}
	size, sizeWhy := windowSize(r.target.WindowPages[r.scope.Stream], seen)
	was, err := db.LoadWindow(ctx, r.conn, r.scope.Key)
	if err != nil {
		return err
	}
	read, err := db.StartWindow(ctx, r.conn, r.scope.Key, was)
	if err != nil {
		return err
	}
	r.result.sweepID = read.ID
	starts := []db.Anchor{{}}
	if order == model.OrderAscending && len(lg.kept.Anchors) >= size {
		// The anchors a page older each, then the first page.
		starts = append(slices.Clone(lg.kept.Anchors[size-1:]), db.Anchor{})
	}
	for _, at := range starts {
		w := &window{run: r, list: l, order: order, size: size, why: sizeWhy, at: at, high: lg.kept.MaxKey, read: read, first: true}
		v, err := l.walk(ctx, r, w)
		switch refused := anchorRefused(err); {
		case refused != "":
			why = refused
		case err != nil:
			return err
		case v.why == "":
			return nil
		case !v.elsewhere || w.state.pages > 0:
			// A list out of order is not judged: the next complete sweep
			// says what its order is.
			r.Warn("window run read %d pages and judged none: %s", w.state.pages, v.why)
			return nil
		default:
			why = v.why
		}
		r.log.Debug("window: start not proved; trying an older anchor", "why", why)
	}
	r.Warn("window run found no start it could prove (%s); the next complete sweep reads the list", why)
	return nil
}

// withSweepLock runs sweep holding the stream's sweep lock as well (a
// follow run that must sweep); busy when another session holds it, and
// then sweep does not run.
func (r *Run) withSweepLock(ctx context.Context, sweep func() error) (busy bool, err error) {
	release, err := db.LockStream(ctx, r.conn, r.scope.Source, r.scope.Stream, model.KindSweep)
	if err != nil || release == nil {
		return release == nil && err == nil, err
	}
	defer release()
	if n, err := db.CloseAbandonedRuns(ctx, r.conn, r.scope.Source, r.scope.Stream, model.KindSweep); err != nil {
		return false, err
	} else if n > 0 {
		r.log.Warn("closed runs left running by a process that died", "runs", n)
	}
	return false, sweep()
}
