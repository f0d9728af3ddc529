package sync_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/migrations"
)

// releaseBefore is the schema version of the release before logins,
// typed columns and the access rules.
const releaseBefore = 9

// legacyWarehouse is a warehouse as the release before wrote it: the
// schema at releaseBefore, invoices of sim (and a previous version of
// one) labelled with the token's company 1 and branch 1, the stream's
// checkpoint, and a role scoped with that release's erp.grant_company
// (which made it a member of erpsync_analyst). It returns the pool and
// the scoped role.
func legacyWarehouse(t *testing.T, sim *erpsim.Sim, user erpsim.User) (*pgxpool.Pool, string, string) {
	t.Helper()
	ctx := context.Background()
	url := testdb.Empty(t)
	pool, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	migrateUpTo(t, pool, releaseBefore)
	writeInvoicesAsBefore(t, pool, sim, user, 100, "", 1)
	if _, err := pool.Exec(ctx, `
INSERT INTO erp.invoices_history (source, id, company_id, branch_id, total_bc, payload, payload_hash, first_seen_at, valid_from, valid_to, ended_by)
SELECT source, id, company_id, branch_id, total_bc - 1, payload, '\x00', first_seen_at, first_seen_at, synced_at, 'change'
FROM erp.invoices ORDER BY id LIMIT 1;
INSERT INTO erp.sync_checkpoints (source, stream, last_sweep_id, last_sweep_completed_at) VALUES ('main', 'invoices', 1, now() - interval '1 day');
INSERT INTO erp.sync_runs (source, stream, status, started_at, finished_at, sweep_id)
VALUES ('main', 'invoices', 'succeeded', now() - interval '1 day', now() - interval '1 day', 1)`); err != nil {
		t.Fatal(err)
	}
	scoped := testdb.Role(t)
	if _, err := pool.Exec(ctx, `SELECT erp.grant_company($1::text::regrole, 'main', '1')`, scoped); err != nil {
		t.Fatal(err)
	}
	return pool, url, scoped
}

// writeInvoicesAsBefore writes every invoice sim lists to user, read in
// pages of pageSize, as a release before wrote them: labelled company 1
// branch 1, listed by listedBy ("" for a schema before logins), written
// days ago and first seen the day before. It returns the cursor after the
// first page and that page's ids.
func writeInvoicesAsBefore(t *testing.T, pool *pgxpool.Pool, sim *erpsim.Sim, user erpsim.User, pageSize int, listedBy string, days int) (string, []string) {
	t.Helper()
	ctx := context.Background()
	srv := httptest.NewServer(sim)
	defer srv.Close()
	c, err := erp.New(erp.Options{BaseURL: srv.URL, Username: user.Username, Password: user.Password})
	if err != nil {
		t.Fatal(err)
	}
	insert := `INSERT INTO erp.invoices (source, id, company_id, branch_id, total_bc, payload, payload_hash, first_seen_at, synced_at)
		VALUES ('main', $1, '1', '1', $2, $3, $4, now() - make_interval(days => $5 + 1), now() - make_interval(days => $5))`
	if listedBy != "" {
		insert = `INSERT INTO erp.invoices (source, id, company_id, branch_id, total_bc, payload, payload_hash, first_seen_at, synced_at, listed_by)
		VALUES ('main', $1, '1', '1', $2, $3, $4, now() - make_interval(days => $5 + 1), now() - make_interval(days => $5), $6)`
	}
	var cursor string
	var firstPage []string
	pages := c.List(erp.ListRequest{Path: "/sales/api/invoices/list/", Paging: erp.CursorPaged, PageSize: pageSize})
	for n := 0; !pages.Done(); n++ {
		page, err := pages.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, raw := range page.Records {
			id, _, _ := page.Parsed[i].Text("id")
			total, _, _ := page.Parsed[i].Money("total_bc")
			h := sha256.Sum256(raw)
			args := []any{id, db.Numeric(total), []byte(raw), h[:], days}
			if listedBy != "" {
				args = append(args, listedBy)
			}
			if _, err := pool.Exec(ctx, insert, args...); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				firstPage = append(firstPage, id)
			}
		}
		if n == 0 {
			cursor = page.NextCursor
		}
		page.Release()
	}
	// A release with typed columns wrote them as it read them.
	var typed bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('erp.invoices') IS NOT NULL AND EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = 'erp.invoices'::regclass AND attname = 'invoice_date')`).Scan(&typed); err != nil {
		t.Fatal(err)
	}
	if typed {
		// (Written with the rows: no trigger sees it.)
		if _, err := pool.Exec(ctx, `BEGIN; SET LOCAL session_replication_role = replica;
			UPDATE erp.invoices SET `+migrations.TypedColumns["invoices"]+`; COMMIT`); err != nil {
			t.Fatal(err)
		}
	}
	return cursor, firstPage
}

// versionOfBefore writes a version of invoice $1 as a release before
// kept it: its total one less, current from when it was first seen until
// the row's synced_at.
const versionOfBefore = `INSERT INTO erp.invoices_history (source, id, company_id, branch_id, total_bc, payload, payload_hash, listed_by,
	first_seen_at, valid_from, valid_to, ended_by)
