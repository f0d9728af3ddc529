package bench

import (
	"bytes"
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/dashboards"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/sync/streams"
	"github.com/erpsync/erpsync/internal/testdb"
)

const warehouseJSON = "../../deploy/grafana/warehouse.json"

func TestInvoiceCases(t *testing.T) {
	// The report asks every invoice panel of the shipped dashboard: those on the invoice's date over
	// the data's year and its last 30 days, the changes over the re-sync's range; the limit is the
	// same SQL on the typed copies.
	t.Run("AskEveryInvoicePanelOfTheShippedDashboard", func(t *testing.T) {
		d, err := dashboards.Load(warehouseJSON)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Date(2026, 12, 31, 23, 59, 59, 999e6, time.UTC)
		changed := dashboards.TimeRange{From: time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 26, 8, 0, 20, 0, time.UTC)}
		cases, err := invoiceCases(d, "default", now, changed)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			"Revenue per month and currency, 2026-01-01..2026-12-31",
			"Revenue per month and currency, 2026-12-01..2026-12-31 (30d)",
			"Largest customers, 2026-01-01..2026-12-31",
			"Largest customers, 2026-12-01..2026-12-31 (30d)",
			"Invoices changed or deleted this week, 1% re-sync 08:00:00..08:00:20",
		}
		var got []string
		for _, c := range cases {
			got = append(got, c.title+", "+c.label)
			if !strings.Contains(c.sql, "source IN ('default')") || invoiceTable.MatchString(c.limitSQL) || !strings.Contains(c.limitSQL, limitSchema+".invoices") {
				t.Errorf("%s, %s:\n%s\nlimit:\n%s", c.title, c.label, c.sql, c.limitSQL)
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("cases:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if !strings.Contains(cases[4].sql, "synced_at BETWEEN '2026-11-26T08:00:00Z' AND '2026-11-26T08:00:20Z'") {
			t.Errorf("the changes panel is not asked about the re-sync:\n%s", cases[4].sql)
		}
	})
}

func TestPanelGoals(t *testing.T) {
	// A panel is held to 1.5x the limit for every login and the scoped login to 1.25x the
	// analyst; the as-of totals, which no panel sends, to 2x the limit for every login; a
	// ratio is judged as printed.
	panel := panelCase{title: "Revenue", label: "year", goal: panelGoal, panel: true}
	asOf := panelCase{title: "as of", label: "no panel", goal: asOfGoal}
	for _, c := range []struct {
		name string
		r    panelResult
		want []string
	}{
		{"PanelWithinEveryGoalMissesNone", panelResult{c: panel, limit: 1, secs: [3]float64{1.5, 1.2, 1.5}}, nil},
		{"PanelOverOneAndAHalfMissesForThatLogin", panelResult{c: panel, limit: 1, secs: [3]float64{1.506, 1.4, 1.5}},
			[]string{"superuser 1.51x the limit (goal <= 1.50x)"}},
		{"ScopedOverTheAnalystMisses", panelResult{c: panel, limit: 1, secs: [3]float64{1, 1, 1.26}},
			[]string{"scoped 1.26x the analyst (goal <= 1.25x)"}},
		{"AsOfWithinTwiceMissesNoneThoughOverThePanelsGoals", panelResult{c: asOf, limit: 1, secs: [3]float64{1.9, 1.2, 2.0}}, nil},
		{"AsOfOverTwiceMissesForEachLogin", panelResult{c: asOf, limit: 1, secs: [3]float64{1, 2.2, 2.6}},
			[]string{"analyst 2.20x the limit (goal <= 2.00x)", "scoped 2.60x the limit (goal <= 2.00x)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.r.misses(); strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("misses %q, want %q", got, c.want)
			}
		})
	}
}

