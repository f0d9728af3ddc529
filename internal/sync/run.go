package sync

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"

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
	progress func(Progress)
	// result is what the run did, added up for its Result and
	// erp.sync_runs.
	result *runResult
	// rejects and drift are what the stream reported since the last
	// commit, which stores them.
	rejects []db.Rejected
	drift   []db.Drift
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
	r.result.notes = append(r.result.notes, fmt.Sprintf(format, args...))
}

// Warn records what an operator should look at: in the run's note, and,
// once the run succeeded, as the stream's warning in erpsync status
// (cleared by the next run that does not warn).
func (r *Run) Warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.result.warns = append(r.result.warns, msg)
	r.result.notes = append(r.result.notes, msg)
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
func (r *Run) Upsert(ctx context.Context, tx db.Tx, t *Table, rows []db.Row) (model.RunStats, error) {
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
		err = s.read(ctx, r)
	case Stepper:
		err = r.runSteps(ctx, s)
	default:
		err = fmt.Errorf("%s: a stream is a *sync.List or a sync.Stepper, not %T", r.scope.Stream, s)
	}
	if err != nil {
		return err
	}
	if r.result.freshAt.IsZero() && r.kind == model.KindSweep { // a stream without sweeps read all it had to
		r.result.freshAt, err = db.MarkComplete(ctx, r.conn, r.scope.Key)
	}
	return err
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
