package sync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
)

// Run statuses, as stored in erp.sync_runs.status.
const (
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// ErrBusy means another process holds the stream's lock; nothing ran.
var ErrBusy = errors.New("another erpsync process is running this stream")

// errStopped ends a run between pages when a stop was asked for.
var errStopped = errors.New("stopped before the sweep finished")

// Observer receives progress for metrics and terminals. Implementations
// must be safe for concurrent use.
type Observer interface {
	PageCommitted(source, stream string, page db.RunStats)
	RunFinished(source, stream, status string, elapsed time.Duration, err error)
}

type nopObserver struct{}

func (nopObserver) PageCommitted(string, string, db.RunStats)                {}
func (nopObserver) RunFinished(string, string, string, time.Duration, error) {}

// Runner runs streams against the warehouse.
type Runner struct {
	Pool *pgxpool.Pool
	Log  *slog.Logger
	Obs  Observer
	// Prefetch is how many pages are fetched ahead of the page being
	// written (cursor streams). 0 fetches strictly after each commit, so a
	// crash re-fetches at most one page; 1 overlaps the next fetch with
	// the current write.
	Prefetch int
}

// Target is a source as a run sees it.
type Target struct {
	Source   string
	Client   *erp.Client
	PageSize int
}

// Result is the outcome of one run.
type Result struct {
	RunID   int64
	Status  string
	SweepID int64
	Stats   db.RunStats
	Elapsed time.Duration
	Err     error
}

// Run runs one stream of one source once. Closing stop lets the page in
// flight commit, then ends the run as cancelled; cancelling ctx aborts at
// once. progress, if not nil, is called after every committed page with
// the run's totals.
func (r *Runner) Run(ctx context.Context, stop <-chan struct{}, t Target, s *Stream, progress func(db.RunStats)) Result {
	start := time.Now()
	log := r.logger().With("source", t.Source, "stream", s.Name)
	res := r.run(ctx, stop, t, s, log, progress)
	res.Elapsed = time.Since(start)
	if errors.Is(res.Err, ErrBusy) {
		log.Debug("sync skipped: another process holds the stream's lock")
		return res
	}
	r.obs().RunFinished(t.Source, s.Name, res.Status, res.Elapsed, res.Err)
	attrs := []any{"status", res.Status, "run_id", res.RunID, "pages", res.Stats.Pages, "rows", res.Stats.Seen,
		"inserted", res.Stats.Inserted, "updated", res.Stats.Updated, "unchanged", res.Stats.Unchanged,
		"rejected", res.Stats.Rejected, "deleted", res.Stats.Deleted, "duration", res.Elapsed.Round(time.Millisecond)}
	switch res.Status {
	case StatusFailed:
		log.Error("sync finished", append(attrs, "err", res.Err)...)
	default:
		log.Info("sync finished", attrs...)
	}
	return res
}

func (r *Runner) run(ctx context.Context, stop <-chan struct{}, t Target, s *Stream, log *slog.Logger, progress func(db.RunStats)) (res Result) {
	pc, err := r.Pool.Acquire(ctx)
	if err != nil {
		return Result{Status: StatusFailed, Err: fmt.Errorf("%s: database: %w", s.Name, db.Describe(err))}
	}
	conn := pc.Conn()
	defer pc.Release()
	locked, err := db.TryStreamLock(ctx, conn, t.Source, s.Name)
	if err != nil {
		return Result{Status: StatusFailed, Err: err}
	}
	if !locked {
		return Result{Err: ErrBusy}
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := db.UnlockStream(uctx, conn, t.Source, s.Name); err != nil {
			// Closing the session is the other way to drop the lock; the
			// pool discards a closed connection on Release.
			conn.Close(uctx)
		}
	}()

	if n, err := db.CloseAbandonedRuns(ctx, conn, t.Source, s.Name); err != nil {
		return Result{Status: StatusFailed, Err: err}
	} else if n > 0 {
		log.Warn("closed runs left running by a process that died", "runs", n)
	}
	host, _ := os.Hostname()
	runID, err := db.StartRun(ctx, conn, t.Source, s.Name, host, os.Getpid())
	if err != nil {
		return Result{Status: StatusFailed, Err: err}
	}

	x := &streamRun{Runner: r, t: t, s: s, conn: conn, runID: runID, log: log, progress: progress}
	err = x.execute(ctx, stop)
	res = Result{RunID: runID, SweepID: x.sweepID, Stats: x.stats, Err: err, Status: statusOf(err)}

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
		q = r.Pool
	}
	if ferr := db.FinishRun(fctx, q, runID, res.Status, x.sweepID, x.stats, errText, strings.Join(x.notes, "; ")); ferr != nil {
		log.Error("could not record the run's outcome", "err", ferr)
	}
	return res
}

func statusOf(err error) string {
	switch {
	case err == nil:
		return StatusSucceeded
	case errors.Is(err, errStopped), errors.Is(err, context.Canceled):
		return StatusCancelled
	default:
		return StatusFailed
	}
}

func (r *Runner) logger() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

func (r *Runner) obs() Observer {
	if r.Obs == nil {
		return nopObserver{}
	}
	return r.Obs
}

// streamRun is the state of one run.
type streamRun struct {
	*Runner
	t        Target
	s        *Stream
	conn     *pgx.Conn
	runID    int64
	log      *slog.Logger
	progress func(db.RunStats)

	scope   db.Scope
	sweepID int64
	stats   db.RunStats
	notes   []string
}

func (x *streamRun) execute(ctx context.Context, stop <-chan struct{}) (err error) {
	defer func() {
		// A bug in one stream must not take the daemon down: it becomes
		// a failed run with the stack in the log.
		if p := recover(); p != nil {
			x.log.Error("panic in stream", "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("%s: panic: %v", x.s.Name, p)
		}
	}()
	id, err := x.t.Client.Identity(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", x.s.Name, err)
	}
	x.scope = db.Scope{Source: x.t.Source, CompanyID: id.CompanyID, BranchID: id.BranchID}
	if x.s.Custom != nil {
		return x.s.Custom(ctx, x)
	}
	if x.s.Paging == CursorPages {
		return x.cursorSweep(ctx, stop)
	}
	return x.oneList(ctx)
}
