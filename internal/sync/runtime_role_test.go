package sync_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testdb"
)

// runtimeLogin is a login of the daemon's role on dbURL, as an
// installation has it (and as a stolen password gives it).
func runtimeLogin(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	return testdb.PoolAs(t, dbURL, testdb.Role(t, "erpsync_runtime"))
}

// attack runs statements as one transaction of pool, and wants each to
// succeed.
func attack(t *testing.T, pool *pgxpool.Pool, statements ...string) {
	t.Helper()
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, s := range statements {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// rowState is every column of the source's invoices that the ERP decides
// or a sync writes, one line a row.
const rowState = `SELECT string_agg(concat_ws('|', id, company_id, branch_id, total_bc, payload::text, encode(payload_hash, 'hex'),
	listed_by, coalesce(first_listed_by, listed_by), deleted_at IS NULL), E'\n' ORDER BY id) FROM erp.invoices`

// verifyInvoices compares the invoices of tgt's source with what the ERP
// lists through every login, as `erpsync verify` does.
func verifyInvoices(t *testing.T, dbURL string, tgt sync.Target) sync.VerifyReport {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	s, _ := catalog.Lookup("invoices")
	reps, err := sync.Verify(ctx, conn, tgt, []sync.Stream{s}, sync.VerifyOptions{Sample: 10, LockWait: 10 * time.Second})
	if err != nil || len(reps) != 1 || reps[0].Problem != "" {
		t.Fatalf("verify: %v %+v", err, reps)
	}
	return reps[0]
}

// TestRuntimeRole documents what a login of the daemon's role, its
// password stolen, can do to the warehouse: write wrong rows, which the
// next complete sweep sets right, but neither keep them past it nor plant
// the past.
func TestRuntimeRole(t *testing.T) {
	t.Parallel()

	t.Run("CannotKeepARowPastACompleteSweepByWritingItsHashBack", func(t *testing.T) {
		// The attack: a row's payload and total changed (which leaves a
		// version), then its hash written back, as the release before marked a
		// hash changed without its payload; and another row's payload alone
		// (a field no typed column reads), its hash written back. The next
		// complete sweep, using the page digests of the last, compares the
		// page's rows by content and writes both again; verify saw them before.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 200})
		h.runner = &sync.Runner{Pool: runtimeLogin(t, h.url), Prefetch: 1}
		h.mustRun("invoices") // a bulk load: a full comparison
		h.mustRun("invoices") // an ordinary sweep, whose digests the next uses
		want := h.text(rowState)
		victims := strings.Split(h.text(`SELECT string_agg(id, ',' ORDER BY id) FROM (SELECT id FROM erp.invoices ORDER BY id LIMIT 2) x`), ",")
		attacker := runtimeLogin(t, h.url)
		for i, set := range []string{
			`payload = jsonb_set(payload, '{total_bc}', '"0.01"'), total_bc = 0.01`,
			`payload = payload || '{"note": "paid in cash"}'`,
		} {
			where := ` WHERE id = '` + victims[i] + `'`
			hash := h.text(`SELECT encode(payload_hash, 'hex') FROM erp.invoices` + where)
			attack(t, attacker, `UPDATE erp.invoices SET `+set+where)
			if n := h.count(`SELECT count(*) FROM erp.invoices_history` + where); n != 1 {
				t.Fatalf("the rewrite left %d versions, want 1", n)
			}
			attack(t, attacker, `UPDATE erp.invoices SET payload_hash = decode('`+hash+`', 'hex')`+where)
			if got := h.text(`SELECT encode(payload_hash, 'hex') FROM erp.invoices` + where); got != hash {
				t.Fatalf("the hash written back is %s, want %s", got, hash)
			}
		}
		if rep := verifyInvoices(t, h.url, h.target()); rep.Agree() || rep.Different != 2 {
			t.Errorf("verify of the tampered warehouse: %+v, want the two rows different", rep)
		}

		res := h.mustRun("invoices")
		if got := h.text(rowState); got != want {
			t.Errorf("after the next complete sweep the rows are not as the ERP has them:\n%s", diffLines(want, got))
		}
		if res.Stats.Updated != 2 {
			t.Errorf("the sweep updated %d rows, want the two tampered with", res.Stats.Updated)
		}
		if rep := verifyInvoices(t, h.url, h.target()); !rep.Agree() {
			t.Errorf("verify after the sweep: %+v", rep)
		}
	})

	t.Run("CannotMoveARecordWithoutLabelsToAnotherBranch", func(t *testing.T) {
		// Records that carry no labels take their first lister's branch. The
		// attacks: a Riyadh invoice moved to branch 2 (its hash written back);
		// moved with listed_by handed to the Jeddah login; moved, handed over
		// and marked deleted, so that it comes back. Verify disagrees; the next
		// complete sweeps of the two logins set each back: branch 1, listed by
		// Riyadh, live, answered once as of now, and out of the Jeddah
		// accountant's reach. Whether the lists hold the branch's records or
		// the whole company's.
		for _, scope := range []struct {
			name  string
			scope erpsim.ListScope
		}{{"BranchScopedLists", erpsim.ScopeBranch}, {"CompanyWideLists", erpsim.ScopeCompany}} {
			t.Run(scope.name, func(t *testing.T) {
				t.Parallel()
				pool, dbURL := testdb.Pool(t)
				sim := erpsim.New(erpsim.Options{Invoices: 240, PageSizeCap: 40, Users: branchUsers,
					ListScope: scope.scope, RecordLabels: erpsim.LabelsNone})
				tgt := twoLogins(t, sim)
				runner := &sync.Runner{Pool: runtimeLogin(t, dbURL), Prefetch: 1}
				syncLogins(t, runner, tgt, "invoices")
				syncLogins(t, runner, tgt, "invoices")
				want := text(t, pool, rowState)
				var victims []string
				for _, inv := range sim.Invoices() {
					if inv.BranchID == 1 && len(victims) < 3 {
						victims = append(victims, fmt.Sprint(inv.ID))
					}
				}
				jeddah := testdb.Role(t)
				if _, err := pool.Exec(context.Background(), `SELECT erp.grant_company($1::text::regrole, 'main', '1', '2')`, jeddah); err != nil {
					t.Fatal(err)
				}
				seenByJeddah := func() int64 {
					return invoiceCountAs(t, testdb.PoolAs(t, dbURL, jeddah), fmt.Sprintf(`erp.invoices_current WHERE id IN ('%s')`, strings.Join(victims, "','")))
				}

				attacker := runtimeLogin(t, dbURL)
				for i, set := range []string{
					`branch_id = '2'`,
					`branch_id = '2', listed_by = 'sync-jeddah'`,
					`branch_id = '2', listed_by = 'sync-jeddah', deleted_at = now()`,
				} {
					where := ` WHERE source = 'main' AND id = '` + victims[i] + `'`
					hash := text(t, pool, `SELECT encode(payload_hash, 'hex') FROM erp.invoices`+where)
					attack(t, attacker, `UPDATE erp.invoices SET `+set+where, `UPDATE erp.invoices SET payload_hash = decode('`+hash+`', 'hex')`+where)
				}
				if n := seenByJeddah(); n != 2 {
					t.Fatalf("the Jeddah accountant reads %d of the moved invoices, want the 2 live ones: the attack did not take", n)
				}
				if rep := verifyInvoices(t, dbURL, tgt); rep.Agree() || !slices.Contains(rep.DifferentIDs, victims[0]) ||
					!slices.Contains(rep.DifferentIDs, victims[1]) || !slices.Contains(rep.MissingIDs, victims[2]) {
					t.Errorf("verify of the tampered warehouse: %+v, want %s and %s different, %s missing", rep, victims[0], victims[1], victims[2])
				}

				syncLogins(t, runner, tgt, "invoices")
				if got := text(t, pool, rowState); got != want {
					t.Errorf("after the next complete sweeps the rows are not as before the attack:\n%s", diffLines(want, got))
				}
				for _, id := range victims {
					if n := count(t, pool, `SELECT count(*) FROM erp.invoices_as_of(now()) WHERE id = $1 AND branch_id = '1'`, id); n != 1 {
						t.Errorf("invoice %s is answered %d times as of now in branch 1, want once", id, n)
					}
				}
				if n := seenByJeddah(); n != 0 {
					t.Errorf("the Jeddah accountant still reads %d of the invoices moved to its branch", n)
				}
				if rep := verifyInvoices(t, dbURL, tgt); !rep.Agree() {
					t.Errorf("verify after the sweeps: %+v", rep)
				}
			})
		}
	})

	t.Run("CannotPlantAPermanentVersion", func(t *testing.T) {
		// The attack: a row rewritten and marked deleted until 2999, so that
		// the sync bringing it back would keep a version valid until then. The
		// deletion is stamped with Postgres's clock instead, and a deletion
		// time once set stays: as of now the invoice is answered once, as the
		// ERP has it, and no version ends after now.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 120})
		h.runner = &sync.Runner{Pool: runtimeLogin(t, h.url), Prefetch: 1}
		h.mustRun("invoices")
		ids := strings.Split(h.text(`SELECT string_agg(id, ',' ORDER BY id) FROM (SELECT id FROM erp.invoices ORDER BY id LIMIT 2) x`), ",")
		want := h.text(`SELECT string_agg(id || ' ' || total_bc, ',' ORDER BY id) FROM erp.invoices WHERE id = ANY($1)`, ids)
		attacker := runtimeLogin(t, h.url)
		before := h.clock()
		attack(t, attacker, `UPDATE erp.invoices SET payload = '{"id": "planted"}', total_bc = 123456789, deleted_at = '2999-01-01' WHERE id = '`+ids[0]+`'`,
			`UPDATE erp.invoices SET deleted_at = now() WHERE id = '`+ids[1]+`'`)
		attack(t, attacker, `UPDATE erp.invoices SET deleted_at = '2999-01-01' WHERE id = '`+ids[1]+`'`)
		after := h.clock()
		for _, id := range ids {
			var at time.Time
			if err := h.pool.QueryRow(context.Background(), `SELECT deleted_at FROM erp.invoices WHERE id = $1`, id).Scan(&at); err != nil {
				t.Fatal(err)
			}
			if at.Before(before) || at.After(after) {
				t.Errorf("invoice %s deleted at %s, not by Postgres's clock (%s to %s)", id, at, before, after)
			}
		}

		h.mustRun("invoices") // brings both back
		if n := h.count(`SELECT count(*) FROM erp.invoices_history WHERE valid_to > now()`); n != 0 {
			t.Errorf("%d versions end after now", n)
		}
		if got := h.text(`SELECT string_agg(id || ' ' || total_bc, ',' ORDER BY id) FROM erp.invoices_as_of(now()) WHERE id = ANY($1)`, ids); got != want {
			t.Errorf("as of now: %s, want %s (each once, as the ERP has it)", got, want)
		}
		if sum, n := h.sumAsOf(h.clock()); !sum.Equal(h.sim.InvoiceTotal()) || n != 120 {
			t.Errorf("as of now: %s over %d rows, want %s over 120", sum, n, h.sim.InvoiceTotal())
		}
	})

	t.Run("CannotSetWhenASweepStarted", func(t *testing.T) {
		// The times the shortcut of known pages trusts are Postgres's: the
		// daemon's role may not write them, and a trigger stamps them whoever
		// writes the checkpoint, its owner included.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 60})
		h.mustRun("invoices")
		h.mustRun("invoices")
		stamped := h.text(`SELECT last_sweep_started_at::text FROM erp.sync_checkpoints WHERE stream = 'invoices'`)
		attacker := runtimeLogin(t, h.url)
		for _, q := range []string{
			`UPDATE erp.sync_checkpoints SET last_sweep_started_at = 'infinity'`,
			`UPDATE erp.sync_checkpoints SET sweep_started_at = 'infinity'`,
			`INSERT INTO erp.full_comparisons (source, stream, login, sweep_id, began_at) VALUES ('test', 'invoices', 'erpsync', 1, now())`,
			`UPDATE erp.full_comparisons SET began_at = now()`,
		} {
			if _, err := attacker.Exec(context.Background(), q); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("%s as the runtime role: %v, want it refused", q, err)
			}
		}
		if _, err := attacker.Exec(context.Background(), `SELECT erp.record_full_comparison('test', 'invoices', 'erpsync', 1)`); err == nil ||
			!strings.Contains(err.Error(), "not in progress comparing every page") {
			t.Errorf("a full comparison of a sweep not in progress recorded: %v", err)
		}
		if _, err := attacker.Exec(context.Background(), `INSERT INTO erp.sync_checkpoints (source, stream, login, sweep_id, sweep_started_at,
			last_sweep_id, last_sweep_started_at) VALUES ('test', 'cashboxes', 'x', 1, 'infinity', 1, 'infinity')`); err != nil {
			t.Fatal(err)
		}
		if got := h.text(`SELECT (sweep_started_at <= now())::text || ' ' || (last_sweep_started_at IS NULL)::text FROM erp.sync_checkpoints
			WHERE stream = 'cashboxes' AND login = 'x'`); got != "true true" {
			t.Errorf("a checkpoint inserted by the runtime role with its own sweep starts: %s, want them Postgres's (started now, last unknown)", got)
		}
		if _, err := h.pool.Exec(context.Background(), `UPDATE erp.sync_checkpoints SET last_sweep_started_at = 'infinity', sweep_started_at = 'infinity'`); err != nil {
			t.Fatal(err)
		}
		if got := h.text(`SELECT last_sweep_started_at::text || ' ' || (sweep_started_at IS NULL)::text FROM erp.sync_checkpoints WHERE stream = 'invoices'`); got != stamped+" true" {
			t.Errorf("the checkpoint's sweep starts after the owner wrote them: %s, want %s true", got, stamped)
		}
	})

	t.Run("CannotHideARowBehindForgedDigestsPastTheFullComparison", func(t *testing.T) {
		// The attack: a row rewritten (its hash written back) in the very
		// transaction that rewrites the page digests of the last sweep, so
		// that the shortcut of known pages takes the row's change for the
		// sweep's own. The next sweep is fooled; the first complete sweep
		// after the login's full comparison falls due (a week after the last
		// began, by Postgres's clock) compares every page and sets the row
		// right, and records the comparison.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 200})
		h.runner = &sync.Runner{Pool: runtimeLogin(t, h.url), Prefetch: 1}
		h.mustRun("invoices")
		h.mustRun("invoices")
		want := h.text(rowState)
		victim := h.text(`SELECT min(id) FROM erp.invoices`)
		where := ` WHERE id = '` + victim + `'`
		hash := h.text(`SELECT encode(payload_hash, 'hex') FROM erp.invoices` + where)
		attack(t, runtimeLogin(t, h.url),
			`UPDATE erp.invoices SET payload = jsonb_set(payload, '{total_bc}', '"0.01"'), total_bc = 0.01`+where,
			`UPDATE erp.invoices SET payload_hash = decode('`+hash+`', 'hex')`+where,
			`UPDATE erp.sweep_pages SET answer = answer`)
		tampered := h.text(rowState)

		if res := h.mustRun("invoices"); res.Stats.Updated != 0 || h.text(rowState) != tampered {
			t.Fatalf("the sweep after the forgery wrote %+v: the forgery did not take, so this test shows nothing", res.Stats)
		}
		comparisons := h.count(`SELECT count(*) FROM erp.full_comparisons`)
		// A week passes.
		if _, err := h.pool.Exec(context.Background(), `UPDATE erp.full_comparisons SET began_at = began_at - interval '8 days'`); err != nil {
			t.Fatal(err)
		}
		res := h.mustRun("invoices")
		if got := h.text(rowState); got != want {
			t.Errorf("after the full comparison the rows are not as the ERP has them:\n%s", diffLines(want, got))
		}
		if res.Stats.Updated != 1 {
			t.Errorf("the full comparison updated %d rows, want the one tampered with", res.Stats.Updated)
		}
		if n := h.count(`SELECT count(*) FROM erp.full_comparisons WHERE began_at > now() - interval '1 hour' AND recorded_by <> current_user`); n != 1 ||
			h.count(`SELECT count(*) FROM erp.full_comparisons`) != comparisons+1 {
			t.Errorf("%d full comparisons recorded by the daemon's login in the last hour, want the one just made", n)
		}
		if res := h.mustRun("invoices"); res.Stats.Updated+res.Stats.Inserted != 0 {
			t.Errorf("the sweep after the full comparison wrote %+v", res.Stats)
		}
	})

	t.Run("CannotKeepATamperedGrantSnapshotOrTree", func(t *testing.T) {
		// The streams that rewrite by other roads compare content too: a
		// cashbox grant rewritten with its hash written back, a statistics
		// snapshot appended with the hash of the latest, and a balance sheet
		// replaced by another with the nodes' hashes of before are each set
		// right by the next read.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 20})
		h.runner = &sync.Runner{Pool: runtimeLogin(t, h.url), Prefetch: 1}
		streams := []string{"cashboxes", "cashbox_access", "messaging_stats", "balance_sheet"}
		for _, s := range streams {
			h.mustRun(s)
		}
		state := `SELECT concat_ws(E'\n',
			(SELECT string_agg(concat_ws('|', cashbox_id, "user", payload::text, company_id, branch_id, listed_by), ',' ORDER BY cashbox_id, "user")
			 FROM erp.cashbox_access WHERE deleted_at IS NULL),
			(SELECT payload::text FROM erp.messaging_stats ORDER BY taken_at DESC LIMIT 1),
			(SELECT string_agg(concat_ws('|', as_of, node, balance, payload::text), ',' ORDER BY as_of, node) FROM erp.balance_sheet_snapshots))`
		want := h.text(state)
		attack(t, runtimeLogin(t, h.url),
			`CREATE TEMP TABLE grants ON COMMIT DROP AS SELECT cashbox_id, "user", payload_hash FROM erp.cashbox_access`,
			`UPDATE erp.cashbox_access SET payload = payload || '{"can_approve": true}'`,
			`UPDATE erp.cashbox_access a SET payload_hash = g.payload_hash FROM grants g WHERE g.cashbox_id = a.cashbox_id AND g."user" = a."user"`,
			`INSERT INTO erp.messaging_stats (source, login, company_id, branch_id, payload, payload_hash)
			 SELECT source, login, company_id, branch_id, '{"sent": 0}', payload_hash FROM erp.messaging_stats ORDER BY taken_at DESC LIMIT 1`,
			`CREATE TEMP TABLE tree ON COMMIT DROP AS SELECT * FROM erp.balance_sheet_snapshots WHERE as_of = (SELECT max(as_of) FROM erp.balance_sheet_snapshots)`,
			`DELETE FROM erp.balance_sheet_snapshots WHERE as_of = (SELECT max(as_of) FROM erp.balance_sheet_snapshots)`,
			`INSERT INTO erp.balance_sheet_snapshots (source, login, as_of, node, parent, depth, company_id, branch_id, code, name, balance, payload, payload_hash)
			 SELECT source, login, as_of, node, parent, depth, company_id, branch_id, code, name, balance + 1000, payload, payload_hash FROM tree`)
		if h.text(state) == want {
			t.Fatal("the attack changed nothing")
		}
		for _, s := range streams {
			h.mustRun(s)
		}
		if got := h.text(state); got != want {
			t.Errorf("after the next reads:\n%s", diffLines(want, got))
		}
	})
}
