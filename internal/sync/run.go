package sync

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// Run is one run of one stream through one login of a source: the handle
// a stream's steps get. It reads the ERP through its View, whose scope
// names the run's key (source, stream, login). It holds the stream's lock
// for its whole life and writes on the lock's connection, so a run whose
// connection is lost can write nothing more.
type Run struct {
	*View
	runner   *Runner
	kind     model.RunKind
	info     Info
	conn     *pgx.Conn
	runID    int64
	log      *slog.Logger
	progress func(model.RunStats)

	// What the run did, for its result and erp.sync_runs.
	sweepID    int64     // the sweep it walked, if any
	followedAt time.Time // when a follow run had read everything new
	swept      string    // why a follow run swept instead
	stats      model.RunStats
	notes      []string
	warns      []string // what status shows until the next successful run
	freshAt    time.Time
	held       int64         // rows the deletion guard held
	rejects    []db.Rejected // reported since the last commit
	drift      []db.Drift    // reported since the last commit
}

// Setting is the value of one of the stream's own settings (Info.Settings)
// for the source: configured, else its default.
func (r *Run) Setting(key string) string {
	if v, ok := r.target.Settings[r.scope.Stream][key]; ok {
		return v
	}
	for _, s := range r.info.Settings {
		if s.Key == key {
			return s.Default
		}
	}
	return ""
}

// Int is the value of one of the stream's own whole-number settings
// (IntSetting), checked again.
func (r *Run) Int(key string) (int, error) {
	for _, s := range r.info.Settings {
		if s.Key == key && s.Check != nil {
			if err := s.Check(r.Setting(key)); err != nil {
				return 0, fmt.Errorf("%s: setting %s: %w", r.scope.Stream, key, err)
			}
		}
	}
	n, err := strconv.Atoi(r.Setting(key))
	if err != nil {
		return 0, fmt.Errorf("%s: setting %s: %q is not a whole number", r.scope.Stream, key, r.Setting(key))
	}
	return n, nil
}

// AfterReset reports whether the stream was reset for the run's login
// (erpsync reset) since its data were last complete: a stream of its own
// that reads less than everything on later runs reads everything again.
func (r *Run) AfterReset(ctx context.Context) (bool, error) {
	return db.ResetSince(ctx, r.conn, r.scope.Key)
}

// Path is p with a leading {name} replaced by the source's prefix of that
// name; an unknown name is left as it is, to fail visibly.
func (t Target) Path(p string) string {
	if !strings.HasPrefix(p, "{") {
		return p
	}
	name, rest, ok := strings.Cut(p[1:], "}")
	if prefix, known := t.Prefixes[name]; ok && known {
		return strings.TrimSuffix(prefix, "/") + rest
	}
	return p
}

// Log is the run's logger (source and stream attached).
func (r *Run) Log() *slog.Logger { return r.log }

// Read reads the warehouse on the run's connection, between steps, in a
// read-only transaction: a stream writes only in its steps.
func (r *Run) Read(ctx context.Context, read func(ctx context.Context, q db.Reader) error) error {
	tx, err := r.conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin: %w", db.Describe(err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := read(ctx, tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Note records something handled but worth knowing in the run's
// erp.sync_runs.note.
func (r *Run) Note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// Warn records what an operator should look at: in the run's note, and,
// once the run succeeded, as the stream's warning in erpsync status
// (cleared by the next run that does not warn).
func (r *Run) Warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.warns = append(r.warns, msg)
	r.notes = append(r.notes, msg)
	r.log.Warn(msg)
}

// Reject reports a record that cannot be used. It is stored, with its
// reason and raw bytes, by the run's next commit, and counted as
// rejected; the rest of the stream carries on.
func (r *Run) Reject(rec db.Rejected) { r.rejects = append(r.rejects, rec) }

// Drift reports differences between what the stream expects of a record
// and what came (see Expect); they are added to erp.schema_drift by the
// run's next commit.
func (r *Run) Drift(d ...db.Drift) { r.drift = append(r.drift, d...) }

// Upsert writes rows of a stream's table (made by Table.Row) in a step's
// transaction, as a list writes its pages: new and changed rows only,
// labels as the records carry them (the table's trigger keeps the
// versions they replace). It returns what it did, for the step's
// counters.
func (r *Run) Upsert(ctx context.Context, tx pgx.Tx, t *Table, rows []db.Row) (model.RunStats, error) {
	rows = KeepLast(rows, func(row db.Row) string { return row.ID }, nil)
	up, err := t.db.Upsert(ctx, tx, r.scope, rows, db.UpsertOptions{})
	return model.RunStats{Pages: 1, Seen: int64(len(rows)), Inserted: up.Inserted, Updated: up.Updated, Unchanged: up.Unchanged}, err
}

