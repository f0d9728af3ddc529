package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
)

// cmdCheck tries everything a run needs and says exactly what is wrong.
func cmdCheck(e *env) error {
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
		what := fmt.Sprintf("source %s (%s)", src.Name, src.BaseURL)
		client, err := newClient(src, log, nil, func(o *erp.Options) {
			o.MaxAttempts, o.MaxWaits, o.BackoffMax = 2, 2, time.Second
		})
		if err != nil {
			fail(what, err)
			continue
		}
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
		id, err := client.Identity(cctx)
		if err == nil {
			_, err = client.Me(cctx)
		}
		if err != nil {
			fail(what, err)
		} else {
			fmt.Fprintf(e.stdout, "ok    %s: logged in (%s auth), /api/auth/me/ answers company %s, branch %s\n", what, src.Auth, id.CompanyID, id.BranchID)
		}
		_ = client.Close(cctx)
		ccancel()
	}
	if problems > 0 {
		return fmt.Errorf("%d problem(s) found", problems)
	}
	return nil
}
