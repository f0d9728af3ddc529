package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

func cmdMigrate(e *command) error {
	fs, cfgFile := e.flags("migrate")
	if err := e.parse(fs); err != nil {
		return err
	}
	cfg, err := e.loadConfig(*cfgFile, false)
	if err != nil {
		return err
	}
	log := newLogger(cfg, e.term)
	ctx, cancel := e.signalContext()
	defer cancel()
	// Migrations run as the schema's owner when a separate URL names it.
	if cfg.MigrateDatabaseURL != "" {
		cfg.DatabaseURL = cfg.MigrateDatabaseURL
	}
	pool, err := openPool(ctx, cfg, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := db.Migrate(ctx, pool, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "migrations applied: %d\n", len(applied))
	return nil
}

func cmdSync(e *command) error {
	fs, cfgFile := e.flags("sync")
	prefetch := fs.Int("prefetch", 1, "pages fetched ahead of the page being written (0: none)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the sync to `file` (performance work)")
	confirm := fs.Bool("confirm-deletions", false, "mark deleted what the deletion guard holds: you confirm the rows are gone at the ERP")
	follow := fs.Bool("follow", false, "one follow run: read only what is new in the paged lists named (without names: every enabled one), not a complete sweep")
	window := fs.Bool("window", false, "one window run: re-read the newest pages of the paged lists named (without names: every enabled one), not a complete sweep")
	strict := fs.Bool("strict", false, "count a run that warned (drift, rejected records, held deletions, a list that may be cut) as failed: exit 1, for CI")
	if err := e.parse(fs); err != nil {
		return err
	}
	kind := model.KindSweep
	switch {
	case *follow && *window:
		return usageErrorf("--follow and --window: one kind of run at a time")
	case *follow && *confirm:
		return usageErrorf("--follow and --confirm-deletions: a follow run never marks a row deleted; confirm deletions with a complete sweep")
	case *follow:
		kind = model.KindFollow
	case *window:
		kind = model.KindWindow
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cfg, err := e.loadConfigForStreams(*cfgFile)
	if err != nil {
		return err
	}
	log := newLogger(cfg, e.term)
	warnHistoryOff(cfg, log)
	stopper, done, err := e.startForeground(cfg, log)
	if err != nil {
		return err
	}
	defer done()
	ctx := stopper.Context()
	runner, pools, err := openRunner(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer pools.Close()
	runner.Prefetch, runner.ConfirmDeletions = *prefetch, *confirm
	if !e.term.tty { // a terminal shows a live line instead
		runner.ProgressEvery = sync.ProgressEvery
	}
	return e.syncOnce(ctx, stopper.Draining(), runner, syncMode{kind: kind, strict: *strict}, cfg, e.positional())
}

// syncMode is how syncOnce runs the streams: the kind of run; strict: a
// run that warned counts as failed.
type syncMode struct {
	kind   model.RunKind
	strict bool
}

// startForeground starts what a command that runs streams in the
// foreground needs: its traces, and a stopper on SIGINT and SIGTERM (see
// stopOnSignals). done stops both.
func (e *command) startForeground(cfg config.Config, log *slog.Logger) (stopper *sync.Stopper, done func(), err error) {
	tr, err := startTraces(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	stopper, cancel := e.stopOnSignals(cfg.Shutdown.Grace, log, tr.stopBegins)
	return stopper, func() { cancel(); tr.flush() }, nil
}

// openRunner opens the pools of a command whose streams run one after
// the other (one run at a time), and a runner on them; the caller closes
// the pools.
func openRunner(ctx context.Context, cfg config.Config, log *slog.Logger) (*sync.Runner, *db.Pools, error) {
	pools, err := openPools(ctx, cfg, 1, log)
	if err != nil {
		return nil, nil, err
	}
	return &sync.Runner{Pool: pools.Runs, Service: pools.Service, Log: log}, pools, nil
}

// syncOnce runs the named (or enabled) streams of every source one after
// the other, each through every login of its source; a failing stream
// does not stop the others. Each run is of the mode's kind: a complete
// sweep, or a follow or window run of each paged list among them (a
// stream named that has none is refused). With strict, a run that warned
// fails too. A stream whose lock another session holds is skipped, naming
// the holder; the error then wraps sync.ErrBusy, unless a run failed.
func (e *command) syncOnce(ctx context.Context, stop <-chan struct{}, runner *sync.Runner, mode syncMode, cfg config.Config, names []string) error {
	term, log, kind := e.term, runner.Log, mode.kind
	run := map[model.RunKind]func(context.Context, <-chan struct{}, sync.Target, sync.Stream, func(string, sync.Progress)) []sync.Result{
		model.KindSweep: runner.Run, model.KindFollow: runner.Follow, model.KindWindow: runner.Window}[kind]
	failed, warned, skipped, busy := 0, 0, 0, 0
	for _, src := range cfg.Sources {
		streams, err := e.streamsFor(src, names)
		if err != nil {
			return err
		}
		if kind != model.KindSweep {
			if streams, err = followable(streams, len(names) > 0, kind); err != nil {
				return err
			}
		}
		if stopRequested(stop) {
			skipped += len(streams)
			continue
		}
		t, err := targetOf(src, log, nil)
		if err != nil {
			return err
		}
		for _, s := range streams {
			// A stop ends the run in flight after its commit, and starts
			// nothing more: no lock taken, no run recorded, no login.
			if stopRequested(stop) {
				skipped++
				continue
			}
			results := run(ctx, stop, t, s, progressPrinter(term, src.Name, s.Declared().Name, len(t.Logins) > 1))
			term.clear()
			for _, res := range results {
				switch {
				case errors.Is(res.Err, sync.ErrBusy):
					busy++
					fmt.Fprintf(term, "%s/%s: skipped: %v\n", src.Name, s.Declared().Name, res.Err)
				case res.Err != nil && res.Status != model.StatusCancelled:
					failed++
				case mode.strict && res.Status == model.StatusSucceeded && len(res.Warnings) > 0:
					warned++
				}
			}
		}
		sync.RevokeTokens([]sync.Target{t}, cfg.Shutdown.Revoke, log)
	}
	if skipped > 0 {
		log.Info("stopped: streams not started", "streams", skipped)
	}
	switch {
	case failed > 0 && warned > 0:
		return fmt.Errorf("%d stream run(s) failed, and %d warned (--strict); see the log above and `erpsync status`", failed, warned)
	case failed > 0:
		return fmt.Errorf("%d stream run(s) failed; see the log above and `erpsync status`", failed)
	case warned > 0:
		return fmt.Errorf("%d stream run(s) warned (--strict counts them as failed); see the log above and `erpsync status`", warned)
	}
	if busy > 0 {
		return fmt.Errorf("%d stream(s) skipped (%w, named above); try again once it lets go", busy, sync.ErrBusy)
	}
	return nil
}

// followable keeps the streams that can be followed (paged lists, which
// have a window too): of those named, a stream that cannot is a usage
// error for a run of kind; of the enabled ones, it is left out.
func followable(streams []sync.Stream, named bool, kind model.RunKind) ([]sync.Stream, error) {
	var out, cannot []sync.Stream
	for _, s := range streams {
		if s.Declared().Follows {
			out = append(out, s)
		} else {
			cannot = append(cannot, s)
		}
	}
	if named && len(cannot) > 0 {
		return nil, usageErrorf("--%s: %s is read whole on every run; only lists paged by cursor or start/length have %s runs",
			kind, cannot[0].Declared().Name, kind)
	}
	return out, nil
}

func stopRequested(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// progressPrinter shows a live progress line on a terminal (with a total
// and the time left where they can be known: sync.Progress) and nothing
// otherwise, where the runner logs a progress line every so often (the
// runner logs one summary line per stream either way); withLogin names
// the login (a source with several).
func progressPrinter(term *terminal, source, stream string, withLogin bool) func(string, sync.Progress) {
	if !term.tty {
		return nil
	}
	return func(login string, p sync.Progress) {
		who := source + "/" + stream
		if withLogin {
			who += " (" + login + ")"
		}
		if p.FirstLoad {
			who += ", first load"
		}
		term.progress(who + ": " + p.String())
	}
}

// stopOnSignals returns a stopper of the command's runs: the first SIGINT
// or SIGTERM drains it (the page in flight commits, nothing new starts;
// the command then exits 128 plus its number), the grace period or a
// second signal aborts it. onStop is called at the first signal. cancel
// releases the signals and aborts.
func (e *command) stopOnSignals(grace time.Duration, log *slog.Logger, onStop func()) (stopper *sync.Stopper, cancel func()) {
	stopper = sync.NewStopper(context.Background())
	sigCtx, sigCancel := e.signalContext()
	go func() {
		select {
		case <-sigCtx.Done():
		case <-stopper.Context().Done():
			sigCancel()
			return
		}
		sigCancel()
		onStop()
		log.Info("stopping: letting the page in flight commit", "grace", grace)
		stopper.Drain()
		again, againCancel := signalContext()
		defer againCancel()
		select {
		case <-time.After(grace):
			log.Warn("grace period over: aborting")
		case <-again.Done():
			log.Warn("second signal: aborting")
		case <-stopper.Context().Done():
		}
		stopper.Abort()
	}()
	return stopper, stopper.Abort
}
