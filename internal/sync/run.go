package sync

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
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
	login    Login
	key      db.StreamKey // source, stream, login
	info     Info
	conn     *pgx.Conn
	runID    int64
	log      *slog.Logger
	progress func(model.RunStats)
	stop     <-chan struct{}

	scope   model.Scope
	sweepID int64
	stats   model.RunStats
	notes   []string
	warns   []string // what status shows until the next successful run
	freshAt time.Time
	held    int64         // rows the deletion guard held
	rejects []db.Rejected // reported since the last commit
	drift   []db.Drift    // reported since the last commit

	// written are the ids the sweep wrote so far; a known page holding one
	// of them is not skipped (see committer.page). Past maxWritten ids,
	// no page is skipped for the rest of the sweep.
	written  map[string]struct{}
	skipOff  bool
	fellBack bool // a bulk load met a row it had written already
	lists    listScope
}

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

func (l *listScope) observe(b *preparedPage, othersListed int64) {
	l.companyWide = l.companyWide || b.otherBranch > 0 || othersListed > 0
	l.labelled += b.labelled
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

// Client is the ERP client of the run's login.
func (r *Run) Client() *erp.Client { return r.login.Client }

// Scope is the run's source and login, with the company and branch
// context of the login: the labels of a row whose record carries none.
func (r *Run) Scope() model.Scope { return r.scope }

// Setting is the value of one of the stream's own settings (Info.Settings)
// for the source: configured, else its default.
func (r *Run) Setting(key string) string {
	if v, ok := r.target.Settings[r.key.Stream][key]; ok {
		return v
	}
	for _, s := range r.info.Settings {
		if s.Key == key {
			return s.Default
		}
	}
	return ""
}

// PageSize is the number of records to ask for per page.
func (r *Run) PageSize() int { return r.target.PageSize }

// Path is p with a leading {name} replaced by the source's prefix of that
// name (see Target.Prefixes).
func (r *Run) Path(p string) string { return r.target.Path(p) }

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

// Read reads the warehouse on the run's connection, between commits, in
// a read-only transaction: a stream writes only through Commit.
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

// Commit writes in one transaction what write writes, then the bookkeeping
// every write shares: the records rejected since the last commit, the
// run's counters and its progress. write returns what it did.
func (r *Run) Commit(ctx context.Context, write func(ctx context.Context, tx pgx.Tx) (model.RunStats, error)) error {
	return r.commit(ctx, &bookkeeping{}, write)
}

// Upsert writes rows of a stream's table (made by Table.Row) in a
// commit, as a list writes its pages: new and changed rows only, labels
// as the records carry them (the table's trigger keeps the versions they
// replace). It returns what it did, for the commit's counters.
func (r *Run) Upsert(ctx context.Context, tx pgx.Tx, t *Table, rows []db.Row) (model.RunStats, error) {
	rows = KeepLast(rows, func(row db.Row) string { return row.ID }, nil)
	up, err := t.db.Upsert(ctx, tx, db.SweepScope{Scope: r.scope}, rows, db.UpsertOptions{})
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
		return fmt.Errorf("%s: %w", r.key.Stream, err)
	}
	r.scope = model.Scope{Source: r.target.Source, Login: r.login.Name, CompanyID: id.CompanyID, BranchID: id.BranchID}
	if err := db.RecordLogin(ctx, r.conn, r.scope); err != nil {
		return err
	}
	if err := s.Sync(ctx, r); err != nil {
		return err
	}
	if r.freshAt.IsZero() { // a stream without sweeps read all it had to
		r.freshAt, err = db.MarkComplete(ctx, r.conn, r.key)
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
	return fmt.Errorf("%s: panic: %v", r.key.Stream, p)
}

// bookkeeping is what a transaction writes after its rows. Outside sweeps it
// is empty; in a sweep it carries the pages the transaction writes.
type bookkeeping struct {
	sweep *db.Checkpoint  // the sweep the pages belong to; nil outside sweeps
	table *db.Table       // the sweep's table (deletion marks)
	pages []*preparedPage // the pages written, in order
	seen  []string        // ids of pages not written (known), for the seen-list
}

// commit is the one transaction shape of every write: begin, write, the
// bookkeeping, commit; then the run's counters. The bookkeeping's
// statements (seen ids, checkpoint, page digests, rejected records, drift)
// go to Postgres in one round trip. The checkpoint in e.sweep is updated only
// once the commit succeeded.
func (r *Run) commit(ctx context.Context, e *bookkeeping, write func(ctx context.Context, tx pgx.Tx) (model.RunStats, error)) (err error) {
	ctx, span := r.startCommitSpan(ctx)
	defer func() { span.end(r, e, err) }()
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
	statements := &pgx.Batch{}
	var next db.Checkpoint // the sweep's checkpoint once the statements ran
	last := false
	if e.sweep != nil {
		next = *e.sweep
		last = r.queuePages(statements, e, &next)
	}
	db.QueueInsertRejected(statements, r.target.Source, r.key.Stream, r.runID, rejected)
	db.QueueRecordDrift(statements, r.target.Source, r.key.Stream, mergeDrift(append(drift, r.drift...)))
	if e.sweep != nil && !last && st.Inserted+st.Updated == 0 && len(rejected) == 0 {
		// The pages changed nothing: the transaction holds only where the
		// sweep stands, its seen-list (which a Postgres crash empties
		// anyway), page digests (likewise) and drift counts. Its commit
		// need not wait for the disk: should Postgres itself crash before
		// the WAL writer flushes (a fraction of a second), the sweep
		// re-reads those unchanged pages; an erpsync crash loses nothing.
		// The unchanged re-sync, the daemon's every-few-minutes job, no
		// longer waits on a flush per page.
		db.QueueNoFlush(statements)
	}
	if err := db.SendBatch(ctx, tx, statements, "recording the pages"); err != nil {
		return err
	}
	var freshAt time.Time
	if last {
		if freshAt, st.Deleted, err = r.endSweep(ctx, tx, e, next); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", db.Describe(err))
	}
	bulkLoaded := last && e.sweep.BulkLoad
	if e.sweep != nil {
		*e.sweep = next
	}
	if !freshAt.IsZero() {
		r.freshAt = freshAt
		if bulkLoaded {
			r.analyze(ctx, e.table, next.Rows)
		}
	}
	r.rejects, r.drift = nil, nil
	st.Rejected += int64(len(rejected))
	r.stats.Add(st)
	r.runner.obs().PageCommitted(r.target.Source, r.key.Stream, st)
	if r.progress != nil {
		r.progress(r.stats)
	}
	if len(rejected) > 0 {
		r.log.Warn("records rejected", "count", len(rejected), "first_reason", rejected[0].Reason)
	}
	return nil
}

// queuePages queues the sweep's bookkeeping of e's pages: the ids seen of
// pages not written, the checkpoint past them (next moves on when the
// statements run), and what their requests were answered with. It returns
// whether the pages end the sweep.
func (r *Run) queuePages(statements *pgx.Batch, e *bookkeeping, next *db.Checkpoint) bool {
	if len(e.seen) > 0 {
		db.QueueMarkSeen(statements, next.SweepID, e.seen)
	}
	var rows int64
	var digests []db.PageDigest
	for _, b := range e.pages {
		rows += int64(len(b.rows))
		if b.digest != nil {
			digests = append(digests, *b.digest)
		}
	}
	end := e.pages[len(e.pages)-1]
	db.QueueAdvanceCheckpoint(statements, next, end.cursor, int64(len(e.pages)), rows)
	db.QueueRecordPageDigests(statements, next.Key, next.SweepID, digests)
	return end.last
}

// endSweep closes a sweep in the transaction of its last page: it marks
// the rows the sweep did not see deleted (unless it cannot be sure it saw
// them all) and completes it, returning when.
func (r *Run) endSweep(ctx context.Context, tx pgx.Tx, e *bookkeeping, cp db.Checkpoint) (freshAt time.Time, deleted int64, err error) {
	// The pages of this sweep are known to the next only if no id came
	// twice in it: a row listed on two pages ends as the later copy, so
	// the earlier page would not be as the warehouse has it.
	keep := cp.SweepID
	if twice, err := r.listedTwice(ctx, tx, cp); err != nil {
		return freshAt, 0, err
	} else if twice {
		keep = 0
	}
	if err = db.ForgetPageDigests(ctx, tx, cp.Key, keep); err != nil {
		return freshAt, 0, err
	}
	if deleted, err = r.markDeletions(ctx, tx, e.table, cp, e.pages[len(e.pages)-1]); err != nil {
		return freshAt, 0, err
	}
	if err = db.SetListScope(ctx, tx, cp.Key, r.lists.scope()); err != nil {
		return freshAt, 0, err
	}
	freshAt, err = db.CompleteSweep(ctx, tx, cp)
	return freshAt, deleted, err
}

// listedTwice reports whether some id was on two pages of the sweep.
func (r *Run) listedTwice(ctx context.Context, tx pgx.Tx, cp db.Checkpoint) (bool, error) {
	if cp.BulkLoad { // no seen-list: a second copy made the COPY fall back
		return r.fellBack, nil
	}
	distinct, err := db.SeenDistinct(ctx, tx, cp.SweepID)
	return distinct < cp.Rows, err
}

// maxWritten bounds the ids a sweep remembers as written.
const maxWritten = 100_000

// wrote remembers ids the sweep wrote.
func (r *Run) wrote(ids []string) {
	if r.skipOff || len(ids) == 0 {
		return
	}
	if r.written == nil {
		r.written = map[string]struct{}{}
	}
	for _, id := range ids {
		r.written[id] = struct{}{}
	}
	if len(r.written) > maxWritten {
		r.skipOff, r.written = true, nil
	}
}

// mayHaveWritten reports whether the sweep may have written one of rows.
func (r *Run) mayHaveWritten(rows []db.Row) bool {
	if r.skipOff {
		return true
	}
	for _, row := range rows {
		if _, ok := r.written[row.ID]; ok {
			return true
		}
	}
	return false
}

// markDeletions marks the rows of the run's scope that the completed
// sweep did not see, unless it cannot be sure it saw them all.
func (r *Run) markDeletions(ctx context.Context, tx pgx.Tx, table *db.Table, cp db.Checkpoint, end *preparedPage) (int64, error) {
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
	if end.total >= 0 {
		// The ERP said how long the list is. Pages read by offset can
		// skip a record when the list shifts between two of them: a sweep
		// that saw fewer records than stated marks nothing.
		seen, err := db.SeenDistinct(ctx, tx, cp.SweepID)
		if err != nil {
			return 0, err
		}
		if seen < end.total {
			r.log.Warn("sweep saw fewer records than the ERP said the list holds; not marking deletions", "seen", seen, "stated", end.total)
			r.Note("sweep %d: deletions not marked (the ERP stated %d records, the sweep saw %d)", cp.SweepID, end.total, seen)
			return 0, nil
		}
	}
	sc := db.SweepScope{Scope: r.scope, SweepID: cp.SweepID}
	n, _, err := table.Gone(ctx, tx, sc, false)
	if err != nil {
		return 0, err
	}
	if n > 0 && end.cut {
		// The whole list was one answer without a paging signal, exactly
		// as long as a page: the rest may never have been read.
		r.Warn("%s, so the %d rows it no longer lists were not marked deleted", cutWarning(end.received), n)
		return 0, nil
	}
	return r.MarkGone(ctx, tx, Deletions{
		Rows: n,
		Live: n + cp.Rows,
		Digest: func() ([]byte, error) {
			_, d, err := table.Gone(ctx, tx, sc, true)
			return d, err
		},
		Mark: func() (int64, error) { return table.MarkDeleted(ctx, tx, sc) },
	})
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
