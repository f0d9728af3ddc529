package cli

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/erpsync/erpsync/internal/daemon"
	"github.com/erpsync/erpsync/internal/metrics"
	"github.com/erpsync/erpsync/internal/sync"
)

func cmdRun(e *command) error {
	fs, cfgFile := e.flags("run")
	noMigrate := fs.Bool("no-migrate", false, "refuse to start on a schema that is behind instead of migrating it (also ERPSYNC_AUTO_MIGRATE=false)")
	prefetch := fs.Int("prefetch", 1, "pages fetched ahead of the page being written (0: none)")
	if err := e.parse(fs); err != nil {
		return err
	}
	if len(e.positional()) > 0 {
		return usageErrorf("run takes no arguments (streams come from ERPSYNC_STREAMS or the config file)")
	}
	cfg, err := e.loadConfig(*cfgFile, true)
	if err != nil {
		return err
	}
	if err := cfg.RequireDatabase(); err != nil {
		return err
	}
	if *noMigrate {
		cfg.AutoMigrate = false
	}
	log := newLogger(cfg, e.term)
	warnHistoryOff(cfg, log)
	tr, err := startTraces(cfg, log)
	if err != nil {
		return err
	}
	defer tr.flush()
	m := metrics.New()
	targets := map[string]sync.Target{}
	for _, src := range cfg.Sources {
		t, err := targetOf(src, log, m.ERP(src.Name))
		if err != nil {
			return err
		}
		targets[src.Name] = t
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("ERPSYNC_HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	ctx, cancel := signalContext()
	defer cancel()
	context.AfterFunc(ctx, tr.stopBegins)
	d := &daemon.Daemon{Cfg: cfg, Catalog: e.catalog, Log: log, Metrics: m, Targets: targets, Prefetch: *prefetch,
		StartSpread: 30 * time.Second}
	return d.Run(ctx, ln)
}
