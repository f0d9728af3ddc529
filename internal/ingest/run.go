package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// Run is one run of one stream for one source: what a Stream's Sync gets.
// It holds the stream's lock for its whole life and writes on the lock's
// connection, so a run whose connection is lost can write nothing more.
type Run struct {
	runner   *Runner
	target   Target
	name     string
	conn     *pgx.Conn
	runID    int64
	log      *slog.Logger
	progress func(model.RunStats)
	stop     <-chan struct{}

	scope   model.Scope
	sweepID int64
	stats   model.RunStats
	notes   []string
	freshAt time.Time
	rejects []db.Rejected // reported since the last commit
}

// Client is the ERP client of the run's source.
func (r *Run) Client() *erp.Client { return r.target.Client }

// Scope is the source, company and branch every row of the run carries.
func (r *Run) Scope() model.Scope { return r.scope }

// PageSize is the number of records to ask for per page.
func (r *Run) PageSize() int { return r.target.PageSize }

// Log is the run's logger (source and stream attached).
func (r *Run) Log() *slog.Logger { return r.log }

// DB reads the warehouse on the run's connection, between commits.
func (r *Run) DB() db.Querier { return r.conn }

// Note records something handled but worth knowing in the run's
// erp.sync_runs.note.
func (r *Run) Note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// Reject reports a record that cannot be used. It is stored, with its
// reason and raw bytes, by the run's next commit, and counted as
// rejected; the rest of the stream carries on.
func (r *Run) Reject(rec db.Rejected) { r.rejects = append(r.rejects, rec) }

// Stopped returns a non-nil error once a stop was asked for: a stream
// that commits several times returns it between commits.
func (r *Run) Stopped() error {
	select {
	case <-r.stop:
		return errStopped
	default:
		return nil
	}
}

// Commit writes in one transaction what write writes, then the epilogue
// every write shares: the records rejected since the last commit, the
// run's counters and its progress. write returns what it did.
func (r *Run) Commit(ctx context.Context, write func(ctx context.Context, tx pgx.Tx) (model.RunStats, error)) error {
	return r.commit(ctx, &epilogue{}, write)
}

// execute runs the stream. A panic in it (a bug in one stream) becomes a
// failed run with the stack in the log, not a dead daemon.
func (r *Run) execute(ctx context.Context, s Stream) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = r.panicked(p)
		}
	}()
	id, err := r.target.Client.Identity(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", r.name, err)
	}
	r.scope = model.Scope{Source: r.target.Source, CompanyID: id.CompanyID, BranchID: id.BranchID}
	if err := s.Sync(ctx, r); err != nil {
		return err
	}
	if r.freshAt.IsZero() { // a stream without sweeps read all it had to
		r.freshAt, err = db.MarkComplete(ctx, r.conn, r.target.Source, r.name)
	}
	return err
}

func (r *Run) panicked(p any) error {
	r.log.Error("panic in stream", "panic", p, "stack", string(debug.Stack()))
	return fmt.Errorf("%s: panic: %v", r.name, p)
}

// epilogue is what a transaction writes after its rows. Outside sweeps it
// is empty; in a sweep it carries the pages the transaction writes.
type epilogue struct {
	sweep *db.Checkpoint // the sweep the pages belong to; nil outside sweeps
	table *db.Table      // the sweep's table (deletion marks)
	pages []*batch       // the pages written, in order
}

// commit is the one transaction shape of every write: begin, write, the
// epilogue, commit; then the run's counters. The checkpoint in e.sweep is
// updated only once the commit succeeded.
func (r *Run) commit(ctx context.Context, e *epilogue, write func(ctx context.Context, tx pgx.Tx) (model.RunStats, error)) error {
	tx, err := r.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", db.Describe(err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	st, err := write(ctx, tx)
	if err != nil {
		return err
	}
	rejected := r.rejects
	var drift []db.Drift
	for _, b := range e.pages {
		st.Pages++
		st.Seen += int64(b.received)
		rejected = append(rejected, b.rejected...)
		drift = append(drift, b.drift...)
	}
	var next db.Checkpoint
	var freshAt time.Time
	if e.sweep != nil {
		if next, freshAt, st.Deleted, err = r.endPages(ctx, tx, e); err != nil {
			return err
		}
	}
	if err := db.InsertRejected(ctx, tx, r.target.Source, r.name, r.runID, rejected); err != nil {
		return err
	}
	if err := db.RecordDrift(ctx, tx, r.target.Source, r.name, mergeDrift(drift)); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", db.Describe(err))
	}
	if e.sweep != nil {
		*e.sweep = next
	}
	if !freshAt.IsZero() {
		r.freshAt = freshAt
	}
	r.rejects = nil
	st.Rejected += int64(len(rejected))
	r.stats.Add(st)
	r.runner.obs().PageCommitted(r.target.Source, r.name, st)
	if r.progress != nil {
		r.progress(r.stats)
	}
	if len(rejected) > 0 {
		r.log.Warn("records rejected", "count", len(rejected), "first_reason", rejected[0].Reason)
	}
	return nil
}

// endPages advances the sweep's checkpoint past e's pages and, when the
// last of them ends the sweep, marks the rows it did not see deleted and
// completes it.
func (r *Run) endPages(ctx context.Context, tx pgx.Tx, e *epilogue) (next db.Checkpoint, freshAt time.Time, deleted int64, err error) {
	next = *e.sweep
	var rows int64
	for _, b := range e.pages {
		rows += int64(len(b.rows))
	}
	end := e.pages[len(e.pages)-1]
	if err = db.AdvanceCheckpoint(ctx, tx, &next, end.cursor, int64(len(e.pages)), rows); err != nil {
		return next, freshAt, 0, err
	}
	if !end.last {
		return next, freshAt, 0, nil
	}
	if deleted, err = r.markDeletions(ctx, tx, e.table, next); err != nil {
		return next, freshAt, 0, err
	}
	freshAt, err = db.CompleteSweep(ctx, tx, next)
	return next, freshAt, deleted, err
}

// markDeletions marks the rows of the run's scope that the completed
// sweep did not see, unless it cannot be sure it saw them all.
func (r *Run) markDeletions(ctx context.Context, tx pgx.Tx, table *db.Table, cp db.Checkpoint) (int64, error) {
	// A bulk load began on a table without rows of the source, so every
	// row there now was written by this sweep: nothing to mark.
	if cp.BulkLoad {
		return 0, nil
	}
	intact, err := db.SeenIntact(ctx, tx, cp)
	if err != nil {
		return 0, err
	}
	if !intact {
		// Postgres restarted during the sweep and emptied the UNLOGGED
		// seen-list: skipping is safe, guessing is not.
		r.log.Warn("sweep's seen-list was lost in a database restart; not marking deletions this time", "sweep_id", cp.SweepID)
		r.Note("sweep %d: deletions not marked (seen-list lost in a database restart)", cp.SweepID)
		return 0, nil
	}
	return table.MarkDeleted(ctx, tx, db.Scope{Scope: r.scope, SweepID: cp.SweepID})
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
