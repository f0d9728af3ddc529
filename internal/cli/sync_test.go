package cli

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/migrations"
)

// TestSync documents `erpsync sync`.
func TestSync(t *testing.T) {
	t.Parallel()
	// A full sync with debug logging in both log formats: neither the password nor any
	// token the simulator issued shows up in the output or the database.
	t.Run("KeepsThePasswordAndTokensOutOfItsLogAndTheWarehouse", func(t *testing.T) {
		t.Parallel()
		for _, format := range []string{"text", "json"} {
			t.Run(format, func(t *testing.T) {
				t.Parallel()
				sim, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 120, PageSizeCap: 50})
				dbURL := testdb.New(t)
				env := erpEnv(simURL, dbURL, goodPassword, "ERPSYNC_LOG_FORMAT="+format, "ERPSYNC_LOG_LEVEL=debug", "ERPSYNC_ERP_PAGE_SIZE=50")
				r := runMain(t, env, "sync")
				if r.code != exitOK {
					t.Fatalf("sync: exit %d, want 0\n%s", r.code, r)
				}
				// Debug logging really was on, or the test proves little.
				debugMark := map[string]string{"text": "DBG", "json": `"level":"DEBUG"`}[format]
				if !strings.Contains(r.stderr, debugMark) {
					t.Errorf("no debug line (%s) in the log\n%s", debugMark, r)
				}
				if format == "json" {
					for i, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
						if line != "" && !json.Valid([]byte(line)) {
							t.Errorf("stderr line %d is not JSON: %s", i+1, line)
						}
					}
				}
				tokens := issuedTokens(sim)
				if len(tokens) == 0 {
					t.Fatalf("the simulator saw no bearer token; requests: %d", len(sim.Requests()))
				}
				if sim.Revocations() == 0 {
					t.Errorf("the token was not revoked at the end of the sync")
				}
				assertNoSecret(t, r, append([]string{goodPassword}, tokens...)...)
				assertNotInDatabase(t, dbURL, append([]string{goodPassword}, tokens...)...)

				// Something was actually synced.
				var n int64
				conn, err := pgx.Connect(context.Background(), dbURL)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(context.Background())
				if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM erp.invoices`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 120 {
					t.Errorf("erp.invoices has %d rows, want 120", n)
				}
			})
		}
	})

	// ERPSYNC_HISTORY=none still parses, and no longer keeps a stream from
	// keeping versions: Postgres writes them, and the run says so once.
	t.Run("KeepsVersionsUnderHistoryNoneAndSaysSoOnce", func(t *testing.T) {
		t.Parallel()
		sim, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 30})
		dbURL := testdb.New(t)
		env := erpEnv(simURL, dbURL, goodPassword, "ERPSYNC_HISTORY=none", "ERPSYNC_STREAMS=invoices,cashboxes")
		if r := runMain(t, env, "sync", "invoices"); r.code != exitOK {
			t.Fatalf("sync: %s", r)
		}
		sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			inv[0].TotalBC = inv[0].TotalBC.Add(decimal.New(1, 0))
			return inv
		})
		r := runMain(t, env, "sync", "invoices")
		if r.code != exitOK {
			t.Fatalf("sync: %s", r)
		}
		if n := strings.Count(r.stderr, "no longer turns a stream's history off"); n != 1 {
			t.Errorf("the run said %d times that history is kept all the same, want once:\n%s", n, r)
		}
		pool := testdb.ObserverPool(t, dbURL)
		var versions int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM erp.invoices_history`).Scan(&versions); err != nil || versions != 1 {
			t.Errorf("%d versions (%v), want the changed invoice's", versions, err)
		}
	})

	// With --follow (--window) it runs a follow (window) run of a list that
	// can be followed, and refuses, naming it, a stream that cannot.
	t.Run("FollowsOnlyAStreamThatCanBeFollowed", func(t *testing.T) {
		t.Parallel()
		_, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 75, PageSizeCap: 50})
		env := erpEnv(simURL, testdb.New(t), goodPassword, "ERPSYNC_ERP_PAGE_SIZE=50")
		if r := runMain(t, env, "sync", "invoices"); r.code != exitOK {
			t.Fatalf("sync: %s", r)
		}
		for _, kind := range []string{"follow", "window"} {
			if r := runMain(t, env, "sync", "--"+kind, "cashboxes"); r.code != exitUsage || !strings.Contains(r.stderr, "cashboxes is read whole on every run") {
				t.Errorf("sync --%s cashboxes: want exit 2 naming cashboxes: %s", kind, r)
			}
			if r := runMain(t, env, "sync", "--"+kind, "invoices"); r.code != exitOK || !strings.Contains(r.stderr, "kind="+kind) {
				t.Errorf("sync --%s invoices: want exit 0 and a %s run in the log: %s", kind, kind, r)
			}
		}
		if r := runMain(t, env, "sync", "--follow", "--window", "invoices"); r.code != exitUsage {
			t.Errorf("sync --follow --window: want exit 2: %s", r)
		}
	})

	// An installation that stopped sending the date of every invoice, with
	// drift: record: the sync succeeds and exits 0, its summary line at WARN
	// says what drifted and how often, status shows it in WARNING, and sync
	// --strict counts the run as failed (exit 1). A stream whose records only
	// carry fields it does not expect (the simulator's currencies) is no
	// warning, --strict or not.
	t.Run("HearsDriftAndFailsItUnderStrict", func(t *testing.T) {
		t.Parallel()
		sim, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 1000})
		sim.SetFieldDrift("/sales/api/invoices/list/", nil, []string{"date"})
		dbURL := testdb.New(t)
		cfg := filepath.Join(t.TempDir(), "erpsync.yaml")
		yaml := "sources:\n  - streams:\n      invoices: { drift: record }\n      currencies: {}\n"
		if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		env := erpEnv(simURL, dbURL, goodPassword)
		r := runMain(t, env, "sync", "--config", cfg, "invoices")
		drift := "drift: date missing in 1000 records, date unreadable in 1000 records (invoice_date is NULL: the field is absent); see erp.schema_drift"
		if r.code != exitOK || !regexp.MustCompile(`WRN sync finished source=default stream=invoices .*warnings="`+regexp.QuoteMeta(drift)).MatchString(r.stderr) {
			t.Errorf("sync of dateless invoices: want exit 0 and the summary line at WARN saying %q\n%s", drift, r)
		}
		if got := statusField(t, dbURL, "warning")["invoices"]; !strings.Contains(got, "drift: date missing; drift: date unreadable") {
			t.Errorf("status warning of invoices %q, want the drift", got)
		}
		r = runMain(t, env, "sync", "--config", cfg, "--strict", "invoices", "currencies")
		if r.code != exitFailed || !strings.Contains(r.stderr, "erpsync sync: 1 stream run(s) warned (--strict counts them as failed)") {
			t.Errorf("sync --strict of dateless invoices and currencies: want exit 1 for the invoices run alone\n%s", r)
		}
		if r := runMain(t, env, "sync", "--config", cfg, "--strict", "currencies"); r.code != exitOK || strings.Contains(r.stderr, "WRN") {
			t.Errorf("sync --strict of currencies, which carry fields the stream does not expect: want exit 0, no warning\n%s", r)
		}
	})

	// A stream whose lock another session holds is skipped while the others
	// run, and the command exits 75 naming the holder: its pid, role and
	// application, and whether it is an erpsync process, judged by its role
	// (this one calls itself erpsync). A run that fails as well makes it
	// exit 1.
	t.Run("ExitsSeventyFiveNamingTheSessionThatHoldsAStreamsLock", func(t *testing.T) {
		t.Parallel()
		_, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 30})
		dbURL := testdb.New(t)
		alice, pid := holdLock(t, dbURL, "currencies")
		r := runMain(t, erpEnv(simURL, dbURL, goodPassword), "sync", "currencies", "cashboxes")
		if r.code != exitBusy {
			t.Fatalf("sync: exit %d, want %d\n%s", r.code, exitBusy, r)
		}
		for _, want := range []string{
			regexp.QuoteMeta("default/currencies: skipped: another session holds the stream's lock: ") + heldBy(pid, alice),
			regexp.QuoteMeta("erpsync sync: 1 stream(s) skipped (another session holds the stream's lock, named above); try again once it lets go"),
		} {
			if !regexp.MustCompile(want).MatchString(r.stderr) {
				t.Errorf("stderr does not match %s\n%s", want, r)
			}
		}
		var cashboxes int64
		if err := testdb.ObserverPool(t, dbURL).QueryRow(context.Background(), `SELECT count(*) FROM erp.cashboxes`).Scan(&cashboxes); err != nil || cashboxes == 0 {
			t.Errorf("cashboxes: %d rows (%v), want the stream run beside the skipped one", cashboxes, err)
		}
		if r := runMain(t, erpEnv(simURL, dbURL, wrongPassword), "sync", "currencies", "cashboxes"); r.code != exitFailed {
			t.Errorf("sync with a stream skipped and one failed: exit %d, want %d\n%s", r.code, exitFailed, r)
		}
	})
}