SELECT source, id, company_id, branch_id, total_bc - 1, payload, payload_hash, listed_by, first_seen_at, first_seen_at, synced_at, 'change'
FROM erp.invoices WHERE id = $1`

// migrateUpTo applies the migrations up to version, as pool's role.
func migrateUpTo(t *testing.T, pool *pgxpool.Pool, version int64) {
	t.Helper()
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.FS, goose.WithGoMigrations(migrations.Go...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(context.Background(), version); err != nil {
		t.Fatal(err)
	}
}

// migrateUp applies the migrations after releaseBefore.
func migrateUp(t *testing.T, pool *pgxpool.Pool) error {
	t.Helper()
	_, err := db.Migrate(context.Background(), pool, nil)
	return err
}

// TestUpgrade documents the upgrade of a warehouse an earlier release wrote:
// migrated in place, its sweep resumed, and refused by a binary older than
// its schema.
func TestUpgrade(t *testing.T) {
	t.Parallel()

	t.Run("AppliesInPlaceToAWarehouseOfTheReleaseBefore", func(t *testing.T) {
		// A warehouse written by the release before upgrades in place. The typed
		// columns of existing rows, history rows included, are filled as a sync
		// fills them; no label changes and no version is written by the upgrade
		// or the first sync after it, until a record's own labels say otherwise
		// (which relabels without a version); the checkpoint goes to the
		// source's login; a role scoped before is no analyst any more and sees
		// its company only; and the views answer as on a fresh load.
		sim := erpsim.New(erpsim.Options{Invoices: 300, Users: branchUsers, RecordLabels: erpsim.LabelsNone})
		pool, url, scoped := legacyWarehouse(t, sim, branchUsers[0])
		ctx := context.Background()
		if err := migrateUp(t, pool); err != nil {
			t.Fatalf("upgrading: %v", err)
		}
		q := func(sql string, args ...any) string {
			t.Helper()
			var s *string
			if err := pool.QueryRow(ctx, sql, args...).Scan(&s); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			if s == nil {
				return "<null>"
			}
			return *s
		}
		typedDiffer := `SELECT count(*)::text FROM %s WHERE NOT (
		invoice_date::text IS NOT DISTINCT FROM payload->>'date' AND number IS NOT DISTINCT FROM payload->>'number'
		AND status IS NOT DISTINCT FROM payload->>'status' AND currency_code IS NOT DISTINCT FROM payload->>'currency_code'
		AND customer_id IS NOT DISTINCT FROM payload->'customer'->>'id' AND customer_name IS NOT DISTINCT FROM payload->'customer'->>'name')`
		for _, table := range []string{"erp.invoices", "erp.invoices_history"} {
			if n := q(fmt.Sprintf(typedDiffer, table)); n != "0" {
				t.Errorf("%s: %s rows whose typed columns are not their payload's after the upgrade", table, n)
			}
		}
		if n := q(`SELECT count(*)::text FROM erp.invoices_history`); n != "1" {
			t.Errorf("%s versions after the upgrade, want the one from before", n)
		}
		// The role scoped by the release before.
		if q(`SELECT pg_has_role($1, 'erpsync_analyst', 'MEMBER')::text`, scoped) != "false" || q(`SELECT pg_has_role($1, 'erpsync_scoped', 'MEMBER')::text`, scoped) != "true" {
			t.Errorf("%s is still an analyst, or not scoped, after the upgrade", scoped)
		}

		// The first sync after the upgrade, through the Riyadh login (whose
		// context, company 1 branch 1, the rows carry), the records carrying
		// no labels: nothing written, nothing relabelled, no version.
		runner := &sync.Runner{Pool: pool, Prefetch: 1}
		tgt := twoLogins(t, sim)
		tgt.Source, tgt.Logins = "main", tgt.Logins[:1]
		before := q(`SELECT string_agg(id || company_id || branch_id || synced_at::text, ',' ORDER BY id) FROM erp.invoices`)
		res := syncLogins(t, runner, tgt, "invoices")[0]
		if res.Stats.Inserted+res.Stats.Updated+res.Stats.Deleted != 0 {
			t.Errorf("the first sync after the upgrade wrote %+v", res.Stats)
		}
		if after := q(`SELECT string_agg(id || company_id || branch_id || synced_at::text, ',' ORDER BY id) FROM erp.invoices`); after != before {
			t.Error("the first sync after the upgrade changed labels or rows")
		}
		if got := q(`SELECT string_agg(login, ',') FROM erp.sync_checkpoints WHERE stream = 'invoices'`); got != "sync-riyadh" {
			t.Errorf("checkpoints of invoices: %s, want the one from before claimed by sync-riyadh", got)
		}
		// Status speaks of the login only: the run from before logins is no
		// line of its own (it would be one never fresh).
		st, err := db.LoadStatus(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, s := range st {
			lines = append(lines, s.Stream+"/"+s.Login+"/"+string(s.LastRunStatus))
		}
		if got := strings.Join(lines, ","); got != "invoices/sync-riyadh/succeeded" {
			t.Errorf("status after the first sync = %s, want one line, of sync-riyadh", got)
		}

		// The records now carry their own branch (their payloads change, so
		// this is a change at the ERP): rows of branch 2 take it.
		sim.SetRecordLabels(erpsim.LabelsIDs)
		syncLogins(t, runner, tgt, "invoices")
		var branch2 int
		for _, inv := range sim.Invoices() {
			if inv.BranchID == 2 {
				branch2++
			}
		}
		if n := q(`SELECT count(*)::text FROM erp.invoices WHERE branch_id = '2'`); n != fmt.Sprint(branch2) || branch2 == 0 {
			t.Errorf("%s rows relabelled to branch 2, want %d", n, branch2)
		}

		// The views answer as on a fresh load of the same ERP.
		fresh, _ := testdb.Pool(t)
		freshRunner := &sync.Runner{Pool: fresh, Prefetch: 1}
		syncLogins(t, freshRunner, tgt, "invoices")
		revenue := `SELECT string_agg(m || ' ' || c || ' ' || s, '; ' ORDER BY m, c) FROM (
		SELECT date_trunc('month', invoice_date)::date::text AS m, currency_code AS c, sum(total_bc)::text AS s
		FROM erp.invoices_current WHERE source = 'main' AND status NOT IN ('draft', 'cancelled') GROUP BY 1, 2) x`
		var upgraded, loaded string
		if err := pool.QueryRow(ctx, revenue).Scan(&upgraded); err != nil {
			t.Fatal(err)
		}
		if err := fresh.QueryRow(ctx, revenue).Scan(&loaded); err != nil {
			t.Fatal(err)
		}
		if upgraded != loaded || upgraded == "" {
			t.Errorf("revenue per month after the upgrade:\n%s\nafter a fresh load:\n%s", upgraded, loaded)
		}
		sums := invoiceSumsAs(t, testdb.PoolAs(t, url, scoped), "", "erp.invoices_current")
		if len(sums) != 1 {
			t.Errorf("the role scoped before sees %v, want company 1 of main only", sums)
		}
	})

	t.Run("RelabelsARowKeepingAVersion", func(t *testing.T) {
		// A record whose payload is unchanged but whose own labels differ from
		// the row's (written before its labels were read) is relabelled: the row
		// as it was is kept as a version, and synced_at moves (so a later change
		// has a version of its own, not one on the same key). The next sweep
		// that compares it writes nothing.
		h := newHarness(t, erpsim.Options{Invoices: 60, Users: branchUsers, RecordLabels: erpsim.LabelsIDs})
		h.client = h.newClient(erp.Options{Username: "sync-riyadh", Password: "riyadh-pw"})
		h.mustRun("invoices")
		// As the release before would have it: every row with the token's
		// labels (written as it wrote them, not as a change of today).
		if _, err := h.pool.Exec(context.Background(), `ALTER TABLE erp.invoices DISABLE TRIGGER guard_rows;
		UPDATE erp.invoices SET branch_id = '1', listed_by = NULL, first_listed_by = NULL; ALTER TABLE erp.invoices ENABLE TRIGGER guard_rows`); err != nil {
			t.Fatal(err)
		}
		before := h.text(`SELECT string_agg(id || synced_at::text, ',' ORDER BY id) FROM erp.invoices`)
		h.pool.Exec(context.Background(), `DELETE FROM erp.sweep_pages`) // compare every page
		res := h.mustRun("invoices")
		relabelled := h.count(`SELECT count(*) FROM erp.invoices WHERE branch_id = '2'`)
		if relabelled == 0 || res.Stats.Updated != relabelled {
			t.Errorf("%d rows relabelled to branch 2, %d updated", relabelled, res.Stats.Updated)
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices_history WHERE branch_id = '1' AND ended_by = 'change'`); n != relabelled {
			t.Errorf("relabelling kept %d versions, want %d", n, relabelled)
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices i WHERE branch_id = '2' AND synced_at <= (SELECT max(first_seen_at) FROM erp.invoices)`); n != 0 {
			t.Errorf("relabelling left synced_at of %d rows where it was (%s)", n, before[:40])
		}
		h.pool.Exec(context.Background(), `DELETE FROM erp.sweep_pages`)
		if res := h.mustRun("invoices"); res.Stats.Updated+res.Stats.Inserted != 0 {
			t.Errorf("the sweep after the relabelling wrote %+v", res.Stats)
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices_history`); n != relabelled {
			t.Errorf("%d versions after the next sweep, want %d", n, relabelled)
		}
	})

	t.Run("StopsAtAnAnalystsView", func(t *testing.T) {
		// The upgrade replaces erp.invoices_current (its invoice_date becomes a
		// date); an analyst's own view on it makes the migration fail, naming
		// the view, rather than drop it.
		pool, _, _ := legacyWarehouse(t, erpsim.New(erpsim.Options{Invoices: 10}), erpsim.User{Username: "erpsync", Password: "erpsync-demo-password"})
		ctx := context.Background()
		if _, err := pool.Exec(ctx, `CREATE VIEW public.my_revenue AS SELECT source, sum(total_bc) FROM erp.invoices_current GROUP BY 1`); err != nil {
			t.Fatal(err)
		}
		err := migrateUp(t, pool)
		if err == nil || !strings.Contains(err.Error(), "view my_revenue") || !strings.Contains(err.Error(), "erp.invoices_current") {
			t.Fatalf("upgrading with an analyst's view on erp.invoices_current: %v; want a failure naming the view", err)
		}
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass('public.my_revenue') IS NOT NULL`).Scan(&exists); err != nil || !exists {
			t.Errorf("the analyst's view is gone (%v)", err)
		}
		if _, err := pool.Exec(ctx, `DROP VIEW public.my_revenue`); err != nil {
			t.Fatal(err)
		}
		if err := migrateUp(t, pool); err != nil {
			t.Errorf("upgrading once the view is dropped: %v", err)
		}
	})

	t.Run("IsRefusedByAnOlderBinaryUntilTheSchemaIsOneItKnows", func(t *testing.T) {
		// During a rolling upgrade a replica of the release before meets a
		// schema migrated past what it knows. Its runs fail before writing
		// anything, saying why; once the schema is one it knows again, it
		// writes.
		h := newHarness(t, erpsim.Options{Invoices: 60})
		h.mustRun("invoices")
		current, target, err := db.SchemaVersions(context.Background(), h.pool)
		if err != nil || current != target {
			t.Fatalf("schema %d, binary %d, %v", current, target, err)
		}
		h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			inv[3].Status = "void"
			return inv
		})
		before := h.text(`SELECT string_agg(payload_hash::text, ',' ORDER BY id) FROM erp.invoices`)
		if _, err := h.pool.Exec(context.Background(), `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, target+1); err != nil {
			t.Fatal(err)
		}
		res := h.run("invoices")
		if res.Status != model.StatusFailed || res.Err == nil || !strings.Contains(res.Err.Error(), fmt.Sprintf("refusing to write: the schema is at version %d, newer than this binary's %d", target+1, target)) {
			t.Fatalf("a run on a newer schema: %s %v, want it failed, refusing to write", res.Status, res.Err)
		}
		if after := h.text(`SELECT string_agg(payload_hash::text, ',' ORDER BY id) FROM erp.invoices`); after != before {
			t.Error("a run refused for a newer schema wrote rows")
		}
		if _, err := h.pool.Exec(context.Background(), `DELETE FROM goose_db_version WHERE version_id = $1`, target+1); err != nil {
			t.Fatal(err)
		}
		if res := h.mustRun("invoices"); res.Stats.Updated != 1 {
			t.Errorf("on its own schema again, the run updated %d rows, want the one changed", res.Stats.Updated)
		}
	})

	t.Run("ResumesAnInterruptedSweep", func(t *testing.T) {
		// A warehouse written by the previous release (schema 15), as its owner
		// migrates it, in the middle of a sweep (its checkpoint holds the sweep,
		// a cursor and the ids of the page done), with versions of before, a row
		// deleted before (its deleted_at after its synced_at) that the ERP lists
		// again, and snapshots and journal lines. After migration 16, the
		// daemon's role resumes the very sweep and completes it: the change and
		// the deletion it finds, and the row that comes back, each leave their
		// version (the returning one its version until the deletion of before);
		// the warehouse as of a time before the upgrade answers as it did; rows
		// the rewriting tables lose are kept; and a login scoped before reads
		// its company, and its login's bookkeeping once the run has said whose
		// it is.
		t.Parallel()
		ctx := context.Background()
		sim := erpsim.New(erpsim.Options{Invoices: 250, Users: branchUsers, RecordLabels: erpsim.LabelsNone})
		admin, owner, pool, q := ownedWarehouseAt(t, previousRelease)

		// Every invoice as the previous release's last complete sweep (6)
		// wrote it, through the login sync-riyadh (company 1, branch 1), and
		// the first page of sweep 7, which stopped after it.
		const login = "sync-riyadh"
		cursor, firstPage := writeInvoicesAsBefore(t, pool, sim, branchUsers[0], 50, login, 2)
		invoices := sim.Invoices()
		back, changed := fmt.Sprint(invoices[120].ID), fmt.Sprint(invoices[200].ID)
		for _, st := range []struct {
			sql  string
			args []any
		}{
			// A version of before, and a row the previous release marked
			// deleted a day ago (the ERP lists it again).
			{versionOfBefore, []any{changed}},
			{`UPDATE erp.invoices SET deleted_at = now() - interval '1 day' WHERE id = $1`, []any{back}},
			// A row the ERP no longer lists.
			{`INSERT INTO erp.invoices (source, id, company_id, branch_id, total_bc, payload, payload_hash, listed_by, first_seen_at, synced_at)
		  VALUES ('main', 'gone', '1', '1', 1.00, '{"id": "gone"}', '\x01', $1, now() - interval '3 days', now() - interval '2 days')`, []any{login}},
			// Sweep 7, after its first page.
			{`INSERT INTO erp.sync_checkpoints (source, stream, login, sweep_id, sweep_started_at, cursor, pages, rows,
		      last_sweep_id, last_sweep_started_at, last_sweep_completed_at)
		  VALUES ('main', 'invoices', $1, 7, now() - interval '1 hour', $2, 1, $3, 6, now() - interval '2 days', now() - interval '2 days')`,
				[]any{login, cursor, len(firstPage)}},
			{`INSERT INTO erp.sweep_seen (sweep_id, id) SELECT 7, unnest($1::text[])`, []any{firstPage}},
			{`INSERT INTO erp.sync_runs (source, stream, login, status, started_at, finished_at, sweep_id)
		  VALUES ('main', 'invoices', $1, 'cancelled', now() - interval '1 hour', now() - interval '1 hour', 7)`, []any{login}},
			{`INSERT INTO erp.balance_sheet_snapshots (source, login, as_of, node, depth, company_id, branch_id, balance, payload, payload_hash, synced_at)
		  VALUES ('main', $1, current_date - 1, 'assets', 0, '1', '1', 10.00, '{}', '\x01', now() - interval '2 days')`, []any{login}},
			{`INSERT INTO erp.journal_lines (source, document_kind, document_id, line, company_id, branch_id, debit, payload, synced_at)
		  VALUES ('main', 'journal_entry', 'je-1', '1', '1', '1', 10.00, '{}', now() - interval '2 days')`, nil},
		} {
			if _, err := pool.Exec(ctx, st.sql, st.args...); err != nil {
				t.Fatalf("%s: %v", st.sql, err)
			}
		}
		scoped := testdb.Role(t)
		if _, err := pool.Exec(ctx, `SELECT erp.grant_company($1::text::regrole, 'main', '1', '1')`, scoped); err != nil {
			t.Fatal(err)
		}
		asOf := `SELECT count(*) || ' ' || sum(total_bc) FROM erp.invoices_as_of(now() - interval '90 minutes')`
		before := q(asOf)
		versions := q(`SELECT count(*)::text FROM erp.invoices_history`)

		// The owner migrates.
		if _, err := db.Migrate(ctx, owner, nil); err != nil {
			t.Fatalf("upgrading: %v", err)
		}
		if got := q(asOf); got != before {
			t.Errorf("as of before the upgrade: %s after it, %s before", got, before)
		}
		// Bookkeeping of a login not yet identified is the scoped login's
		// no more.
		if n := invoiceCountAs(t, testdb.PoolAs(t, admin, scoped), `erp.sync_checkpoints`); n != 0 {
			t.Errorf("a scoped login reads %d checkpoints of a login never identified", n)
		}

		// The ERP changed one invoice; the daemon's role resumes sweep 7.
		sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			inv[200].TotalBC = inv[200].TotalBC.Add(decimal.RequireFromString("10.01"))
			return inv
		})
		runner := &sync.Runner{Pool: testdb.PoolAs(t, admin, testdb.Role(t, "erpsync_runtime")), Prefetch: 1}
		tgt := twoLogins(t, sim)
		tgt.Source, tgt.Logins = "main", tgt.Logins[:1]
		res := syncLogins(t, runner, tgt, "invoices")[0]
		if res.SweepID != 7 || q(`SELECT last_sweep_id::text FROM erp.sync_checkpoints WHERE stream = 'invoices'`) != "7" {
			t.Errorf("the run after the upgrade ran sweep %d, want the interrupted sweep 7 resumed and completed", res.SweepID)
		}
		// The sweep began before the upgrade, when sweeps did not follow the
		// order of ids: a row it missed may have moved while it read, and is
		// held for the next complete sweep, which marks it.
		if res.Stats.Updated != 2 || res.Stats.Deleted != 0 || q(`SELECT string_agg(id, ',') FROM erp.deletion_candidates`) != "gone" {
			t.Errorf("the resumed sweep: %+v; want the changed invoice and the returning one updated, the gone one held", res.Stats)
		}
		// (The returning row came back with its payload unchanged, so the
		// trigger marked its hash stale: the next sweep writes it once more.)
		if res := syncLogins(t, runner, tgt, "invoices")[0]; res.Stats.Deleted != 1 || res.Stats.Inserted != 0 || res.Stats.Updated > 1 {
			t.Errorf("the sweep after it: %+v; want the held row deleted, nothing else written but the returning row", res.Stats)
		}
		if got, want := q(`SELECT sum(total_bc)::text FROM erp.invoices WHERE deleted_at IS NULL`), sim.InvoiceTotal().String(); got != want {
			t.Errorf("live invoices sum to %s, the ERP's to %s", got, want)
		}
		for _, c := range []struct{ what, sql string }{
			{"the version of before", `SELECT count(*)::text FROM erp.invoices_history WHERE id = '` + changed + `' AND valid_to < now() - interval '1 day'`},
			{"the changed invoice's version, from where the version of before ended", `SELECT count(*)::text FROM erp.invoices_history a
			JOIN erp.invoices_history b ON b.id = a.id AND b.valid_from = a.valid_to
			WHERE a.id = '` + changed + `' AND b.ended_by = 'change' AND b.valid_to > now() - interval '1 minute'`},
			{"the returning invoice's version until the deletion of before", `SELECT count(*)::text FROM erp.invoices_history WHERE id = '` + back + `'
			AND ended_by = 'deletion' AND valid_to < now() - interval '23 hours'`},
			{"the deleted row's version", `SELECT count(*)::text FROM erp.invoices_history WHERE id = 'gone' AND ended_by = 'deletion'`},
		} {
			if n := q(c.sql); n == "0" {
				t.Errorf("%s is missing", c.what)
			}
		}
		if n := q(`SELECT count(*)::text FROM erp.invoices_history`); n != fmt.Sprint(mustInt(t, versions)+3) {
			t.Errorf("%s versions after the resumed sweep and the next, want the %s of before and 3", n, versions)
		}
		if got := q(asOf); got != before {
			t.Errorf("as of before the upgrade: %s after the sweep, %s before it", got, before)
		}

		// The list is followed once two sweeps of this release agree on its
		// order (the resumed one began before: its order is not known).
		s, _ := catalog.Lookup("invoices")
		follow := func() sync.Result {
			t.Helper()
			res := runner.Follow(ctx, nil, tgt, s, nil)[0]
			if res.Status != model.StatusSucceeded {
				t.Fatalf("follow: %s %v", res.Status, res.Err)
			}
			return res
		}
		if res := follow(); res.Swept == "" {
			t.Errorf("a follow after one ordered sweep of this release followed; want it to sweep")
		}
		added := sim.AddInvoices(3)
		if res := follow(); res.Swept != "" || res.Stats.Inserted != 3 {
			t.Errorf("a follow after two ordered sweeps: %+v, want the 3 new invoices followed", res)
		}
		if n := q(`SELECT count(*)::text FROM erp.invoices WHERE id = $1 AND deleted_at IS NULL`, fmt.Sprint(added[2].ID)); n != "1" {
			t.Errorf("the newest invoice is not in the warehouse after the follow")
		}

		// The rewriting tables keep what the daemon's role deletes.
		runtime := testdb.PoolAs(t, admin, testdb.Role(t, "erpsync_runtime"))
		for _, c := range []struct{ table, history string }{
			{"balance_sheet_snapshots", "balance_sheet_snapshot_history"}, {"journal_lines", "journal_lines_history"},
		} {
			if _, err := runtime.Exec(ctx, `DELETE FROM erp.`+c.table); err != nil {
				t.Fatal(err)
			}
			if n := q(`SELECT count(*)::text FROM erp.` + c.history); n != "1" {
				t.Errorf("erp.%s kept %s rows of the deleted one of before", c.history, n)
			}
		}

		// The login scoped before: its company's invoices, and its login's
		// checkpoint now that the run said whose it is.
		scopedPool := testdb.PoolAs(t, admin, scoped)
		if n := invoiceCountAs(t, scopedPool, `erp.sync_checkpoints`); n != 1 {
			t.Errorf("the scoped login reads %d checkpoints, want its login's", n)
		}
		if sums := invoiceSumsAs(t, scopedPool, "", "erp.invoices_current"); len(sums) != 1 {
			t.Errorf("the scoped login sees %v, want main/1 only", sums)
		}
	})

	t.Run("CarriesASweepInterruptedByTheReleaseBeforeIntoTheLedger", func(t *testing.T) {
		// A warehouse written by the release before this one (schema 18) in
		// the middle of a sweep of a list that is followed: the sweep's
		// checkpoint holds how far the follow runs had read when it began,
		// and its last sweep held a row for it to confirm. After the upgrade
		// the login's ledger holds the first, the sweeps the second, and the
		// resumed sweep marks the held row (gone at the ERP) and, inserting
		// a record below where the follows stood that they missed, demotes
		// the list to complete sweeps as that release's sweep would have.
		t.Parallel()
		ctx := context.Background()
		sim := erpsim.New(erpsim.Options{Invoices: 250})
		admin, owner, pool, q := ownedWarehouseAt(t, lastRelease)
		const login = "erpsync"
		cursor, firstPage := writeInvoicesAsBefore(t, pool, sim, erpsim.User{Username: login, Password: "erpsync-demo-password"}, 50, login, 2)
		invoices := sim.Invoices()
		missed, highest, held := fmt.Sprint(invoices[150].ID), fmt.Sprint(invoices[len(invoices)-1].ID), invoices[100].ID
		// A record its last sweep held, deleted at the ERP since.
		sim.DeleteInvoices(held)
		key := func(id string) string { return fmt.Sprintf("0%04d%s", len(id), id) }
		for _, st := range []struct {
			sql  string
			args []any
		}{
			// A record the follow runs missed: not in the warehouse, below
			// the highest id they had read.
			{`DELETE FROM erp.invoices WHERE id = $1`, []any{missed}},
			{`INSERT INTO erp.sync_checkpoints (source, stream, login, sweep_id, sweep_started_at, cursor, pages, rows, sweep_order,
			      sweep_last_id, sweep_max_key, sweep_followed_key, last_sweep_id, last_sweep_started_at, last_sweep_completed_at)
			  VALUES ('main', 'invoices', $1, 7, now() - interval '1 hour', $2, 1, $3, 'ascending', $4, $5, $6, 6,
			      now() - interval '2 days', now() - interval '2 days')`,
				[]any{login, cursor, len(firstPage), firstPage[len(firstPage)-1], key(firstPage[len(firstPage)-1]), key(highest)}},
			{`INSERT INTO erp.sweep_seen (sweep_id, id) SELECT 7, unnest($1::text[])`, []any{firstPage}},
			{`INSERT INTO erp.deletion_candidates (source, stream, login, id, sweep_id) VALUES ('main', 'invoices', $1, $2, 6)`,
				[]any{login, fmt.Sprint(held)}},
			{`INSERT INTO erp.sync_follow (source, stream, login, sweep_orders, list_order, max_key, followed_key, anchors, last_follow_at)
			  VALUES ('main', 'invoices', $1, '{ascending,ascending}', 'ascending', $2, $2, '[]', now() - interval '1 minute')`,
				[]any{login, key(highest)}},
		} {
			if _, err := pool.Exec(ctx, st.sql, st.args...); err != nil {
				t.Fatalf("%s: %v", st.sql, err)
			}
		}

		if _, err := db.Migrate(ctx, owner, nil); err != nil {
			t.Fatalf("upgrading: %v", err)
		}
		if got := q(`SELECT sweep_followed_key FROM erp.sync_follow WHERE stream = 'invoices'`); got != key(highest) {
			t.Fatalf("the ledger holds %q as where the follow runs stood, want the checkpoint's %q", got, key(highest))
		}

		runner := &sync.Runner{Pool: testdb.PoolAs(t, admin, testdb.Role(t, "erpsync_runtime")), Prefetch: 1}
		srv := httptest.NewServer(sim)
		t.Cleanup(srv.Close)
		client, err := erp.New(erp.Options{BaseURL: srv.URL, Username: login, Password: "erpsync-demo-password"})
		if err != nil {
			t.Fatal(err)
		}
		tgt := sync.Target{Source: "main", PageSize: 50, Logins: []sync.Login{{Name: login, Client: client}}}
		res := syncLogins(t, runner, tgt, "invoices")[0]
		if res.SweepID != 7 || res.Stats.Inserted != 1 || res.Stats.Deleted != 1 {
			t.Errorf("the run after the upgrade: sweep %d, %+v; want sweep 7 resumed, inserting the record the follows missed and marking the one its last sweep held", res.SweepID, res.Stats)
		}
		if n := q(`SELECT count(*)::text FROM erp.invoices WHERE id = $1 AND deleted_at IS NOT NULL`, fmt.Sprint(held)); n != "1" {
			t.Errorf("the record the sweep of before held, gone at the ERP, is not marked deleted by the resumed sweep")
		}
		if why := q(`SELECT demoted_why FROM erp.sync_follow WHERE stream = 'invoices'`); !strings.Contains(why, "1 records at or below the highest id follow runs had read") {
			t.Errorf("the list's demotion after the resumed sweep: %q; want it demoted for the record the follows missed", why)
		}
	})

	t.Run("SetsRightTheRatePeriodsNoSyncWrote", func(t *testing.T) {
		// A warehouse of the release before (schema 17), whose daemon's role
		// wrote the rate periods: each currency's chain as its syncs wrote it,
		// and what that role could add, as a stolen password would:
		//   EUR (2)  rate 42 for 2025, slipped in before the open period
		//            (closed, planted and closed, opened again): before EUR
		//            was first synced;
		//   USD (1)  a period of rate 7 inside its first one, beginning at no
		//            instant the currency was written at;
		//   GBP (3)  its open period closed, and one opened in 2999;
		//   JPY (4)  its open period closed in 2999;
		//   CHF (5)  its open period closed, and the next sync of that release
		//            opening the same rate again: a gap, and a repeat.
		// The owner's upgrade reports each in erp.upgrade_findings and sets
		// the chains right (USD's and EUR's chains lose nothing); a sync after
		// it keeps them, as Postgres now writes them.
		t.Parallel()
		ctx := context.Background()
		admin, owner, _, q := ownedWarehouseAt(t, lastRelease)
		runtime := testdb.PoolAs(t, admin, testdb.Role(t, "erpsync_runtime"))
		asRuntime := func(stmts ...string) {
			t.Helper()
			if err := pgx.BeginFunc(ctx, runtime, func(tx pgx.Tx) error {
				for _, s := range stmts {
					if _, err := tx.Exec(ctx, s); err != nil {
						return fmt.Errorf("%s: %w", s, err)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		// A sync of the release before: the currencies' rows, then their
		// periods as its db.RecordCurrencyRates wrote them, in one
		// transaction.
		syncAsBefore := func(rates ...string) {
			t.Helper()
			var stmts, ids []string
			for i := 0; i < len(rates); i += 2 {
				ids = append(ids, "'"+rates[i]+"'")
				stmts = append(stmts, fmt.Sprintf(`INSERT INTO erp.currencies (source, id, company_id, branch_id, code, exchange_rate, payload, payload_hash, listed_by)
				VALUES ('main', '%[1]s', '1', '1', 'C%[1]s', %[2]s, '{"id": %[1]s, "exchange_rate": "%[2]s"}', '\x01', 'sync-riyadh')
				ON CONFLICT (source, id) DO UPDATE SET exchange_rate = EXCLUDED.exchange_rate, payload = EXCLUDED.payload`, rates[i], rates[i+1]))
			}
			written := "c.id IN (" + strings.Join(ids, ", ") + ")"
			asRuntime(append(stmts, `UPDATE erp.currency_rates r SET valid_to = now() FROM erp.currencies c
				WHERE c.source = 'main' AND `+written+` AND r.source = c.source AND r.currency_id = c.id AND r.valid_to IS NULL AND r.rate <> c.exchange_rate`,
				`INSERT INTO erp.currency_rates (source, currency_id, code, rate, valid_from)
				SELECT c.source, c.id, c.code, c.exchange_rate, now() FROM erp.currencies c
				WHERE c.source = 'main' AND `+written+` AND c.exchange_rate IS NOT NULL
				  AND NOT EXISTS (SELECT 1 FROM erp.currency_rates r WHERE r.source = c.source AND r.currency_id = c.id AND r.valid_to IS NULL)`)...)
		}
		syncAsBefore("1", "1.000000", "2", "0.921500", "3", "0.789300", "4", "151.230000", "5", "0.880100")
		syncAsBefore("2", "0.930000")
		asRuntime(`UPDATE erp.currency_rates SET valid_to = now() WHERE currency_id = '2' AND valid_to IS NULL`,
			`INSERT INTO erp.currency_rates (source, currency_id, code, rate, valid_from) VALUES ('main', '2', 'C2', 42, '2025-01-01')`,
			`UPDATE erp.currency_rates SET valid_to = '2026-01-01' WHERE currency_id = '2' AND valid_from = '2025-01-01'`,
			`UPDATE erp.currency_rates SET valid_to = NULL WHERE currency_id = '2' AND valid_to = now()`)
		asRuntime(`UPDATE erp.currency_rates SET valid_to = now() WHERE currency_id = '1' AND valid_to IS NULL`,
			`INSERT INTO erp.currency_rates (source, currency_id, code, rate, valid_from)
			 SELECT 'main', '1', 'C1', 7, valid_from + interval '1 microsecond' FROM erp.currency_rates WHERE currency_id = '1'`,
			`UPDATE erp.currency_rates SET valid_to = now() WHERE currency_id = '1' AND rate = 7`,
			`UPDATE erp.currency_rates SET valid_to = NULL WHERE currency_id = '1' AND rate = 1`)
		asRuntime(`UPDATE erp.currency_rates SET valid_to = now() WHERE currency_id = '3' AND valid_to IS NULL`,
			`INSERT INTO erp.currency_rates (source, currency_id, code, rate, valid_from) VALUES ('main', '3', 'C3', 0.5, '2999-01-01')`)
		asRuntime(`UPDATE erp.currency_rates SET valid_to = '2999-01-01' WHERE currency_id = '4' AND valid_to IS NULL`)
		asRuntime(`UPDATE erp.currency_rates SET valid_to = now() WHERE currency_id = '5' AND valid_to IS NULL`)
		syncAsBefore("5", "0.880100")
		periods := `SELECT string_agg(currency_id || ' ' || rate::text || CASE WHEN valid_to IS NULL THEN ' open' ELSE ' closed' END, ', '
		ORDER BY currency_id, valid_from) FROM erp.currency_rates`
		if got, want := q(periods), "1 1.000000 open, 1 7 closed, 2 42 closed, 2 0.921500 closed, 2 0.930000 open, 3 0.789300 closed, 3 0.5 open, "+
			"4 151.230000 closed, 5 0.880100 closed, 5 0.880100 open"; got != want {
			t.Fatalf("the periods as the release before left them:\n got %s\nwant %s", got, want)
		}

		if _, err := db.Migrate(ctx, owner, nil); err != nil {
			t.Fatalf("upgrading: %v", err)
		}
		if got, want := q(periods), "1 1.000000 open, 2 0.921500 closed, 2 0.930000 open, 3 0.789300 open, 4 151.230000 open, 5 0.880100 open"; got != want {
			t.Errorf("the periods after the upgrade:\n got %s\nwant %s", got, want)
		}
		// Each chain as a sync writes it: from the currency's first sync,
		// each period ending where the next begins, none in the future.
		if n := q(`SELECT count(*)::text FROM erp.currency_rates r JOIN erp.currencies c ON c.source = r.source AND c.id = r.currency_id
		WHERE r.valid_from > now() OR r.valid_to > now()
		   OR (r.valid_from <> c.first_seen_at AND NOT EXISTS (SELECT 1 FROM erp.currency_rates p
		       WHERE p.source = r.source AND p.currency_id = r.currency_id AND p.valid_to = r.valid_from))`); n != "0" {
			t.Errorf("%s periods off their chain after the upgrade", n)
		}
		if got := q(`SELECT coalesce(string_agg(rate::text, ','), 'none') FROM erp.currency_rates
		WHERE currency_id = '2' AND valid_from <= '2025-07-01' AND (valid_to IS NULL OR valid_to > '2025-07-01')`); got != "none" {
			t.Errorf("EUR's rate in mid-2025 after the upgrade: %s, want none", got)
		}
		findings := `SELECT string_agg(split_part(key, '/', 2) || ': ' || what, E'\n' ORDER BY split_part(key, '/', 2), what)
		FROM erp.upgrade_findings WHERE migration = 19 AND table_name = 'currency_rates'`
		got := q(findings)
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^1: deleted the period \[.*\) of rate 7: it overlaps the period from .*, which began when the currency was written, and it did not$`),
			regexp.MustCompile(`(?m)^2: deleted the period \[2025-01-01 00:00:00\+00, 2026-01-01 00:00:00\+00\) of rate 42: it begins before its currency was first synced`),
			regexp.MustCompile(`(?m)^3: deleted the period \[2999-01-01 00:00:00\+00, open\) of rate 0.5: it begins in the future$`),
			regexp.MustCompile(`(?m)^3: the last period of the currency, of rate 0.789300, ended at .*: a sync closes a period only when it opens the next; it is open now$`),
			regexp.MustCompile(`(?m)^4: the last period of the currency, of rate 151.230000, ended at 2999-01-01 00:00:00\+00: .*it is open now$`),
			regexp.MustCompile(`(?m)^5: the period of rate 0.880100 ended at .*, before the next one began: it ends where the next one begins, at .*$`),
			regexp.MustCompile(`(?m)^5: deleted the period \[.*, open\) of rate 0.880100: it repeats the rate of the period before it, from .*, which ends where it ended$`),
		} {
			if !want.MatchString(got) {
				t.Errorf("no finding matches %s; the findings:\n%s", want, got)
			}
		}
		if n := strings.Count(got, "\n") + 1; n != 7 {
			t.Errorf("%d findings, want 7:\n%s", n, got)
		}

		// The daemon's role of this release syncs the ERP's currencies (EUR
		// moved); the periods follow, written by Postgres.
		sim := erpsim.New(erpsim.Options{Users: branchUsers})
		sim.SetCurrencyRate("EUR", "0.950000")
		runner := &sync.Runner{Pool: runtime}
		tgt := twoLogins(t, sim)
		tgt.Logins = tgt.Logins[:1]
		syncLogins(t, runner, tgt, "currencies")
		if got, want := q(periods), "1 1.000000 open, 2 0.921500 closed, 2 0.930000 closed, 2 0.950000 open, 3 0.789300 open, "+
			"4 151.230000 open, 5 0.880100 open"; got != want {
			t.Errorf("the periods after a sync of this release:\n got %s\nwant %s", got, want)
		}
	})

	t.Run("SetsRightWhatTheReleaseBeforeLetItsRolePlant", func(t *testing.T) {
		// A warehouse the release before wrote (schema 20), in the middle of a
		// sweep, where its daemon's role planted a version (a row rewritten
		// and marked deleted until 2999, then brought back as a sync did), a
		// row deleted until 2999, and a last sweep started at infinity. The
		// owner migrates: the planted version is cut back to when the row was
		// written again, the future deletion to when the row was last written,
		// the sweep's start forgotten, each reported in erp.upgrade_findings
		// with what it was; every other row and version stays as it was, and
		// as of now the invoice is answered once. The daemon's role resumes the
		// sweep; the next one compares every page and the warehouse is the
		// ERP's.
		t.Parallel()
		ctx := context.Background()
		sim := erpsim.New(erpsim.Options{Invoices: 250, Users: branchUsers, RecordLabels: erpsim.LabelsNone})
		admin, owner, pool, q := ownedWarehouseAt(t, hashedRelease)
		const login = "sync-riyadh"
		cursor, firstPage := writeInvoicesAsBefore(t, pool, sim, branchUsers[0], 50, login, 2)
		invoices := sim.Invoices()
		planted, deleted, changed := fmt.Sprint(invoices[10].ID), fmt.Sprint(invoices[20].ID), fmt.Sprint(invoices[30].ID)
		for _, st := range []struct {
			sql  string
			args []any
		}{
			{versionOfBefore, []any{changed}},
			{`INSERT INTO erp.sync_checkpoints (source, stream, login, sweep_id, sweep_started_at, cursor, pages, rows, sweep_order, sweep_last_id,
		      last_sweep_id, last_sweep_started_at, last_sweep_completed_at)
		  VALUES ('main', 'invoices', $1, 7, now() - interval '1 hour', $2, 1, $3, 'ascending', $4, 6, now() - interval '2 days', now() - interval '2 days')`,
				[]any{login, cursor, len(firstPage), firstPage[len(firstPage)-1]}},
			{`INSERT INTO erp.sweep_seen (sweep_id, id) SELECT 7, unnest($1::text[])`, []any{firstPage}},
		} {
			if _, err := pool.Exec(ctx, st.sql, st.args...); err != nil {
				t.Fatalf("%s: %v", st.sql, err)
			}
		}
		// The attacks, as the daemon's role, under the release before's trigger.
		runtime := testdb.PoolAs(t, admin, testdb.Role(t, "erpsync_runtime"))
		for _, sql := range []string{
			`UPDATE erp.invoices SET payload = '{"id": "planted"}', total_bc = 123456789, deleted_at = '2999-01-01' WHERE id = '` + planted + `'`,
			`UPDATE erp.invoices i SET payload = h.payload, total_bc = h.total_bc, deleted_at = NULL
			 FROM erp.invoices_history h WHERE h.id = i.id AND i.id = '` + planted + `'`,
			`UPDATE erp.invoices SET deleted_at = '2999-01-01' WHERE id = '` + deleted + `'`,
			`UPDATE erp.sync_checkpoints SET last_sweep_started_at = 'infinity'`,
		} {
			if _, err := runtime.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		if n := q(`SELECT count(*)::text FROM erp.invoices_as_of(now()) WHERE id = $1`, planted); n != "2" {
			t.Fatalf("as of now invoice %s is answered %s times before the upgrade: the attack did not plant a version", planted, n)
		}
		kept := `SELECT string_agg(concat_ws('|', id, valid_from, valid_to, ended_by, total_bc, payload::text), E'\n' ORDER BY id, valid_from)
			FROM erp.invoices_history WHERE total_bc <> 123456789`
		rows := `SELECT string_agg(concat_ws('|', id, company_id, branch_id, total_bc, payload::text, listed_by, first_seen_at, synced_at, deleted_at),
			E'\n' ORDER BY id) FROM erp.invoices WHERE id <> '` + deleted + `'`
		keptBefore, rowsBefore := q(kept), q(rows)
		plantedEnds := q(`SELECT synced_at::text FROM erp.invoices WHERE id = $1`, planted)
		deletedWritten := q(`SELECT synced_at::text FROM erp.invoices WHERE id = $1`, deleted)

		if _, err := db.Migrate(ctx, owner, nil); err != nil {
			t.Fatalf("upgrading: %v", err)
		}
		if got := q(kept); got != keptBefore {
			t.Errorf("versions the upgrade changed besides the planted one:\n%s", diffLines(keptBefore, got))
		}
		if got := q(rows); got != rowsBefore {
			t.Errorf("rows the upgrade changed besides the one deleted in the future:\n%s", diffLines(rowsBefore, got))
		}
		if got := q(`SELECT string_agg(valid_to::text, ',') FROM erp.invoices_history WHERE id = $1 AND total_bc = 123456789`, planted); got != plantedEnds {
			t.Errorf("the planted version now ends at %s, want %s, when the row was written again", got, plantedEnds)
		}
		if got := q(`SELECT deleted_at::text FROM erp.invoices WHERE id = $1`, deleted); got != deletedWritten {
			t.Errorf("the row deleted in the future is now deleted at %s, want %s, when it was last written", got, deletedWritten)
		}
		if n := q(`SELECT count(*)::text FROM erp.invoices_as_of(now()) WHERE id = $1`, planted); n != "1" {
			t.Errorf("as of now invoice %s is answered %s times after the upgrade, want once", planted, n)
		}
		findings := q(`SELECT string_agg(concat_ws(' ', migration, table_name, key), ',' ORDER BY table_name) FROM erp.upgrade_findings WHERE migration = 21`)
		if want := "21 invoices main/" + deleted + ",21 invoices_history main/" + planted + ",21 sync_checkpoints main/invoices/" + login; findings != want {
			t.Errorf("findings: %s, want %s", findings, want)
		}
		if n := q(`SELECT count(*)::text FROM erp.upgrade_findings WHERE what LIKE '%123456789%' AND what LIKE '%2999-01-01%' AND table_name = 'invoices_history'`); n != "1" {
			t.Errorf("the finding of the planted version does not keep what it was")
		}
		if got := q(`SELECT (last_sweep_started_at IS NULL)::text FROM erp.sync_checkpoints`); got != "true" {
			t.Errorf("the last sweep's start of infinity was kept")
		}

		// The daemon's role resumes sweep 7, which began before the upgrade;
		// the sweep after it compares every page.
		runner := &sync.Runner{Pool: testdb.PoolAs(t, admin, testdb.Role(t, "erpsync_runtime")), Prefetch: 1}
		tgt := twoLogins(t, sim)
		tgt.Source, tgt.Logins, tgt.PageSize = "main", tgt.Logins[:1], 50
		if res := syncLogins(t, runner, tgt, "invoices")[0]; res.SweepID != 7 {
			t.Errorf("the run after the upgrade ran sweep %d, want the interrupted sweep 7 resumed", res.SweepID)
		}
		if n := q(`SELECT count(*)::text FROM erp.full_comparisons`); n != "0" {
			t.Errorf("the resumed sweep, begun before the upgrade, was recorded as a full comparison")
		}
		syncLogins(t, runner, tgt, "invoices")
		if n := q(`SELECT count(*)::text FROM erp.full_comparisons`); n != "1" {
			t.Errorf("%s full comparisons after the sweep after the resumed one, want 1", n)
		}
		if got, want := q(`SELECT count(*) || ' ' || sum(total_bc) FROM erp.invoices_as_of(now())`), fmt.Sprintf("%d %s", len(invoices), sim.InvoiceTotal()); got != want {
			t.Errorf("as of now: %s, want the ERP's %s", got, want)
		}
		if n := q(`SELECT count(*)::text FROM erp.invoices_history WHERE valid_to > now()`); n != "0" {
			t.Errorf("%s versions end after now", n)
		}
	})

	t.Run("IndexesTheInvoicesOfAWarehouseOfTheReleaseBeforeInPlace", func(t *testing.T) {
		// A warehouse the release before wrote (schema 21), in the middle of a
		// sweep, with a version of before and a deleted row, where a first
		// attempt at migration 22 was stopped while building an index (which
		// leaves it invalid). The owner migrates: every row and version stays
		// as it was, and so does every as-of answer, the superuser's and a
		// scoped login's, though the as-of functions are written anew; the
		// invoices have the indexes their stream declares, all valid, and a
		// scoped login's revenue question is answered from the date index
		// alone. The daemon's role resumes the sweep, and the
		// warehouse is the ERP's.
		t.Parallel()
		ctx := context.Background()
		sim := erpsim.New(erpsim.Options{Invoices: 250, Users: branchUsers, RecordLabels: erpsim.LabelsNone})
		admin, owner, pool, q := ownedWarehouseAt(t, comparedRelease)
		const login = "sync-riyadh"
		cursor, firstPage := writeInvoicesAsBefore(t, pool, sim, branchUsers[0], 50, login, 2)
		invoices := sim.Invoices()
		changed, deleted := fmt.Sprint(invoices[30].ID), fmt.Sprint(invoices[40].ID)
		for _, st := range []struct {
			sql  string
			args []any
		}{
			{versionOfBefore, []any{changed}},
			{`UPDATE erp.invoices SET deleted_at = now() WHERE id = $1`, []any{deleted}},
			{`INSERT INTO erp.sync_checkpoints (source, stream, login, sweep_id, sweep_started_at, cursor, pages, rows, sweep_order, sweep_last_id,
		      last_sweep_id, last_sweep_started_at, last_sweep_completed_at)
		  VALUES ('main', 'invoices', $1, 7, now() - interval '1 hour', $2, 1, $3, 'ascending', $4, 6, now() - interval '2 days', now() - interval '2 days')`,
				[]any{login, cursor, len(firstPage), firstPage[len(firstPage)-1]}},
			{`INSERT INTO erp.sweep_seen (sweep_id, id) SELECT 7, unnest($1::text[])`, []any{firstPage}},
		} {
			if _, err := pool.Exec(ctx, st.sql, st.args...); err != nil {
				t.Fatalf("%s: %v", st.sql, err)
			}
		}
		// The first attempt, stopped: a CREATE INDEX CONCURRENTLY that fails
		// leaves its index behind, invalid, under the name migration 22 builds.
		if _, err := owner.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY invoices_source_date_covering ON erp.invoices (source)`); err == nil {
			t.Fatal("a unique index on source was built: the stopped attempt is not what it should be")
		}
		if got := q(`SELECT count(*)::text FROM pg_index WHERE indexrelid = 'erp.invoices_source_date_covering'::regclass AND NOT indisvalid`); got != "1" {
			t.Fatalf("no invalid index left by the stopped attempt")
		}
		versions := `SELECT string_agg(concat_ws('|', id, valid_from, valid_to, ended_by, total_bc, payload::text), E'\n' ORDER BY id, valid_from)
			FROM erp.invoices_history`
		rows := `SELECT string_agg(concat_ws('|', id, company_id, branch_id, total_bc, invoice_date, status, customer_name, payload::text,
			payload_hash, listed_by, first_listed_by, first_seen_at, synced_at, deleted_at), E'\n' ORDER BY id) FROM erp.invoices`
		// Every as-of answer: at each moment a version or a row begins or
		// ends, and just before it, every row the function returns.
		asOf := `SELECT string_agg(m || E':\n' || coalesce((SELECT string_agg(concat_ws('|', a.id, a.company_id, a.total_bc, a.status,
			a.payload::text, a.synced_at, a.deleted_at), E'\n' ORDER BY a.id) FROM erp.invoices_as_of(m) a), ''), E'\n' ORDER BY m)
			FROM (SELECT DISTINCT unnest(ARRAY[t, t - interval '1 microsecond']) AS m FROM (
				SELECT unnest(ARRAY[synced_at, deleted_at]) FROM erp.invoices
				UNION SELECT unnest(ARRAY[valid_from, valid_to]) FROM erp.invoices_history) moments(t) WHERE t IS NOT NULL) ms`
		scoped := testdb.Role(t)
		if _, err := pool.Exec(ctx, `SELECT erp.grant_company($1::text::regrole, 'main', '1')`, scoped); err != nil {
			t.Fatal(err)
		}
		scopedPool := testdb.PoolAs(t, admin, scoped)
		asOfScoped := func() string {
			t.Helper()
			var s *string
			if err := scopedPool.QueryRow(ctx, asOf).Scan(&s); err != nil {
				t.Fatalf("as-of answers as a scoped login: %v", err)
			}
			return str(s)
		}
		versionsBefore, rowsBefore, asOfBefore, asOfScopedBefore := q(versions), q(rows), q(asOf), asOfScoped()
		if strings.Count(asOfBefore, "\n") < len(invoices) || strings.Count(asOfScopedBefore, "\n") == 0 {
			t.Fatalf("as-of answers before the upgrade too few to compare:\n%s\nas the scoped login:\n%s", asOfBefore, asOfScopedBefore)
		}

		if _, err := db.Migrate(ctx, owner, nil); err != nil {
			t.Fatalf("upgrading: %v", err)
		}
		if got := q(versions); got != versionsBefore {
			t.Errorf("versions the upgrade changed:\n%s", diffLines(versionsBefore, got))
		}
		if got := q(rows); got != rowsBefore {
			t.Errorf("rows the upgrade changed:\n%s", diffLines(rowsBefore, got))
		}
		if got := q(asOf); got != asOfBefore {
			t.Errorf("as-of answers the upgrade changed:\n%s", diffLines(asOfBefore, got))
		}
		if got := asOfScoped(); got != asOfScopedBefore {
			t.Errorf("as-of answers the upgrade changed for a scoped login:\n%s", diffLines(asOfScopedBefore, got))
		}
		s, _ := catalog.Lookup("invoices")
		var want []string
		for _, x := range s.Declared().Table.Indexes {
			want = append(want, x.Name)
		}
		slices.Sort(want)
		if got := q(`SELECT string_agg(c.relname, ',' ORDER BY c.relname) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE i.indrelid = 'erp.invoices'::regclass AND i.indisvalid AND NOT i.indisprimary`); got != strings.Join(want, ",") {
			t.Errorf("the invoices' valid indexes are %s, want those the stream declares: %s", got, strings.Join(want, ","))
		}
		if got := q(`SELECT count(*)::text FROM pg_index WHERE indrelid = 'erp.invoices'::regclass AND NOT indisvalid`); got != "0" {
			t.Errorf("%s invalid indexes left on erp.invoices", got)
		}

		// A scoped login's revenue question, once a vacuum has marked the
		// pages all-visible, reads the date index and not the heap.
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE erp.invoices`); err != nil {
			t.Fatal(err)
		}
		tx, err := scopedPool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var plan []string
		for _, sql := range []string{`SET LOCAL enable_seqscan = off`, `SET LOCAL enable_bitmapscan = off`,
			`EXPLAIN (ANALYZE, COSTS false) SELECT currency_code, sum(total_bc) FROM erp.invoices_current
			 WHERE source = 'main' AND invoice_date >= '2000-01-01' AND status NOT IN ('draft', 'cancelled') GROUP BY 1`} {
			r, err := tx.Query(ctx, sql)
			if err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			for r.Next() {
				var line string
				if err := r.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, line)
			}
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
		}
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "Index Only Scan using invoices_source_date") || !strings.Contains(text, "Heap Fetches: 0") {
			t.Errorf("the scoped login's revenue question is not an index-only scan of invoices_source_date without heap fetches:\n%s", text)
		}
		tx.Rollback(ctx)

		// The daemon's role resumes sweep 7; the sweep after it compares
		// every page, and the warehouse is the ERP's.
		runner := &sync.Runner{Pool: testdb.PoolAs(t, admin, testdb.Role(t, "erpsync_runtime")), Prefetch: 1}
		tgt := twoLogins(t, sim)
		tgt.Source, tgt.Logins, tgt.PageSize = "main", tgt.Logins[:1], 50
		if res := syncLogins(t, runner, tgt, "invoices")[0]; res.SweepID != 7 || res.Err != nil {
			t.Errorf("the run after the upgrade ran sweep %d (%v), want the interrupted sweep 7 resumed", res.SweepID, res.Err)
		}
		syncLogins(t, runner, tgt, "invoices")
		if got, want := q(`SELECT count(*) || ' ' || sum(total_bc) FROM erp.invoices_current`), fmt.Sprintf("%d %s", len(invoices), sim.InvoiceTotal()); got != want {
			t.Errorf("live invoices after the resumed sweep: %s, want the ERP's %s", got, want)
		}
		after := strings.Split(q(versions), "\n")
		for _, v := range strings.Split(versionsBefore, "\n") {
			if !slices.Contains(after, v) {
				t.Errorf("a version of before the upgrade is gone after the resumed sweep: %s", v)
			}
		}
	})
}

// ownedWarehouseAt is a warehouse made as an installation is (see
// testdb.EmptyOwned) and migrated by its owner to version: the
// administrator's URL, the owner's pool, the administrator's pool, and a
// query of one value as text through the latter.
func ownedWarehouseAt(t *testing.T, version int64) (string, *pgxpool.Pool, *pgxpool.Pool, func(sql string, args ...any) string) {
	t.Helper()
	ctx := context.Background()
	admin := testdb.EmptyOwned(t)
	owner, err := db.Open(ctx, testdb.OwnerURL(admin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(owner.Close)
	migrateUpTo(t, owner, version)
	pool, err := db.Open(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return admin, owner, pool, func(sql string, args ...any) string {
		t.Helper()
		var s *string
		if err := pool.QueryRow(ctx, sql, args...).Scan(&s); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return str(s)
	}
}

// lastRelease is the schema version of the release before this one
// (cc247a8).
const lastRelease = 17

// hashedRelease is the schema version of the last release whose sweeps
// compared rows by payload_hash (776ddd2).
const hashedRelease = 20

// comparedRelease is the schema version of the last release whose
// invoice indexes held their keys only (2f9a6c3).
const comparedRelease = 21

// previousRelease is the schema version of the release before the
// hardened access model (fd15670).
const previousRelease = 15

func invoiceCountAs(t *testing.T, pool *pgxpool.Pool, from string) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM `+from).Scan(&n); err != nil {
		t.Fatalf("%s: %v", from, err)
	}
	return n
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}