// execute runs the stream. A panic in it (a bug in one stream) becomes a
// failed run with the stack in the log, not a dead daemon.
func (r *Run) execute(ctx context.Context, s Stream) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = r.panicked(p)
		}
	}()
	id, err := r.login.Client.Identity(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", r.scope.Stream, err)
	}
	r.scope.CompanyID, r.scope.BranchID = id.CompanyID, id.BranchID
	if err := db.RecordLogin(ctx, r.conn, r.scope); err != nil {
		return err
	}
	switch s := s.(type) {
	case *List:
		if r.kind == model.KindFollow {
			err = s.followList(ctx, r)
		} else {
			err = s.sweepList(ctx, r)
		}
	case Stepper:
		err = r.runSteps(ctx, s)
	default:
		err = fmt.Errorf("%s: a stream is a *sync.List or a sync.Stepper, not %T", r.scope.Stream, s)
	}
	if err != nil {
		return err
	}
	if r.freshAt.IsZero() && r.kind == model.KindSweep { // a stream without sweeps read all it had to
		r.freshAt, err = db.MarkComplete(ctx, r.conn, r.scope.Key)
	}
	return err
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

// analyze refreshes the planner's statistics of a table a bulk load has
// just filled: until they are there, the next sweeps' lookups by id are
// planned for an empty table and read all of it, page after page (and
// autovacuum, which would take them eventually, may be off). A role that
// may not analyze (not the owner) gets a warning from Postgres, not an
// error; autovacuum is then the only way.
func (r *Run) analyze(ctx context.Context, t *db.Table, loaded int64) {
	if err := t.Analyze(ctx, r.conn, loaded); err != nil {
		r.log.Warn("could not refresh the table's statistics after the bulk load", "err", err)
	}
}

func (r *Run) panicked(p any) error {
	r.log.Error("panic in stream", "panic", p, "stack", string(debug.Stack()))
	return fmt.Errorf("%s: panic: %v", r.scope.Stream, p)
}

// commit is the one transaction shape of every write: begin, write, the
// bookkeeping, commit; then the run's counters. The bookkeeping's
// statements (the walk's own, given by its policy, then the rejected
// records and drift) go to Postgres in one round trip. bk is what a
// walk's transaction writes; nil (and p nil) for a step.
func (r *Run) commit(ctx context.Context, p policy, bk *book, write func(ctx context.Context, tx pgx.Tx) (model.RunStats, error)) (err error) {
	ctx, span := r.startCommitSpan(ctx)
	defer func() { span.end(r, bk, err) }()
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
	statements := &pgx.Batch{}
	last := false
	if bk != nil {
		for _, page := range bk.pages {
			st.Pages++
			st.Seen += int64(page.received)
			rejected = append(rejected, page.rejected...)
			drift = append(drift, page.drift...)
		}
		last = p.queue(statements, bk)
	}
	drift = mergeDrift(append(drift, r.drift...))
	if r.target.DriftStop[r.scope.Stream] {
		if err := driftStops(r.scope.Stream, drift); err != nil {
			return err
		}
	}
	// When the pages changed nothing, the transaction holds only where the
	// walk stands, its seen-list (which a Postgres crash empties anyway),
	// page digests (likewise) and drift counts. Its commit need not wait
	// for the disk: should Postgres itself crash before the WAL writer
	// flushes (a fraction of a second), the walk re-reads those unchanged
	// pages; an erpsync crash loses nothing. The unchanged re-sync, the
	// daemon's every-few-minutes job, no longer waits on a flush per page.
	noFlush := bk != nil && !last && st.Inserted+st.Updated == 0 && len(rejected) == 0
	if err := db.SendBookkeeping(ctx, tx, statements, db.Bookkeeping{Key: r.scope.Key, Run: r.runID,
		Rejected: rejected, Drift: drift, NoFlush: noFlush}); err != nil {
		return err
	}
	var freshAt time.Time
	if last {
		if freshAt, st.Deleted, err = p.end(ctx, tx, bk); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", db.Describe(err))
	}
	if bk != nil {
		p.committed(ctx, freshAt)
	}
	if !freshAt.IsZero() {
		r.freshAt = freshAt
	}
	r.rejects, r.drift = nil, nil
	st.Rejected += int64(len(rejected))
	r.stats.Add(st)
	r.runner.obs().PageCommitted(r.target.Source, r.scope.Stream, st)
	for _, d := range drift {
		r.runner.obs().DriftCounted(r.target.Source, r.scope.Stream, d.Field, d.Change, d.Count)
	}
	if r.progress != nil {
		r.progress(r.stats)
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
