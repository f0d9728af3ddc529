package sync

import (
	"context"
	"errors"

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
	if r.kind == model.KindFollow {
		return l.followRun(ctx, r)
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
	lg, err := loadLedger(ctx, r.conn, r.scope.Key)
	if err != nil {
		return err
	}
	cp, err := db.LoadCheckpoint(ctx, r.conn, r.scope.Key)
	if err != nil {
		return err
	}
	order, why := lg.followOrder(cp)
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

// firstLoad: the login has no complete sweep of the list yet, so a run
// reads it whole, whatever its kind.
func firstLoad(cp db.Checkpoint) bool { return cp.LastCompleted.IsZero() }

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
