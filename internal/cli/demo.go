package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
)

// demoAdminURL is the local Postgres the demo creates its database on
// when ERPSYNC_DATABASE_URL is not set.
const demoAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func cmdDemo(e *command) error {
	fs, cfgFile := e.flags("demo")
	invoices := fs.Int("invoices", 5000, "invoices in the simulated ERP")
	if err := e.parse(fs); err != nil {
		return err
	}
	if *invoices < 1 {
		return usageErrorf("--invoices must be at least 1")
	}
	cfg, err := e.loadConfig(*cfgFile, false)
	if err != nil {
		return err
	}
	log := newLogger(cfg, e.term)
	stopper, done, err := e.startForeground(cfg, log)
	if err != nil {
		return err
	}
	defer done()
	ctx, stop := stopper.Context(), stopper.Draining()

	defaulted := cfg.DatabaseURL == ""
	if defaulted {
		u, err := demoDatabaseURL(e.getenv(config.DemoAdminURLVariable))
		if err != nil {
			return err
		}
		cfg.DatabaseURL = config.Secret(u)
	}
	switch name, created, err := createDatabase(ctx, cfg.DatabaseURL.Value()); {
	case err != nil && defaulted:
		return fmt.Errorf("no ERPSYNC_DATABASE_URL, so the demo uses %s: %w", db.RedactURL(cfg.DatabaseURL.Value()), err)
	case err != nil:
		return err
	case created:
		fmt.Fprintf(e.stdout, "erpsync demo: created the database %s\n", name)
	}

	sim := erpsim.New(erpsim.Options{Invoices: *invoices, PageSizeCap: 500})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("simulator: %w", err)
	}
	simCtx, simStop := context.WithCancel(context.WithoutCancel(ctx))
	simDone := make(chan error, 1)
	go func() { simDone <- sim.Serve(simCtx, ln) }()
	defer func() { simStop(); <-simDone }()

	cfg.Sources = []config.Source{{
		Name: "demo", BaseURL: "http://" + ln.Addr().String(),
		Logins:   []config.Login{{Auth: "token", Username: "erpsync", Password: "erpsync-demo-password"}},
		PageSize: 500, Timeout: 30 * time.Second, MaxConcurrentRequests: config.DefaultMaxConcurrentRequests,
		Streams: e.coreStreams(),
	}}
	runner, pools, err := openRunner(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer pools.Close()
	pool := pools.Service
	runner.Prefetch = 1

	fmt.Fprintf(e.stdout, "erpsync demo: simulated ERP at %s with %d invoices\n\n", cfg.Sources[0].BaseURL, *invoices)
	// Each demo serves an ERP of its own under the one source "demo": what
	// an earlier demo left in this database and this ERP lacks is gone
	// from it, however much that is, so the first sync confirms the
	// deletions the guard would hold (a demo of 5,000 invoices, then one
	// of 100, would otherwise keep 4,900 live).
	earlier, err := db.LastRuns(ctx, pool, "demo")
	if err != nil {
		return err
	}
	if len(earlier) > 0 {
		fmt.Fprintln(e.stdout, "this database holds an earlier demo: the first sync marks deleted what it left that this ERP lacks (as `erpsync sync --confirm-deletions` would)")
	}
	fmt.Fprintln(e.stdout, "first sync:")
	runner.ConfirmDeletions = true
	err = e.syncOnce(ctx, stop, runner, syncMode{kind: model.KindSweep}, cfg, nil)
	runner.ConfirmDeletions = false
	if err != nil {
		return err
	}
	if err := printDemoTables(ctx, e, pool); err != nil {
		return err
	}

	// What a real ERP does between two syncs: an invoice changes (to a
	// value no float64 can hold), one is cancelled away, one is new, and
	// a rate moves.
	var changed, removed string
	sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
		inv[0].TotalBC = decimal.RequireFromString("123456789012345678.123456")
		changed = fmt.Sprint(inv[0].ID)
		removed = fmt.Sprint(inv[len(inv)-1].ID)
		next := inv[len(inv)-1]
		next.ID += 1000000
		next.Number += "-N"
		return append(inv[:len(inv)-1], next)
	})
	sim.SetCurrencyRate("EUR", "0.925000")
	fmt.Fprintf(e.stdout, "\nthe ERP changed: invoice %s now totals 123456789012345678.123456, invoice %s is gone, one is new, EUR moved to 0.925000\n", changed, removed)
	fmt.Fprintln(e.stdout, "second sync:")
	if err := e.syncOnce(ctx, stop, runner, syncMode{kind: model.KindSweep}, cfg, nil); err != nil {
		return err
	}
	if err := printDemoTables(ctx, e, pool); err != nil {
		return err
	}

	warehouse, err := db.LiveTotal(ctx, pool, "erp.invoices", "total_bc", "demo")
	if err != nil {
		return err
	}
	want := sim.InvoiceTotal()
	match := "equal, digit for digit"
	if !decimal.RequireFromString(warehouse).Equal(want) {
		match = "DIFFERENT"
	}
	fmt.Fprintf(e.stdout, "\nsum(total_bc) in the warehouse: %s\nsum in the simulated ERP:       %s  (%s)\n", warehouse, want.String(), match)
	if match != "equal, digit for digit" {
		return errors.New("warehouse total differs from the ERP's")
	}

	psql := "psql " + shellQuote(db.RedactURL(cfg.DatabaseURL.Value()))
	fmt.Fprintf(e.stdout, `
Now query the warehouse:
  %[1]s -c "SELECT id, number, total_bc, synced_at FROM erp.invoices_current ORDER BY synced_at DESC LIMIT 5"
  %[1]s -c "SELECT sum(total_bc) FROM erp.invoices_current"
  %[1]s -c "SELECT code, rate, valid_from, valid_to FROM erp.currency_rates ORDER BY code, valid_from"
  %[1]s -c "SELECT id, total_bc, valid_from, valid_to, ended_by FROM erp.invoices_history"
  %[1]s -c "SELECT sum(total_bc) FROM erp.invoices_as_of((SELECT min(finished_at) FROM erp.sync_runs WHERE stream = 'invoices'))"
  %[1]s -c "SELECT stream, status, pages, rows_seen, rows_inserted, rows_updated, rows_unchanged, rows_deleted FROM erp.sync_runs ORDER BY id"
  %[1]s -c "SELECT stream, field, change, detail, count FROM erp.schema_drift"
  %[1]s -c "SELECT source, stream, age, last_run_status FROM erp.stream_freshness"
  ERPSYNC_DATABASE_URL=%[2]s erpsync status
`, psql, shellQuote(db.RedactURL(cfg.DatabaseURL.Value())))
	return nil
}

