package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/ingest"
	"github.com/erpsync/erpsync/internal/model"
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
	log := newLogger(cfg, e.stderr)
	ctx, cancel := signalContext()
	defer cancel()
	if err := cfg.RequireDatabase(); err != nil {
		return err
	}
	pool, err := db.Open(ctx, cfg.DatabaseURL.Value())
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
	log := newLogger(cfg, e.stderr)
	ctx, stop, cancel := gracefulContext(cfg.ShutdownGrace, log)
	defer cancel()
	pool, err := openDB(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	return e.syncOnce(ctx, stop, pool, cfg, e.positional(), *prefetch, log)
}

// syncOnce runs the named (or enabled) streams of every source one after
// the other; a failing stream does not stop the others.
func (e *env) syncOnce(ctx context.Context, stop <-chan struct{}, pool *pgxpool.Pool, cfg config.Config, names []string, prefetch int, log *slog.Logger) error {
	term := e.stderr
	runner := &ingest.Runner{Pool: pool, Log: log, Prefetch: prefetch}
	failed := 0
	for _, src := range cfg.Sources {
		streams, err := e.streamsFor(src, names)
		if err != nil {
			return err
		}
		client, err := newClient(src, log, nil)
		if err != nil {
			return err
		}
		for _, s := range streams {
			res := runner.Run(ctx, stop, ingest.Target{Source: src.Name, Client: client, PageSize: src.PageSize}, s, progressPrinter(term, src.Name, s.Name()))
			if isTerminal(term) {
				fmt.Fprint(term, "\r\033[K")
			}
			switch {
			case errors.Is(res.Err, ingest.ErrBusy):
				fmt.Fprintf(term, "%s/%s: skipped, another erpsync process is running it\n", src.Name, s.Name())
			case res.Err != nil && res.Status != model.StatusCancelled:
				failed++
			}
			if res.Status == model.StatusCancelled {
				break
			}
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := client.Close(rctx); err != nil {
			log.Warn("could not revoke the ERP token", "source", src.Name, "err", err)
		}
		rcancel()
	}
	if failed > 0 {
		return fmt.Errorf("%d stream run(s) failed; see the log above and `erpsync status`", failed)
	}
	return nil
}

// progressPrinter shows live progress on a terminal and nothing otherwise
// (the runner logs one summary line per stream either way).
func progressPrinter(w io.Writer, source, stream string) func(model.RunStats) {
	if !isTerminal(w) {
		return nil
	}
	start := time.Now()
	return func(s model.RunStats) {
		rowsPerSec := float64(s.Seen) / max(time.Since(start).Seconds(), 0.001)
		fmt.Fprintf(w, "\r\033[K%s/%s: %d pages, %d rows, %.0f rows/s", source, stream, s.Pages, s.Seen, rowsPerSec)
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
