package sync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// writingKinds are the kinds of run that write a stream, each under a lock
// of its own: what must not write while a stream is reset or verified
// holds all of them.
var writingKinds = []model.RunKind{model.KindSweep, model.KindFollow, model.KindWindow}

// ErrBusy means another session holds the stream's lock; nothing ran. A
// result's error wraps it with the *db.LockHeldError that names the holder.
var ErrBusy = errors.New("another session holds the stream's lock")

// errStopped ends a run between commits when a stop was asked for.
var errStopped = errors.New("stopped before the stream finished")

// Observer receives progress for metrics and terminals. Implementations
// must be safe for concurrent use.
type Observer interface {
	// PageCommitted is called after every commit with what it wrote.
	PageCommitted(source, stream string, st model.RunStats)
	// RunFinished is called once per run that took the lock.
	RunFinished(source, stream string, o model.RunOutcome)
	// FollowMissed is called when a complete sweep found records that
	// follow runs had missed (see sweep.queue).
	FollowMissed(source, stream, login string, n int64)
	// DriftCounted is called after a commit for each kind of drift it
	// stored: n records differed so in field.
	DriftCounted(source, stream, field, change string, n int64)
}

type nopObserver struct{}

func (nopObserver) PageCommitted(string, string, model.RunStats)       {}
func (nopObserver) RunFinished(string, string, model.RunOutcome)       {}
func (nopObserver) FollowMissed(string, string, string, int64)         {}
func (nopObserver) DriftCounted(string, string, string, string, int64) {}

// Runner runs streams against the warehouse.
type Runner struct {
	// Pool has a connection per run allowed at once (db.Pools.Runs).
	Pool *pgxpool.Pool
	// Service records a run's outcome when its own connection was lost
	// (db.Pools.Service); nil uses Pool.
	Service *pgxpool.Pool
	Log     *slog.Logger
	Obs     Observer
	// Prefetch is how many pages are fetched ahead of the page being
	// written. 0 fetches strictly after each commit, so a crash re-fetches
	// at most one page; 1 overlaps the next fetch with the current write.
	Prefetch int
	// ConfirmDeletions lets the runs mark deleted what the deletion guard
	// would hold: an operator's confirmation that the rows are gone.
	ConfirmDeletions bool
	// ProgressEvery is how often a long run logs its progress at INFO
	// (0: never; see ProgressEvery).
	ProgressEvery time.Duration
}

// Target is a source as its runs see it.
type Target struct {
	Source string
	// Logins read the source, each in the company and branch context its
	// token carries. A run of a stream reads through each in turn.
	Logins   []Login
	PageSize int
	// Prefixes are the installation's own path prefixes, by name: a
	// stream's path that starts with {name} is read under that prefix
	// (the messaging channel's differs between installations).
	Prefixes map[string]string
	// Settings are the streams' own settings (Info.Settings), by stream,
	// every one filled in.
	Settings map[string]map[string]string
	// DriftStop are the streams whose typed columns must be readable: a
	// page (or step) with a value a typed column cannot read fails the
	// run before it is written (the configuration's drift: stop).
	DriftStop map[string]bool
	// WindowPages are the streams whose window has a size set
	// (window_pages), in pages; the others' windows are learned.
	WindowPages map[string]int
}

// Login is one login of a source: what it is known by (its username or
// client id) and its client.
type Login struct {
	Name   string
	Client *erp.Client
}

// Result is the outcome of one run: one stream read through one login.
type Result struct {
	Login   string
	RunID   int64
	Status  model.RunStatus
	Kind    model.RunKind
	SweepID int64
	Stats   model.RunStats
	Elapsed time.Duration
	// FreshAt is when the stream's data were complete, if this run
	// completed them.
	FreshAt time.Time
	// FollowedAt is when a follow run had read everything new.
	FollowedAt time.Time
	// Swept says why a follow run swept the whole list instead ("": it
	// did not).
	Swept string
	// WindowedAt is when a window run had read the list's newest pages;
	// Waited says why a window run read nothing ("": it did not wait).
	WindowedAt time.Time
	Waited     string
	// HeldDeletions is how many rows the deletion guard held.
	HeldDeletions int64
	// Warnings are what the run warned of (see heard.go): what its stream
	// warned of, its records' drift and rejections, deletions held. Its
	// summary line is then at WARN; erpsync sync --strict fails it.
	Warnings []string
	// FirstLoad: the run read the login's list whole before any complete
	// sweep of it had.
	FirstLoad bool
	Err       error
}