func printDemoTables(ctx context.Context, e *command, pool *pgxpool.Pool) error {
	runs, err := db.LastRuns(ctx, pool, "demo")
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "  %-25s %6s %8s %9s %8s %10s %9s %8s\n", "stream", "pages", "rows", "inserted", "updated", "unchanged", "rejected", "deleted")
	for _, l := range runs {
		fmt.Fprintf(e.stdout, "  %-25s %6d %8d %9d %8d %10d %9d %8d\n", l.Stream, l.Pages, l.Seen, l.Inserted, l.Updated, l.Unchanged, l.Rejected, l.Gone)
	}
	return nil
}

// demoDatabaseURL is erpsync_demo on the server of admin (default: the
// local Postgres), for a demo that was given no ERPSYNC_DATABASE_URL.
func demoDatabaseURL(admin string) (string, error) {
	if admin == "" {
		admin = demoAdminURL
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", fmt.Errorf("ERPSYNC_DEMO_ADMIN_URL: not a URL")
	}
	u.Path = "/erpsync_demo"
	return u.String(), nil
}

// createDatabase creates the database dbURL names if it does not exist,
// with dbURL's login, from the server's maintenance database; it returns
// the database's name and whether it created it.
func createDatabase(ctx context.Context, dbURL string) (name string, created bool, err error) {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return "", false, db.ErrBadURL
	}
	name = cfg.Database
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return name, false, conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name: it does not exist
		return name, false, fmt.Errorf("database %s: %w", name, db.Describe(err))
	}
	var admin *pgx.Conn
	for _, maintenance := range []string{"postgres", "template1"} {
		mcfg := cfg.Copy()
		mcfg.Database = maintenance
		if admin, err = pgx.ConnectConfig(ctx, mcfg); err == nil {
			break
		}
	}
	if err != nil {
		return name, false, fmt.Errorf("database %s does not exist, and the server's maintenance database is not reachable to create it: %w", name, db.Describe(err))
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: made meanwhile
			return name, false, nil
		}
		return name, false, fmt.Errorf("database %s does not exist, and role %s may not create it (%w): create it, or name one that exists", name, cfg.User, db.Describe(err))
	}
	return name, true, nil
}

// coreStreams are the catalog's core streams with their defaults.
func (e *command) coreStreams() []config.StreamConfig {
	var out []config.StreamConfig
	for _, sp := range StreamSpecs(e.catalog) {
		if sp.Core {
			out = append(out, config.StreamConfig{Name: sp.Name, Schedule: sp.Schedule})
		}
	}
	return out
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