func TestPanelReport(t *testing.T) {
	// The panel report runs on a small warehouse (not timed): every login's answer equals the
	// limit's, and the scoped login's revenue panel reaches the date index.
	t.Run("FindsEveryLoginsAnswerEqualToTheLimitsAndTheDateIndexUsed", func(t *testing.T) {
		dbURL := testdb.New(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		pool, err := db.Open(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		sim := erpsim.New(erpsim.Options{Invoices: 2000})
		srv := httptest.NewServer(sim)
		defer srv.Close()
		client, err := erp.New(erp.Options{BaseURL: srv.URL, Username: "erpsync", Password: "erpsync-demo-password"})
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close(context.Background())
		invoices, _ := streams.MustDefault().Lookup("invoices")
		runner := &sync.Runner{Pool: pool, Prefetch: 1}
		target := sync.Target{Source: "default", Logins: []sync.Login{{Name: "erpsync", Client: client}}, PageSize: 500}
		syncInvoices := func() {
			t.Helper()
			if res := runner.Run(ctx, nil, target, invoices, nil)[0]; res.Err != nil || res.Status != model.StatusSucceeded {
				t.Fatalf("sync: %s: %v", res.Status, res.Err)
			}
		}
		syncInvoices()
		sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			for j := 1; j < len(inv); j += 100 {
				inv[j].TotalBC = inv[j].TotalBC.Add(decimal.New(1, -2))
			}
			return inv
		})
		admin, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		var changed dashboards.TimeRange
		changed.From = dbClock(ctx, admin).Truncate(time.Millisecond)
		syncInvoices()
		changed.To = dbClock(ctx, admin).Truncate(time.Millisecond).Add(time.Millisecond)

		o := Options{AdminURL: testdb.AdminURL(), Invoices: 2000, Dashboard: warehouseJSON, PanelRuns: 1, Explain: true}
		var out bytes.Buffer
		misses, err := o.panelReport(ctx, dbURL, changed, &out)
		if err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		// The misses returned are those printed.
		if met := strings.Contains(out.String(), "every goal is met"); met != (len(misses) == 0) {
			t.Errorf("the report says every goal is met: %v, but %d misses were returned: %v", met, len(misses), misses)
		}
		for _, m := range misses {
			if !strings.Contains(out.String(), "    "+m+"\n") {
				t.Errorf("miss %q returned but not printed", m)
			}
		}
		t.Log(out.String())
		for _, want := range []string{"Revenue per month and currency, 2026-01-01..2026-12-31", "Invoices changed or deleted this week, 1% re-sync",
			"using invoices_source_date, Index Cond:", "erp.invoices_as_of(now())",
			"with the indexes of erp.invoices (invoices_deleted, invoices_pkey, invoices_source_date, invoices_synced)"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("the report has no %q", want)
			}
		}
		if !strings.Contains(out.String(), "    yes: ") {
			t.Errorf("the report does not say the revenue panel reaches invoices_source_date as the scoped login")
		}
		// The limit is a typed table with the same indexes: every index of erp.invoices on
		// bench_limit.invoices, the same definition but for the name and the table, and on
		// bench_limit.invoices_current those of its columns, without the predicate its rows hold.
		var missing []string
		if err := admin.QueryRow(ctx, `WITH defs AS (SELECT i.indrelid, regexp_replace(pg_get_indexdef(i.indexrelid), '^.* USING ', '') AS def
			FROM pg_index i WHERE i.indrelid IN ('erp.invoices'::regclass, 'bench_limit.invoices'::regclass))
			SELECT coalesce(array_agg(def), '{}') FROM defs d WHERE indrelid = 'erp.invoices'::regclass
			AND NOT EXISTS (SELECT 1 FROM defs l WHERE l.indrelid = 'bench_limit.invoices'::regclass AND l.def = d.def)`).Scan(&missing); err != nil {
			t.Fatal(err)
		}
		if len(missing) > 0 {
			t.Errorf("indexes of erp.invoices the limit's bench_limit.invoices lacks: %v", missing)
		}
		var current []string
		if err := admin.QueryRow(ctx, `SELECT array_agg(def ORDER BY def) FROM (SELECT regexp_replace(pg_get_indexdef(indexrelid), '^.* USING ', '') AS def
			FROM pg_index WHERE indrelid = 'bench_limit.invoices_current'::regclass) d`).Scan(&current); err != nil {
			t.Fatal(err)
		}
		if want := []string{"btree (source, id)",
			"btree (source, invoice_date) INCLUDE (status, currency_code, total_bc, customer_name, company_id, branch_id)"}; !slices.Equal(current, want) {
			t.Errorf("bench_limit.invoices_current's indexes: %q, want %q", current, want)
		}
		var roles int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname LIKE 'erpsync\_bench\_%'`).Scan(&roles); err != nil || roles != 0 {
			t.Errorf("%d bench logins left behind (%v)", roles, err)
		}
	})
}