// Run runs one complete sweep of one stream of one source, through each
// of the target's logins in turn, holding the stream's lock throughout:
// the logins of a source write the same rows, and taking turns keeps them
// from waiting on each other's row locks. It returns one result per login
// run, or a single ErrBusy result when another process holds the lock.
// Closing stop lets the commit in flight finish, then ends the run as
// cancelled and starts no further login; cancelling ctx aborts at once.
// progress, if not nil, is called after every commit with where the
// login's run stands.
func (rn *Runner) Run(ctx context.Context, stop <-chan struct{}, t Target, s Stream, progress func(login string, p Progress)) []Result {
	return rn.run(ctx, stop, t, s, model.KindSweep, progress)
}

// Follow runs one follow run of a paged list (see follow.go), as Run does
// a sweep, under a lock of its own: a sweep under way does not hold it
// up. A login whose list cannot be followed is swept instead (under the
// sweep's lock), the reason in its result.
func (rn *Runner) Follow(ctx context.Context, stop <-chan struct{}, t Target, s Stream, progress func(login string, p Progress)) []Result {
	if !s.Declared().Follows {
		return []Result{{Kind: model.KindFollow, Status: model.StatusFailed, Err: fmt.Errorf("%w: %s", ErrCannotFollow, s.Declared().Name)}}
	}
	return rn.run(ctx, stop, t, s, model.KindFollow, progress)
}

// Window runs one window run of a paged list (see window.go), as Run does
// a sweep, under a lock of its own: a sweep under way does not hold it up,
// and it never touches the sweep.
func (rn *Runner) Window(ctx context.Context, stop <-chan struct{}, t Target, s Stream, progress func(login string, p Progress)) []Result {
	if !s.Declared().Follows {
		return []Result{{Kind: model.KindWindow, Status: model.StatusFailed, Err: fmt.Errorf("%w: %s", ErrCannotFollow, s.Declared().Name)}}
	}
	return rn.run(ctx, stop, t, s, model.KindWindow, progress)
}

// ErrCannotFollow: only lists paged by cursor or by start/length are
// followed (and have a window); the others are read whole on every run.
var ErrCannotFollow = errors.New("only a list paged by cursor or by start/length can be followed; this stream is read whole on every run")

func (rn *Runner) run(ctx context.Context, stop <-chan struct{}, t Target, s Stream, kind model.RunKind, progress func(login string, p Progress)) []Result {
	name := s.Declared().Name
	log := rn.logger().With("source", t.Source, "stream", name)
	if kind != model.KindSweep {
		log = log.With("kind", kind)
	}
	pc, err := rn.Pool.Acquire(ctx)
	if err != nil {
		return []Result{{Kind: kind, Status: model.StatusFailed, Err: fmt.Errorf("%s: database: %w", name, db.Describe(err))}}
	}
	conn := pc.Conn()
	defer pc.Release()
	release, err := db.LockStream(ctx, conn, t.Source, name, kind)
	if err != nil {
		return []Result{{Kind: kind, Status: model.StatusFailed, Err: err}}
	}
	if release == nil {
		log.Debug("sync skipped: another process holds the stream's lock")
		return []Result{{Kind: kind, Err: fmt.Errorf("%w: %w", ErrBusy, db.LockHeld(ctx, conn, t.Source, name, kind))}}
	}
	defer release()
	if n, err := db.CloseAbandonedRuns(ctx, conn, t.Source, name, kind); err != nil {
		return []Result{{Status: model.StatusFailed, Err: err}}
	} else if n > 0 {
		log.Warn("closed runs left running by a process that died", "runs", n)
	}
	var out []Result
	for _, l := range t.Logins {
		if stopped(stop) || conn.IsClosed() {
			break
		}
		llog := log
		if len(t.Logins) > 1 {
			llog = log.With("login", l.Name)
		}
		start := time.Now()
		lctx, span, llog := startRunSpan(erp.WithAsker(ctx, erp.Asker{Stream: name, Kind: string(kind)}), t.Source, name, kind, l.Name, llog)
		logProgress := rn.progressLog(llog)
		p := func(pr Progress) {
			pr.Elapsed = time.Since(start)
			logProgress(pr)
			if progress != nil {
				progress(l.Name, pr)
			}
		}
		res := rn.runLogin(lctx, stop, conn, t, l, s, kind, llog, p)
		res.Login, res.Kind, res.Elapsed = l.Name, kind, time.Since(start)
		rn.report(t.Source, name, llog, res)
		endRunSpan(span, res)
		out = append(out, res)
	}
	return out
}

