package sync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// ErrBusy means another process holds the stream's lock; nothing ran.
var ErrBusy = errors.New("another erpsync process is running this stream")

// errStopped ends a run between commits when a stop was asked for.
var errStopped = errors.New("stopped before the stream finished")

// Observer receives progress for metrics and terminals. Implementations
// must be safe for concurrent use.
type Observer interface {
	// PageCommitted is called after every commit with what it wrote.
	PageCommitted(source, stream string, st model.RunStats)
	// RunFinished is called once per run that took the lock.
	RunFinished(source, stream string, o model.RunOutcome)
}

type nopObserver struct{}

func (nopObserver) PageCommitted(string, string, model.RunStats) {}
func (nopObserver) RunFinished(string, string, model.RunOutcome) {}

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
	SweepID int64
	Stats   model.RunStats
	Elapsed time.Duration
	// FreshAt is when the stream's data were complete, if this run
	// completed them.
	FreshAt time.Time
	// HeldDeletions is how many rows the deletion guard held.
	HeldDeletions int64
	Err           error
}

// Run runs one stream of one source once, through each of the target's
// logins in turn, holding the stream's lock throughout: the logins of a
// source write the same rows, and taking turns keeps them from waiting
// on each other's row locks. It returns one result per login run, or a
// single ErrBusy result when another process holds the lock. Closing stop
// lets the commit in flight finish, then ends the run as cancelled and
// starts no further login; cancelling ctx aborts at once. progress, if
// not nil, is called after every commit with the login's run totals.
func (rn *Runner) Run(ctx context.Context, stop <-chan struct{}, t Target, s Stream, progress func(login string, st model.RunStats)) []Result {
	name := s.Name()
	log := rn.logger().With("source", t.Source, "stream", name)
	pc, err := rn.Pool.Acquire(ctx)
	if err != nil {
		return []Result{{Status: model.StatusFailed, Err: fmt.Errorf("%s: database: %w", name, db.Describe(err))}}
	}
	conn := pc.Conn()
	defer pc.Release()
	locked, err := db.TryStreamLock(ctx, conn, t.Source, name)
	if err != nil {
		return []Result{{Status: model.StatusFailed, Err: err}}
	}
	if !locked {
		log.Debug("sync skipped: another process holds the stream's lock")
		return []Result{{Err: ErrBusy}}
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := db.UnlockStream(uctx, conn, t.Source, name); err != nil {
			// Closing the session is the other way to drop the lock; the
			// pool discards a closed connection on Release.
			conn.Close(uctx)
		}
	}()
	if n, err := db.CloseAbandonedRuns(ctx, conn, t.Source, name); err != nil {
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
		var p func(model.RunStats)
		if progress != nil {
			p = func(st model.RunStats) { progress(l.Name, st) }
		}
		start := time.Now()
		lctx, span, llog := startRunSpan(ctx, t.Source, name, l.Name, llog)
		res := rn.runLogin(lctx, stop, conn, t, l, s, llog, p)
		res.Login, res.Elapsed = l.Name, time.Since(start)
		rn.report(t.Source, name, llog, res)
		endRunSpan(span, res)
		out = append(out, res)
	}
	return out
}

// runLogin runs the stream through one login, on the lock's connection.
func (rn *Runner) runLogin(ctx context.Context, stop <-chan struct{}, conn *pgx.Conn, t Target, l Login, s Stream, log *slog.Logger, progress func(model.RunStats)) Result {
	name := s.Name()
	if err := db.CheckWritable(ctx, conn); err != nil {
		return Result{Status: model.StatusFailed, Err: err}
	}
	key := db.StreamKey{Source: t.Source, Stream: name, Login: l.Name}
	if err := db.ClaimLegacyCheckpoint(ctx, conn, key); err != nil {
		return Result{Status: model.StatusFailed, Err: err}
	}
	host, _ := os.Hostname()
	runID, err := db.StartRun(ctx, conn, key, host, os.Getpid())
	if err != nil {
		return Result{Status: model.StatusFailed, Err: err}
	}
	r := &Run{runner: rn, target: t, login: l, key: key, info: s.Info(), conn: conn, runID: runID, log: log, progress: progress, stop: stop}
	err = refusedBecause(r.execute(ctx, s), r.info.Permission)
	if err == nil {
		err = db.SetWarning(ctx, conn, key, strings.Join(r.warns, "; "))
	}
	res := Result{RunID: runID, SweepID: r.sweepID, Stats: r.stats, FreshAt: r.freshAt, HeldDeletions: r.held,
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
	if ferr := db.FinishRun(fctx, q, runID, res.Status, r.sweepID, r.stats, errText, strings.Join(r.notes, "; ")); ferr != nil {
		log.Error("could not record the run's outcome", "err", ferr)
	}
	return res
}

// report tells the observer and the log how a run ended.
func (rn *Runner) report(source, stream string, log *slog.Logger, res Result) {
	rn.obs().RunFinished(source, stream, model.RunOutcome{Login: res.Login, Status: res.Status, Elapsed: res.Elapsed,
		FreshAt: res.FreshAt, HeldDeletions: res.HeldDeletions})
	attrs := []any{"status", res.Status, "run_id", res.RunID, "pages", res.Stats.Pages, "rows", res.Stats.Seen,
		"inserted", res.Stats.Inserted, "updated", res.Stats.Updated, "unchanged", res.Stats.Unchanged,
		"rejected", res.Stats.Rejected, "deleted", res.Stats.Deleted, "duration", res.Elapsed.Round(time.Millisecond)}
	if res.HeldDeletions > 0 {
		attrs = append(attrs, "deletions_held", res.HeldDeletions)
	}
	if res.Status == model.StatusFailed {
		log.Error("sync finished", append(attrs, "err", res.Err)...)
	} else {
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
