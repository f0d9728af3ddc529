package sync

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// A unit is what one transaction of a run writes: the pages of a walk
// (one page, or a group of pages during a bulk load), or one step of a
// stream of its own. Run.commit writes every unit the same way.
type unit interface {
	// write writes the unit's rows in tx and says what it wrote and what
	// its transaction records besides.
	write(ctx context.Context, tx db.Tx) (written, error)
}

// written is what a unit wrote, and what its transaction records besides.
type written struct {
	stats    model.RunStats
	rejected []db.Rejected
	drift    []db.Drift
	// statements are the unit's own bookkeeping (nil: none), sent with
	// the run's in one round trip.
	statements *pgx.Batch
	// replayable: should Postgres crash before the transaction reaches
	// the disk, reading its pages again is all it costs.
	replayable bool
	// end, when set, runs after the bookkeeping in the same transaction:
	// the end of a complete read. adopt is told, once the transaction
	// committed, what end did.
	end   func(ctx context.Context, tx db.Tx) (ended, error)
	adopt func(ctx context.Context, e ended)
	// first and through are the numbers of the pages written (0: none),
	// for the commit's span.
	first, through int64
}

// commit is the one transaction shape of every write: begin, the unit's
// rows, the bookkeeping (the unit's statements, then the rejected records
// and drift, in one round trip), the end of a complete read, commit; then
// the unit's next state, the run's counters, metrics and progress.
func (r *Run) commit(ctx context.Context, u unit) (err error) {
	ctx, span := r.startCommitSpan(ctx)
	var w written
	defer func() { span.end(r, w, err) }()
	tx, err := r.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", db.Describe(err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if w, err = u.write(ctx, db.InTx(tx)); err != nil {
		return err
	}
	rejected := append(r.rejects, w.rejected...)
	drift := mergeDrift(append(w.drift, r.drift...))
	if r.target.DriftStop[r.scope.Stream] {
		if err := driftStops(r.scope.Stream, drift); err != nil {
			return err
		}
	}
	statements := w.statements
	if statements == nil {
		statements = &pgx.Batch{}
	}
	// When the pages changed nothing, the transaction holds only where the
	// walk stands, its seen-list (which a Postgres crash empties anyway),
	// page digests (likewise) and drift counts. Its commit need not wait
	// for the disk: should Postgres itself crash before the WAL writer
	// flushes (a fraction of a second), the walk re-reads those unchanged
	// pages; an erpsync crash loses nothing. The unchanged re-sync, the
	// daemon's every-few-minutes job, no longer waits on a flush per page.
	noFlush := w.replayable && w.stats.Inserted+w.stats.Updated == 0 && len(rejected) == 0
	if err := db.SendBookkeeping(ctx, db.InTx(tx), statements, db.Bookkeeping{Key: r.scope.Key, Run: r.runID,
		Rejected: rejected, Drift: drift, NoFlush: noFlush}); err != nil {
		return err
	}
	var e ended
	if w.end != nil {
		if e, err = w.end(ctx, db.InTx(tx)); err != nil {
			return err
		}
		w.stats.Deleted += e.deleted
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", db.Describe(err))
	}
	if w.adopt != nil {
		w.adopt(ctx, e)
	}
	r.rejects, r.drift = nil, nil
	w.stats.Rejected += int64(len(rejected))
	r.result.stats.Add(w.stats)
	r.result.drift = mergeDrift(append(r.result.drift, drift...))
	r.runner.obs().PageCommitted(r.target.Source, r.scope.Stream, w.stats)
	for _, d := range drift {
		r.runner.obs().DriftCounted(r.target.Source, r.scope.Stream, d.Field, d.Change, d.Count)
	}
	if r.progress != nil {
		r.progress(Progress{RunStats: r.result.stats, Done: r.result.read.done, Total: r.result.read.total, FirstLoad: r.result.firstLoad})
	}
	if len(rejected) > 0 {
		r.log.Warn("records rejected", "count", len(rejected), "first_reason", rejected[0].Reason)
	}
	return nil
}

// DriftStopError is a run stopped by its stream's drift policy (drift:
// stop): a value a typed column cannot read, in the page or step about to
// be written, which was not.
type DriftStopError struct {
	Stream, Field, Why, Example string
}

func (e *DriftStopError) Error() string {
	return fmt.Sprintf("%s: drift: stop: field %s cannot be read (%s), e.g. %s; nothing of this page was written (drift: record writes NULL and records the drift)",
		e.Stream, e.Field, e.Why, e.Example)
}

// driftStops is the drift policy stop: a typed column that cannot be read
// (a lenient column's value in another shape, or absent) stops the run.
func driftStops(stream string, drift []db.Drift) error {
	for _, d := range drift {
		if d.Change == driftUnusable {
			return &DriftStopError{Stream: stream, Field: d.Field, Why: d.Detail, Example: d.Example}
		}
	}
	return nil
}

// mergeDrift adds up the drift of several pages: one upsert statement
// must not name the same row twice.
func mergeDrift(drift []db.Drift) []db.Drift {
	if len(drift) < 2 {
		return drift
	}
	at := map[[3]string]int{}
	var out []db.Drift
	for _, d := range drift {
		k := [3]string{d.Field, d.Change, d.Detail}
		if i, ok := at[k]; ok {
			out[i].Count += d.Count
			continue
		}
		at[k] = len(out)
		out = append(out, d)
	}
	return out
}