// TestMigrate documents `erpsync migrate`.
func TestMigrate(t *testing.T) {
	t.Parallel()
	// Applied to a brand-new empty database, then again: both exit 0 and the second
	// applies nothing. Before, every command that reads the schema says it is not
	// there yet.
	t.Run("AppliesEveryMigrationOnceAndNothingTheSecondTime", func(t *testing.T) {
		t.Parallel()
		dbURL := testdb.Empty(t)
		sqlFiles, err := fs.Glob(migrations.FS, "*.sql")
		if err != nil || len(sqlFiles) == 0 {
			t.Fatalf("no embedded migrations (%v)", err)
		}
		env := environ("ERPSYNC_DATABASE_URL="+dbURL, "ERPSYNC_LOG_FORMAT=json")
		// Before migrating: every command that reads the schema says so, as
		// a configuration problem (exit 2), not a Postgres error.
		for _, args := range [][]string{{"status"}, {"status", "--json"}} {
			r := runMain(t, env, args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, "the schema is not there yet: run `erpsync migrate`") || strings.Contains(r.stderr, "42P01") {
				t.Errorf("erpsync %s on a database never migrated: want exit 2 and a hint to migrate\n%s", strings.Join(args, " "), r)
			}
		}
		r := runMain(t, environ("ERPSYNC_DATABASE_URL="+dbURL, "ERPSYNC_AUTO_MIGRATE=false", "ERPSYNC_ERP_BASE_URL=http://127.0.0.1:1",
			"ERPSYNC_ERP_USERNAME=u", "ERPSYNC_ERP_PASSWORD=p"), "sync")
		if r.code != exitUsage || !strings.Contains(r.stderr, "run `erpsync migrate`") {
			t.Errorf("sync with auto-migrate off on a database never migrated: want exit 2 and a hint\n%s", r)
		}
		applied := regexp.MustCompile(`migrations applied: (\d+)`)
		for i, want := range []int{len(sqlFiles) + len(migrations.Go), 0} {
			r := runMain(t, env, "migrate")
			if r.code != exitOK {
				t.Fatalf("migrate #%d: exit %d\n%s", i+1, r.code, r)
			}
			m := applied.FindStringSubmatch(r.stdout)
			if m == nil {
				t.Fatalf("migrate #%d: no 'migrations applied' line\n%s", i+1, r)
			}
			if n, _ := strconv.Atoi(m[1]); n != want {
				t.Errorf("migrate #%d: applied %d, want %d\n%s", i+1, n, want, r)
			}
		}
		// The schema is there, and DATABASE_URL alone is accepted too.
		r = runMain(t, environ("DATABASE_URL="+dbURL), "status", "--json")
		if r.code != exitOK || strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("status on the migrated database: want exit 0 and [], got\n%s", r)
		}
	})
}
