package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/sync"
)

// cmdCheck tries everything a run needs and says exactly what is wrong.
func cmdCheck(e *command) error {
	fs, cfgFile := e.flags("check")
	if err := e.parse(fs); err != nil {
		return err
	}
	cfg, err := e.loadConfig(*cfgFile, true)
	if err != nil {
		return err
	}
	if err := cfg.RequireDatabase(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "ok    configuration: %d source(s)\n", len(cfg.Sources))
	for _, w := range cfg.Warnings {
		fmt.Fprintf(e.stdout, "warn  configuration: %s\n", w)
	}
	log := newLogger(cfg, e.term)
	ctx, cancel := signalContext()
	defer cancel()
	problems := 0
	fail := func(what string, err error) {
		problems++
		fmt.Fprintf(e.stdout, "FAIL  %s: %v\n", what, err)
	}

	if pool, err := openPool(ctx, cfg, 1); err != nil {
		fail("database", err)
	} else {
		switch cur, target, err := db.SchemaVersions(ctx, pool); {
		case err != nil:
			fail("database schema", err)
		case cur < target:
			fmt.Fprintf(e.stdout, "warn  database: %v (or run with auto-migrate)\n", &db.SchemaError{Current: cur, Target: target})
		default:
			fmt.Fprintf(e.stdout, "ok    database: schema at version %d\n", cur)
		}
		pool.Close()
	}

	for _, src := range cfg.Sources {
		t, err := targetOf(src, log, nil, func(o *erp.Options) {
			o.MaxAttempts, o.MaxWaits, o.BackoffMax = 2, 2, time.Second
		})
		if err != nil {
			fail(fmt.Sprintf("source %s (%s)", src.Name, src.BaseURL), err)
			continue
		}
		for i, l := range t.Logins {
			what := fmt.Sprintf("source %s (%s), login %s", src.Name, src.BaseURL, l.Name)
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
			id, err := l.Client.Identity(cctx)
			if err == nil {
				_, err = l.Client.Me(cctx)
			}
			if err != nil {
				fail(what, err)
			} else {
				fmt.Fprintf(e.stdout, "ok    %s: logged in (%s auth), /api/auth/me/ answers company %s, branch %s\n", what, src.Logins[i].Auth, id.CompanyID, id.BranchID)
			}
			ccancel()
		}
		sync.RevokeTokens([]sync.Target{t}, cfg.Shutdown.Revoke, log)
	}
	if problems > 0 {
		return fmt.Errorf("%d problem(s) found", problems)
	}
	return nil
}