// runLogin runs the stream through one login, on the lock's connection.
func (rn *Runner) runLogin(ctx context.Context, stop <-chan struct{}, conn *pgx.Conn, t Target, l Login, s Stream, kind model.RunKind, log *slog.Logger, progress func(Progress)) Result {
	key := model.Key{Source: t.Source, Stream: s.Declared().Name, Login: l.Name}
	runID, err := db.StartRun(ctx, conn, key, kind)
	if err != nil {
		return Result{Status: model.StatusFailed, Err: err}
	}
	out := &runResult{}
	r := &Run{View: &View{target: t, login: l, scope: model.Scope{Key: key}, stop: stop}, runner: rn, kind: kind, info: s.Declared(),
		conn: conn, runID: runID, log: log, progress: progress, result: out}
	err = refusedBecause(r.execute(ctx, s), r.info.Permission)
	if err == nil {
		err = keepWarnings(ctx, conn, key, kind == model.KindSweep || out.swept != "", out)
	}
	res := Result{RunID: runID, SweepID: out.sweepID, Stats: out.stats, FreshAt: out.freshAt, FollowedAt: out.followedAt, Swept: out.swept,
		WindowedAt: out.windowedAt, Waited: out.waited, HeldDeletions: out.held, Warnings: out.warnings(key.Stream), FirstLoad: out.firstLoad,
		Err: err, Status: statusOf(err)}

	// The run's context may be cancelled already; the outcome must still
	// be written. If the lock's connection is gone, the pool's is used.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	errText := ""
	if err != nil {
		errText = err.Error()
	}
	var q db.Querier = conn
	if conn.IsClosed() {
		q = cmp.Or(rn.Service, rn.Pool)
	}
	if ferr := db.FinishRun(fctx, q, runID, res.Status, out.sweepID, out.stats, errText, strings.Join(out.notes, "; ")); ferr != nil {
		log.Error("could not record the run's outcome", "err", ferr)
	}
	return res
}

// report tells the observer and the log how a run ended: its summary
// line, at WARN when it warned of something, at ERROR when it failed.
func (rn *Runner) report(source, stream string, log *slog.Logger, res Result) {
	// A first load reads the whole list because it must: it is not a
	// follow run that could not follow.
	rn.obs().RunFinished(source, stream, model.RunOutcome{Login: res.Login, Kind: res.Kind, Status: res.Status, Elapsed: res.Elapsed,
		FreshAt: res.FreshAt, FollowedAt: res.FollowedAt, Swept: res.Swept != "" && !res.FirstLoad, WindowedAt: res.WindowedAt, HeldDeletions: res.HeldDeletions})
	var attrs []any
	if res.FirstLoad {
		attrs = append(attrs, "first_load", true)
	}
	attrs = append(attrs, "status", res.Status, "run_id", res.RunID, "pages", res.Stats.Pages, "rows", res.Stats.Seen,
		"inserted", res.Stats.Inserted, "updated", res.Stats.Updated, "unchanged", res.Stats.Unchanged,
		"rejected", res.Stats.Rejected, "deleted", res.Stats.Deleted, "duration", res.Elapsed.Round(time.Millisecond))
	if res.HeldDeletions > 0 {
		attrs = append(attrs, "deletions_held", res.HeldDeletions)
	}
	if res.Swept != "" && !res.FirstLoad {
		attrs = append(attrs, "swept_because", res.Swept)
	}
	if res.Waited != "" {
		attrs = append(attrs, "waited_because", res.Waited)
	}
	if len(res.Warnings) > 0 {
		attrs = append(attrs, "warnings", strings.Join(res.Warnings, "; "))
	}
	switch {
	case res.Status == model.StatusFailed:
		log.Error("sync finished", append(attrs, "err", res.Err)...)
	case len(res.Warnings) > 0:
		log.Warn("sync finished", attrs...)
	default:
		log.Info("sync finished", attrs...)
	}
}

