package sync_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testdb"
)

// branchUsers are two users of company 1, one per branch.
var branchUsers = []erpsim.User{
	{Username: "sync-riyadh", Password: "riyadh-pw", CompanyID: 1, BranchID: 1},
	{Username: "sync-jeddah", Password: "jeddah-pw", CompanyID: 1, BranchID: 2},
}

// twoLogins is a source read through both branch users of sim.
func twoLogins(t *testing.T, sim *erpsim.Sim) sync.Target {
	t.Helper()
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	tgt := sync.Target{Source: "main", PageSize: 40, Prefixes: map[string]string{"messaging": "/messaging"}}
	for _, u := range branchUsers {
		c, err := erp.New(erp.Options{BaseURL: srv.URL, Username: u.Username, Password: u.Password,
			BackoffBase: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		tgt.Logins = append(tgt.Logins, sync.Login{Name: u.Username, Client: c})
	}
	return tgt
}

// syncLogins runs the stream through every login of t and wants each run
// to succeed.
func syncLogins(t *testing.T, runner *sync.Runner, tgt sync.Target, stream string) []sync.Result {
	t.Helper()
	s, _ := catalog.Lookup(stream)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := runner.Run(ctx, nil, tgt, s, nil)
	if len(res) != len(tgt.Logins) {
		t.Fatalf("%d results for %d logins: %+v", len(res), len(tgt.Logins), res)
	}
	for i, r := range res {
		if r.Status != model.StatusSucceeded || r.Login != tgt.Logins[i].Name {
			t.Fatalf("%s through %s: %s %v", stream, r.Login, r.Status, r.Err)
		}
	}
	return res
}

// TestLogins documents a source read through several logins: each login's
// lists, checkpoints and deletions are its own.
func TestLogins(t *testing.T) {
	t.Parallel()

	t.Run("LandEveryInvoiceOnceLabelledByItsBranch", func(t *testing.T) {
		// An installation of two branches read through a login per branch lands
		// every invoice once, labelled by its own branch (the record's, else the
		// context of the login that lists it), with exact sums per branch,
		// whether its lists hold the branch's records or the whole company's; a
		// second sync writes nothing and flips no label; an invoice deleted in
		// one branch marks exactly that row.
		for _, mode := range []struct {
			name   string
			scope  erpsim.ListScope
			labels erpsim.RecordLabels
			// ownBranch: every row must carry its invoice's branch (the
			// record says it, or only that branch's login lists it).
			ownBranch bool
			// listScope is what status must say of the lists, per login
			// ("" when the sweeps cannot tell).
			listScope string
		}{
			{"BranchScopedListsRecordsWithoutLabels", erpsim.ScopeBranch, erpsim.LabelsNone, true, ""},
			{"BranchScopedListsRecordsWithTheirIDs", erpsim.ScopeBranch, erpsim.LabelsIDs, true, "branch"},
			{"CompanyWideListsRecordsWithTheirIDs", erpsim.ScopeCompany, erpsim.LabelsIDs, true, "company"},
			{"CompanyWideListsRecordsWithCompanyAndBranchObjects", erpsim.ScopeCompany, erpsim.LabelsObjects, true, "company"},
			{"CompanyWideListsRecordsWithoutLabels", erpsim.ScopeCompany, erpsim.LabelsNone, false, "company"},
		} {
			t.Run(mode.name, func(t *testing.T) {
				t.Parallel()
				pool, _ := testdb.Pool(t)
				sim := erpsim.New(erpsim.Options{Invoices: 300, PageSizeCap: 40, Users: branchUsers,
					ListScope: mode.scope, RecordLabels: mode.labels})
				tgt := twoLogins(t, sim)
				runner := &sync.Runner{Pool: pool, Prefetch: 1}
				syncLogins(t, runner, tgt, "invoices")
				if got := text(t, pool, `SELECT string_agg(login || '=' || coalesce(list_scope, ''), ',' ORDER BY login)
				FROM erp.sync_checkpoints WHERE stream = 'invoices'`); got != "sync-jeddah="+mode.listScope+",sync-riyadh="+mode.listScope {
					t.Errorf("list scope per login: %s, want %q for both", got, mode.listScope)
				}

				ctx := context.Background()
				want := map[string]decimal.Decimal{}
				branchOf := map[string]string{}
				for _, inv := range sim.Invoices() {
					b := fmt.Sprint(inv.BranchID)
					want[b] = want[b].Add(inv.TotalBC)
					branchOf[fmt.Sprint(inv.ID)] = b
				}
				if n := count(t, pool, `SELECT count(*) FROM erp.invoices WHERE source = 'main'`); n != int64(len(branchOf)) {
					t.Fatalf("%d rows for %d invoices", n, len(branchOf))
				}
				rows, err := pool.Query(ctx, `SELECT id, company_id, branch_id FROM erp.invoices`)
				if err != nil {
					t.Fatal(err)
				}
				var id, company, branch string
				wrong := 0
				for rows.Next() {
					if err := rows.Scan(&id, &company, &branch); err != nil {
						t.Fatal(err)
					}
					if company != "1" || mode.ownBranch && branch != branchOf[id] {
						wrong++
					}
				}
				if wrong > 0 {
					t.Errorf("%d invoices not labelled company 1 and their own branch", wrong)
				}
				if mode.ownBranch {
					for b, sum := range want {
						got := text(t, pool, `SELECT coalesce(sum(total_bc), 0)::text FROM erp.invoices WHERE branch_id = $1`, b)
						if got != sum.String() {
							t.Errorf("branch %s: sum %s, the ERP's %s", b, got, sum)
						}
					}
				}
				total := text(t, pool, `SELECT sum(total_bc)::text FROM erp.invoices`)
				if total != sim.InvoiceTotal().String() {
					t.Errorf("sum %s, the ERP's %s", total, sim.InvoiceTotal())
				}

				// Again: nothing written, no version, no label flipped.
				before := text(t, pool, `SELECT string_agg(id || company_id || branch_id || listed_by, ',' ORDER BY id) FROM erp.invoices`)
				for _, r := range syncLogins(t, runner, tgt, "invoices") {
					if r.Stats.Inserted+r.Stats.Updated != 0 {
						t.Errorf("%s: the second sync wrote %+v", r.Login, r.Stats)
					}
				}
				if after := text(t, pool, `SELECT string_agg(id || company_id || branch_id || listed_by, ',' ORDER BY id) FROM erp.invoices`); after != before {
					t.Error("the second sync changed labels or listers")
				}
				if n := count(t, pool, `SELECT count(*) FROM erp.invoices_history`); n != 0 {
					t.Errorf("the second sync kept %d versions", n)
				}

				// One invoice of branch 2 is deleted at the ERP.
				var gone string
				sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
					for i := range inv {
						if inv[i].BranchID == 2 {
							gone = fmt.Sprint(inv[i].ID)
							return append(inv[:i], inv[i+1:]...)
						}
					}
					return inv
				})
				syncLogins(t, runner, tgt, "invoices")
				if got := text(t, pool, `SELECT string_agg(id, ',') FROM erp.invoices WHERE deleted_at IS NOT NULL`); got != gone {
					t.Errorf("deleted rows: %s, want exactly %s", got, gone)
				}
			})
		}
	})

	t.Run("KeepTheirOwnCheckpointsAndFailAlone", func(t *testing.T) {
		// Each login's reading of a stream is its own (checkpoint, freshness,
		// run), and a login that cannot log in fails alone: its branch goes
		// stale, the other's stays fresh.
		pool, _ := testdb.Pool(t)
		sim := erpsim.New(erpsim.Options{Invoices: 100, PageSizeCap: 40, Users: branchUsers, ListScope: erpsim.ScopeBranch})
		tgt := twoLogins(t, sim)
		runner := &sync.Runner{Pool: pool, Prefetch: 1}
		syncLogins(t, runner, tgt, "invoices")
		if n := count(t, pool, `SELECT count(*) FROM erp.sync_checkpoints WHERE stream = 'invoices' AND login IN ('sync-riyadh', 'sync-jeddah')
		AND last_sweep_completed_at IS NOT NULL`); n != 2 {
			t.Errorf("%d complete checkpoints, want one per login", n)
		}
		if n := count(t, pool, `SELECT count(*) FROM erp.stream_freshness WHERE stream = 'invoices'`); n != 2 {
			t.Errorf("erp.stream_freshness has %d rows for invoices, want one per login", n)
		}

		// The Jeddah user's password changes at the ERP.
		bad := tgt
		bad.Logins = append([]sync.Login(nil), tgt.Logins...)
		c, _ := erp.New(erp.Options{BaseURL: sim0URL(t, sim), Username: "sync-jeddah", Password: "old-password"})
		bad.Logins[1].Client = c
		s, _ := catalog.Lookup("invoices")
		res := runner.Run(context.Background(), nil, bad, s, nil)
		if len(res) != 2 || res[0].Status != model.StatusSucceeded || res[1].Status != model.StatusFailed {
			t.Fatalf("results %+v: the Riyadh login must succeed and the Jeddah one fail", res)
		}
		var riyadh, jeddah time.Time
		if err := pool.QueryRow(context.Background(), `SELECT
		(SELECT last_sweep_completed_at FROM erp.sync_checkpoints WHERE stream = 'invoices' AND login = 'sync-riyadh'),
		(SELECT last_sweep_completed_at FROM erp.sync_checkpoints WHERE stream = 'invoices' AND login = 'sync-jeddah')`).Scan(&riyadh, &jeddah); err != nil {
			t.Fatal(err)
		}
		if !riyadh.After(jeddah) {
			t.Errorf("Riyadh complete at %s, Jeddah at %s: only Jeddah's data must have aged", riyadh, jeddah)
		}
		if got := text(t, pool, `SELECT last_run_status FROM erp.stream_freshness WHERE stream = 'invoices' AND login = 'sync-jeddah'`); got != "failed" {
			t.Errorf("Jeddah's last run in erp.stream_freshness: %s", got)
		}
	})

	t.Run("DecideTheDeletionsOfWhatTheyList", func(t *testing.T) {
		// One login reading a company-wide list whose records carry other
		// branches marks their deletions too: a row's deletion is decided by the
		// login that lists it, not by its labels.
		pool, _ := testdb.Pool(t)
		sim := erpsim.New(erpsim.Options{Invoices: 120, PageSizeCap: 40, Users: branchUsers, RecordLabels: erpsim.LabelsIDs})
		tgt := twoLogins(t, sim)
		tgt.Logins = tgt.Logins[:1] // the Riyadh user alone
		runner := &sync.Runner{Pool: pool, Prefetch: 1}
		syncLogins(t, runner, tgt, "invoices")
		if n := count(t, pool, `SELECT count(*) FROM erp.invoices WHERE branch_id = '2'`); n == 0 {
			t.Fatal("no invoice labelled with branch 2: the records' own labels were not used")
		}
		var gone string
		sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			for i := range inv {
				if inv[i].BranchID == 2 {
					gone = fmt.Sprint(inv[i].ID)
					return append(inv[:i], inv[i+1:]...)
				}
			}
			return inv
		})
		syncLogins(t, runner, tgt, "invoices")
		if got := text(t, pool, `SELECT string_agg(id, ',') FROM erp.invoices WHERE deleted_at IS NOT NULL`); got != gone {
			t.Errorf("deleted rows: %s, want exactly %s (of branch 2, listed by the Riyadh login)", got, gone)
		}
	})
}

// sim0URL serves sim once more for a client of the test's own.
func sim0URL(t *testing.T, sim *erpsim.Sim) string {
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return srv.URL
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func text(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) string {
	t.Helper()
	var s *string
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if s == nil {
		return "<null>"
	}
	return *s
}
