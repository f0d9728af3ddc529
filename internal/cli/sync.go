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

func cmdMigrate(e *env) error {
	fs, cfgFile := e.flags("migrate")
	if err := e.parse(fs); err != nil {
		return err
	}
	cfg, err := e.loadConfig(*cfgFile, false)
	if err != nil {
		return err
	}
	log := newLogger(cfg, e.term)
	ctx, cancel := signalContext()
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

func cmdSync(e *env) error {
	fs, cfgFile := e.flags("sync")
	prefetch := fs.Int("prefetch", 1, "pages fetched ahead of the page being written (0: none)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the sync to `file` (performance work)")
	confirm := fs.Bool("confirm-deletions", false, "mark deleted what the deletion guard holds: you confirm the rows are gone at the ERP")
	if err := e.parse(fs); err != nil {
		return err
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
	cfg, err := e.loadConfig(*cfgFile, true)
	if err != nil {
		return err
	}
	for _, src := range cfg.Sources {
		if _, err := e.streamsFor(src, e.positional()); err != nil {
			return err
		}
	}
	log := newLogger(cfg, e.term)
	ctx, stop, cancel := gracefulContext(cfg.Shutdown.Grace, log)
	defer cancel()
	// Streams run one after the other: one connection for the run, one
	// to record its outcome if the first is lost.
	pool, err := openDB(ctx, cfg, 2, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	runner := &sync.Runner{Pool: pool, Log: log, Prefetch: *prefetch, ConfirmDeletions: *confirm}
	return e.syncOnce(ctx, stop, runner, cfg, e.positional())
}

// syncOnce runs the named (or enabled) streams of every source one after
// the other; a failing stream does not stop the others.
func (e *env) syncOnce(ctx context.Context, stop <-chan struct{}, runner *sync.Runner, cfg config.Config, names []string) error {
	term, log := e.term, runner.Log
	failed, skipped := 0, 0
	for _, src := range cfg.Sources {
		streams, err := e.streamsFor(src, names)
		if err != nil {
			return err
		}
		if stopRequested(stop) {
			skipped += len(streams)
			continue
		}
		client, err := newClient(src, log, nil)
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
			res := runner.Run(ctx, stop, target(src, client), s, progressPrinter(term, src.Name, s.Name()))
			term.clear()
			switch {
			case errors.Is(res.Err, sync.ErrBusy):
				fmt.Fprintf(term, "%s/%s: skipped, another erpsync process is running it\n", src.Name, s.Name())
			case res.Err != nil && res.Status != model.StatusCancelled:
				failed++
			}
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Shutdown.Revoke)
		if err := client.Close(rctx); err != nil {
			log.Warn("could not revoke the ERP token", "source", src.Name, "err", err)
		}
		rcancel()
	}
	if skipped > 0 {
		log.Info("stopped: streams not started", "streams", skipped)
	}
	if failed > 0 {
		return fmt.Errorf("%d stream run(s) failed; see the log above and `erpsync status`", failed)
	}
	return nil
}

func stopRequested(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// progressPrinter shows live progress on a terminal and nothing otherwise
// (the runner logs one summary line per stream either way).
func progressPrinter(term *terminal, source, stream string) func(model.RunStats) {
	if !term.tty {
		return nil
	}
	start := time.Now()
	return func(s model.RunStats) {
		rowsPerSec := float64(s.Seen) / max(time.Since(start).Seconds(), 0.001)
		term.progress(fmt.Sprintf("%s/%s: %d pages, %d rows, %.0f rows/s", source, stream, s.Pages, s.Seen, rowsPerSec))
	}
}

// gracefulContext: the first SIGINT/SIGTERM closes stop (finish the page
// in flight), the grace period or a second signal cancels ctx.
func gracefulContext(grace time.Duration, log *slog.Logger) (context.Context, <-chan struct{}, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sigCtx, sigCancel := signalContext()
	stop := make(chan struct{})
	go func() {
		select {
		case <-sigCtx.Done():
		case <-ctx.Done():
			sigCancel()
			return
		}
		sigCancel()
		log.Info("stopping: letting the page in flight commit", "grace", grace)
		close(stop)
		again, againCancel := signalContext()
		defer againCancel()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			log.Warn("grace period over: aborting")
		case <-again.Done():
			log.Warn("second signal: aborting")
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, stop, cancel
}