// stopped reports whether stop was closed.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// statusOf is the one rule from a run's error to its status.
func statusOf(err error) model.RunStatus {
	switch {
	case err == nil:
		return model.StatusSucceeded
	case errors.Is(err, errStopped), errors.Is(err, context.Canceled):
		return model.StatusCancelled
	default:
		return model.StatusFailed
	}
}

func (rn *Runner) logger() *slog.Logger {
	if rn.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return rn.Log
}

func (rn *Runner) obs() Observer {
	if rn.Obs == nil {
		return nopObserver{}
	}
	return rn.Obs
}

// Resetter is a stream of its own that keeps, besides its checkpoint,
// what makes its runs read less than everything (the journal lines, which
// documents' previews were read). Reset forgets that for the login of
// scope, in the reset's transaction, and says what it forgot.
type Resetter interface {
	Stream
	Reset(ctx context.Context, tx db.Tx, scope model.Scope) (forgot string, err error)
}

// Reset starts a stream over for each login of the target (see
// db.ResetStream): every row and every version is kept, and the next run
// of each login reads everything again, comparing row by row. It holds
// both of the stream's locks for its transactions, and is refused
// (ErrBusy) while a run holds either. Each login's reset is recorded in
// erp.sync_runs as a run of kind reset.
func (rn *Runner) Reset(ctx context.Context, t Target, s Stream) []Result {
	name := s.Declared().Name
	log := rn.logger().With("source", t.Source, "stream", name, "kind", model.KindReset)
	pc, err := rn.Pool.Acquire(ctx)
	if err != nil {
		return []Result{{Kind: model.KindReset, Status: model.StatusFailed, Err: fmt.Errorf("%s: database: %w", name, db.Describe(err))}}
	}
	conn := pc.Conn()
	defer pc.Release()
	for _, kind := range writingKinds {
		release, err := db.LockStream(ctx, conn, t.Source, name, kind)
		if err != nil {
			return []Result{{Kind: model.KindReset, Status: model.StatusFailed, Err: err}}
		}
		if release == nil {
			return []Result{{Kind: model.KindReset, Err: fmt.Errorf("%w: %w", ErrBusy, db.LockHeld(ctx, conn, t.Source, name, kind))}}
		}
		defer release()
	}
	var out []Result
	for _, l := range t.Logins {
		start := time.Now()
		res := rn.resetLogin(ctx, conn, t, l, s)
		res.Login, res.Kind, res.Elapsed = l.Name, model.KindReset, time.Since(start)
		if res.Err != nil {
			log.Error("reset failed", "login", l.Name, "err", res.Err)
		} else {
			log.Info("stream reset: its next run reads everything again", "login", l.Name)
		}
		out = append(out, res)
	}
	return out
}

// resetLogin resets the stream for one login, in one transaction.
func (rn *Runner) resetLogin(ctx context.Context, conn *pgx.Conn, t Target, l Login, s Stream) Result {
	key := model.Key{Source: t.Source, Stream: s.Declared().Name, Login: l.Name}
	runID, err := db.StartRun(ctx, conn, key, model.KindReset)
	if err != nil {
		return Result{Status: model.StatusFailed, Err: err}
	}
	note := "checkpoints, page digests, held deletions, rows held for a second sweep and how the list is followed forgotten; rows and versions kept"
	err = func() error {
		var scope model.Scope
		rs, isResetter := s.(Resetter)
		if isResetter {
			id, err := l.Client.Identity(ctx)
			if err != nil {
				return fmt.Errorf("%s: the login's company and branch are needed to reset it: %w", s.Declared().Name, err)
			}
			scope = model.Scope{Key: key, CompanyID: id.CompanyID, BranchID: id.BranchID}
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return fmt.Errorf("begin: %w", db.Describe(err))
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if err := db.ResetStream(ctx, db.InTx(tx), key); err != nil {
			return err
		}
		if isResetter {
			forgot, err := rs.Reset(ctx, db.InTx(tx), scope)
			if err != nil {
				return err
			}
			note += "; " + forgot
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("commit: %w", db.Describe(err))
		}
		return nil
	}()
	res := Result{RunID: runID, Err: err, Status: statusOf(err)}
	errText := ""
	if err != nil {
		errText, note = err.Error(), ""
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if ferr := db.FinishRun(fctx, conn, runID, res.Status, 0, model.RunStats{}, errText, note); ferr != nil && res.Err == nil {
		res.Err, res.Status = ferr, model.StatusFailed
	}
	return res
}
