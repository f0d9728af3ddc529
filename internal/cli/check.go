package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/config"
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
	cfg, err := e.readConfig(*cfgFile, true)
	for _, w := range cfg.Warnings {
		fmt.Fprintf(e.stdout, "warn  configuration: %s\n", w)
	}
	if err != nil {
		return err
	}
	if err := cfg.RequireDatabase(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "ok    configuration: %d source(s)\n", len(cfg.Sources))
	log := newLogger(cfg, e.term)
	ctx, cancel := e.signalContext()
	defer cancel()
	problems := 0
	fail := func(what string, err error) {
		problems++
		fmt.Fprintf(e.stdout, "FAIL  %s: %v\n", what, err)
	}

	var schemaErr error // a schema the run cannot use: exit 2, as the other commands
	if pool, err := openPool(ctx, cfg, 1); err != nil {
		fail("database", err)
	} else {
		switch cur, target, err := db.SchemaVersions(ctx, pool); {
		case err != nil:
			if isSchemaError(err) { // a missing grant: exit 2, as the other commands
				schemaErr = err
			}
			fail("database schema", err)
		case cur == target:
			fmt.Fprintf(e.stdout, "ok    database: schema at version %d\n", cur)
		case cur < target && cfg.AutoMigrate:
			if role, err := checkMigrator(ctx, cfg, pool); err != nil {
				schemaErr = err
				fail("database", err)
			} else {
				fmt.Fprintf(e.stdout, "ok    database: schema at version %d, this binary needs %d: `erpsync run` or `erpsync sync` will migrate it (as role %s)\n", cur, target, role)
			}
		default:
			schemaErr = &db.SchemaError{Current: cur, Target: target}
			fail("database", schemaErr)
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
		return &problemsError{n: problems, setup: schemaErr}
	}
	return nil
}

// checkMigrator asks, without migrating, whether the role that `erpsync
// run` migrates as (ERPSYNC_MIGRATE_DATABASE_URL's, else pool's) may
// bring the schema up to date, and returns its name.
func checkMigrator(ctx context.Context, cfg config.Config, pool *pgxpool.Pool) (string, error) {
	migrator := pool
	if cfg.MigrateDatabaseURL != "" {
		owner, err := db.Open(ctx, cfg.MigrateDatabaseURL.Value(), db.WithMaxConns(1), dbLimits(cfg))
		if err != nil {
			return "", fmt.Errorf("migration database: %w", err)
		}
		defer owner.Close()
		migrator = owner
	}
	if err := db.CheckMigrate(ctx, migrator); err != nil {
		return "", err
	}
	return db.CurrentRole(ctx, migrator)
}

// problemsError is check's verdict. It unwraps to a set-up problem found
// among them (a schema to migrate), so that check exits 2 as the command
// that would meet it does.
type problemsError struct {
	n     int
	setup error
}

func (p *problemsError) Error() string { return fmt.Sprintf("%d problem(s) found", p.n) }
func (p *problemsError) Unwrap() error { return p.setup }
