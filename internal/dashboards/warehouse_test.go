package dashboards

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/sync/streams"
	"github.com/erpsync/erpsync/internal/testdb"
)

const (
	warehouseJSON = "deploy/grafana/warehouse.json"
	// warehouseUID is the uid of the Postgres data source provisioned for the dashboard.
	warehouseUID  = "erpsync-warehouse"
	postgresType  = "grafana-postgresql-datasource"
	source        = "default" // the source name docker-compose's erpsync uses
	nChanged      = 10        // invoices the test changes between the two syncs
	nDeleted      = 5         // and deletes
	changedRate   = "0.930000"
	changedRateOf = "EUR"
)

// The questions the dashboard answers, by panel title.
var requiredPanels = []string{
	"Revenue per month and currency",
	"Largest customers",
	"Invoices changed or deleted this week",
	"Cash position per cashbox",
	"Reconciliations with a difference",
	"FX rate history",
	"Data freshness per stream",
}

// TestWarehouseDashboard documents the finance dashboard
// deploy/grafana/warehouse.json, as analysts' Grafana runs it on the warehouse.
func TestWarehouseDashboard(t *testing.T) {
	// The dashboard has its panels, and every query goes to the provisioned warehouse data source.
	t.Run("HasItsPanelsEveryQueryOnTheWarehouseDataSource", func(t *testing.T) {
		d := loadDashboard(t, warehouseJSON)
		var titles []string
		for _, p := range d.Panels() {
			if p.Type == "row" {
				continue
			}
			titles = append(titles, p.Title)
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.RawSQL == "" {
					t.Errorf("panel %q, query %s: no rawSql", p.Title, tg.RefID)
				}
			}
			for i, ref := range p.Datasources() {
				if ref == nil && i > 0 {
					continue // a query that names none uses the panel's
				}
				if ref == nil || ref.UID != warehouseUID || ref.Type != postgresType {
					t.Errorf("panel %q: data source %+v, want {%s %s}", p.Title, ref, postgresType, warehouseUID)
				}
			}
		}
		for _, want := range requiredPanels {
			if !slices.Contains(titles, want) {
				t.Errorf("no panel %q (panels: %q)", want, titles)
			}
		}
		for _, v := range d.Variables {
			if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != warehouseUID) {
				t.Errorf("variable %s: data source %+v, want uid %s", v.Name, v.Datasource, warehouseUID)
			}
		}
	})

	// Every query of the dashboard, its variables' first, runs as a member of erpsync_analyst on a
	// warehouse synced from the simulator (with invoices changed and deleted this week and a rate
	// changed), with its variables and macros expanded as Grafana would, and returns rows.
	t.Run("RunsEveryQueryAsAnAnalystAndGetsRows", func(t *testing.T) {
		d := loadDashboard(t, warehouseJSON)
		dbURL, sim, now := syncedWarehouse(t)
		// A login that is only an analyst, as the dashboard's datasource is.
		conn := testdb.PoolAs(t, dbURL, testdb.Role(t, "erpsync_analyst"))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()

		dashRange, err := d.Range(now)
		if err != nil {
			t.Fatal(err)
		}
		// What Grafana selects by default: every value (All). A variable's query may use the
		// variables before it.
		vars := map[string][]string{}
		for _, v := range d.Variables {
			if v.Type != "query" {
				continue // the test gives no other kind: a reference to one is left over, and fails
			}
			sql, err := v.SQL()
			if err == nil {
				sql, err = Expand(sql, vars, dashRange)
			}
			if err != nil {
				t.Fatalf("variable %s: %v", v.Name, err)
			}
			values, err := firstColumn(ctx, conn, sql)
			if err != nil || len(values) == 0 {
				t.Fatalf("variable %s: %d values, %v\n%s", v.Name, len(values), err, sql)
			}
			vars[v.Name] = values
		}
		if !slices.Contains(vars["source"], source) {
			t.Errorf("variable source = %q, want it to offer %q", vars["source"], source)
		}

		type ran struct {
			sql string
			r   TimeRange
		}
		queries := map[string]ran{} // by panel title, for the checks below
		for _, p := range d.Panels() {
			r, err := d.PanelRange(p, now)
			if err != nil {
				t.Errorf("%v", err)
				continue
			}
			for _, tg := range p.Targets {
				sql, err := Expand(tg.RawSQL, vars, r)
				if err != nil {
					t.Errorf("panel %q, query %s: %v", p.Title, tg.RefID, err)
					continue
				}
				n, err := countRows(ctx, conn, sql)
				switch {
				case err != nil:
					t.Errorf("panel %q, query %s failed as erpsync_analyst: %v\n%s", p.Title, tg.RefID, err, sql)
				case n == 0:
					t.Errorf("panel %q, query %s returned no rows\n%s", p.Title, tg.RefID, sql)
				default:
					t.Logf("panel %q, query %s: %d rows", p.Title, tg.RefID, n)
					queries[p.Title] = ran{sql, r}
				}
			}
		}

		// A few panels checked against what the simulator holds, through the panel's own SQL.
		if q, ok := queries["Revenue per month and currency"]; ok {
			var got string
			if err := conn.QueryRow(ctx, `SELECT coalesce(sum(revenue_bc), 0)::text FROM (`+q.sql+`) panel`).Scan(&got); err != nil {
				t.Fatalf("revenue total: %v", err)
			}
			want := bookedRevenue(sim, q.r)
			if g, err := decimal.NewFromString(got); err != nil || !g.Equal(want) {
				t.Errorf("revenue per month adds up to %s, want %s (booked invoices dated %s..%s)", got, want,
					q.r.From.Format(time.DateOnly), q.r.To.Format(time.DateOnly))
			}
		}
		if q, ok := queries["Invoices changed or deleted this week"]; ok {
			got, err := countBy(ctx, conn, `SELECT change, count(*) FROM (`+q.sql+`) panel GROUP BY change`)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]int64{"changed": nChanged, "deleted": nDeleted}; !maps.Equal(got, want) {
				t.Errorf("invoices changed or deleted this week: %v, want %v", got, want)
			}
		}
		if q, ok := queries["Data freshness per stream"]; ok {
			// Each of the three freshness times of a list that is followed, in seconds;
			// a stream that is not followed has its complete sweeps' for all three.
			var invoices, currencies int64
			err := conn.QueryRow(ctx, `SELECT
				count(*) FILTER (WHERE stream = 'invoices' AND new_records_age >= 0 AND recent_changes_age >= 0 AND everything_age >= 0),
				count(*) FILTER (WHERE stream = 'currencies' AND new_records_age = everything_age AND recent_changes_age = everything_age)
				FROM (`+q.sql+`) panel`).Scan(&invoices, &currencies)
			if err != nil || invoices == 0 || currencies == 0 {
				t.Errorf("freshness: %d lines of invoices with new records, recent changes and everything, %d of currencies with its sweeps' age for all three; want some of each: %v",
					invoices, currencies, err)
			}
		}
		if q, ok := queries["FX rate history"]; ok {
			var rates int64
			err := conn.QueryRow(ctx, `SELECT count(DISTINCT rate) FROM (`+q.sql+`) panel WHERE metric LIKE $1`,
				changedRateOf+" %").Scan(&rates)
			if err != nil || rates != 2 {
				t.Errorf("FX rate history shows %d rates of %s, want 2 (before and after the change): %v", rates, changedRateOf, err)
			}
		}
	})

	// The revenue panel's date filter reaches the index invoices_source_date for a login scoped to
	// a company: row-level security only pushes leakproof operators below its policy, and the
	// panel's filters (invoice_date BETWEEN, source IN, status NOT IN) are. With sequential scans
	// off, a filter that did not reach the index would show as a Filter over a whole index or
	// table instead of an Index Cond.
	t.Run("RevenuePanelReachesTheDateIndexForAScopedLogin", func(t *testing.T) {
		d := loadDashboard(t, warehouseJSON)
		dbURL, _, now := syncedWarehouse(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pool := scopedPool(ctx, t, dbURL, "")
		// The panel's relative time, as an analyst would set it.
		sql := panelSQL(t, d, "Revenue per month and currency", "30d", now)
		if n, err := countRows(ctx, pool, sql); err != nil || n == 0 {
			t.Fatalf("the revenue panel as the scoped login: %d rows, %v (want the company's invoices)\n%s", n, err, sql)
		}
		plan, scans := explainWith(ctx, t, pool, sql, "enable_seqscan = off")
		for _, s := range scans {
			if s.Index == "invoices_source_date" && strings.Contains(s.Cond, "invoice_date") {
				t.Logf("%s using %s, Index Cond: %s", s.Node, s.Index, s.Cond)
				return
			}
		}
		var pretty strings.Builder
		var v any
		if json.Unmarshal(plan, &v) == nil {
			b, _ := json.MarshalIndent(v, "", "  ")
			pretty.Write(b)
		}
		t.Errorf("as a scoped login, the revenue panel's plan has no scan of invoices_source_date with an Index Cond on invoice_date (index scans: %+v)\n%s\n%s",
			scans, sql, pretty.String())
	})

	// The questions the invoices' indexes are for are answered from the index alone for a
	// scoped login: the index holds every column the question and the login's row-level
	// security read, so no row is read from the heap (whose rows carry the payload) once a
	// vacuum has marked its pages all-visible. Sequential and bitmap scans are off for the
	// EXPLAIN, since the test's few hundred rows fit a page or two and the planner may read
	// them whole: what is proved is that the plan exists, not its cost.
	t.Run("PanelsAndAsOfTotalsAreIndexOnlyScansForAScopedLogin", func(t *testing.T) {
		d := loadDashboard(t, warehouseJSON)
		dbURL, _, now := syncedWarehouse(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pool := scopedPool(ctx, t, dbURL, `VACUUM ANALYZE erp.invoices`)
		for _, c := range []struct{ name, sql, index string }{
			{"revenue per month", panelSQL(t, d, "Revenue per month and currency", "30d", now), "invoices_source_date"},
			{"largest customers", panelSQL(t, d, "Largest customers", "", now), "invoices_source_date"},
			{"invoices_as_of totals", `SELECT count(*), sum(total_bc) FROM erp.invoices_as_of(now())`, "invoices_synced"},
		} {
			if n, err := countRows(ctx, pool, c.sql); err != nil || n == 0 {
				t.Fatalf("%s as the scoped login: %d rows, %v (want the company's invoices)\n%s", c.name, n, err, c.sql)
			}
			plan, scans := explainWith(ctx, t, pool, c.sql, "enable_seqscan = off", "enable_bitmapscan = off")
			if !slices.ContainsFunc(scans, func(s PlanNode) bool { return s.Node == "Index Only Scan" && s.Index == c.index }) {
				t.Errorf("as a scoped login, %s has no index-only scan of %s (index scans: %+v)\n%s\n%s", c.name, c.index, scans, c.sql, plan)
			}
		}
	})

	// An as-of answer reads every live row and every version, so it is as fast as its parallel
	// plan: one Gather over a Parallel Append of the live rows and the versions, the policy's
	// once-per-query tests evaluated at the Gather and handed to the workers. Row-level
	// security must not cost the analyst or a scoped login that plan: a branch of the UNION
	// ALL that Postgres plans apart, with the policy's init plans inside it, has none, and
	// the whole table is read on one process. Parallel plans are made free for the EXPLAIN,
	// since the test's few hundred rows would never pay for a worker: what is proved is
	// that the plan exists for every login.
	t.Run("AsOfTotalsRunInParallelForEveryLogin", func(t *testing.T) {
		dbURL, _, _ := syncedWarehouse(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const asOf = `SELECT count(*), sum(total_bc) FROM erp.invoices_as_of(now())`
		logins := map[string]*pgxpool.Pool{
			"analyst": testdb.PoolAs(t, dbURL, testdb.Role(t, "erpsync_analyst")),
			"scoped":  scopedPool(ctx, t, dbURL, `VACUUM ANALYZE erp.invoices, erp.invoices_history`),
		}
		for _, name := range slices.Sorted(maps.Keys(logins)) {
			if n, err := countRows(ctx, logins[name], `SELECT * FROM erp.invoices_as_of(now())`); err != nil || n == 0 {
				t.Fatalf("as the %s login, invoices as of now: %d rows, %v (want the invoices it reads)", name, n, err)
			}
			plan, _ := explainWith(ctx, t, logins[name], asOf, "parallel_setup_cost = 0", "parallel_tuple_cost = 0",
				"min_parallel_table_scan_size = 0", "min_parallel_index_scan_size = 0", "max_parallel_workers_per_gather = 2")
			nodes, err := PlanNodes(plan)
			if err != nil {
				t.Fatal(err)
			}
			var gathers, parallelAppends, appends int
			for _, n := range nodes {
				switch {
				case n.Node == "Gather" || n.Node == "Gather Merge":
					gathers++
				case n.Node == "Append" && n.Parallel:
					parallelAppends++
				case n.Node == "Append":
					appends++
				}
			}
			if gathers != 1 || parallelAppends != 1 || appends != 0 {
				t.Errorf("as the %s login, the as-of totals' plan has %d Gathers, %d Parallel Appends and %d Appends, want one Gather over one Parallel Append:\n%s",
					name, gathers, parallelAppends, appends, plan)
			}
		}
	})
}

// scopedPool is a pool of a login granted company 1 of the source, by the
// schema's owner (the migrating login here), who first runs before ("":
// nothing).
func scopedPool(ctx context.Context, t *testing.T, dbURL, before string) *pgxpool.Pool {
	t.Helper()
	owner, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	if before != "" {
		if _, err := owner.Exec(ctx, before); err != nil {
			t.Fatal(err)
		}
	}
	scoped := testdb.Role(t)
	if _, err := owner.Exec(ctx, `SELECT erp.grant_company($1::text::regrole, $2, '1')`, scoped, source); err != nil {
		t.Fatalf("grant_company: %v", err)
	}
	return testdb.PoolAs(t, dbURL, scoped)
}

// panelSQL is the one query of the panel of d titled title, with its
// relative time set to timeFrom ("": the dashboard's), as Grafana sends
// it at now for the source.
func panelSQL(t *testing.T, d Dashboard, title, timeFrom string, now time.Time) string {
	t.Helper()
	p, ok := d.Panel(title)
	if !ok || len(p.Targets) != 1 {
		t.Fatalf("no panel %q with one query in %s", title, warehouseJSON)
	}
	p.TimeFrom = timeFrom
	r, err := d.PanelRange(p, now)
	if err != nil {
		t.Fatal(err)
	}
	sql, err := Expand(p.Targets[0].RawSQL, map[string][]string{"source": {source}}, r)
	if err != nil {
		t.Fatal(err)
	}
	return sql
}

// explainWith is the plan of sql as pool's login, with the planner's
// settings set for it ("enable_seqscan = off"), and its index scans.
func explainWith(ctx context.Context, t *testing.T, pool *pgxpool.Pool, sql string, settings ...string) ([]byte, []PlanNode) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, o := range settings {
		if _, err := tx.Exec(ctx, `SET LOCAL `+o); err != nil {
			t.Fatal(err)
		}
	}
	var plan []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+sql).Scan(&plan); err != nil {
		t.Fatalf("EXPLAIN: %v\n%s", err, sql)
	}
	scans, err := IndexScans(plan)
	if err != nil {
		t.Fatal(err)
	}
	return plan, scans
}

// syncedWarehouse is a fresh warehouse with every stream synced from the simulator, then
// synced again after invoices were changed and deleted and a rate changed. now is the moment
// after the second sync, the "now" of Grafana's time ranges.
func syncedWarehouse(t *testing.T) (dbURL string, sim *erpsim.Sim, now time.Time) {
	t.Helper()
	pool, dbURL := testdb.Pool(t)
	sim = erpsim.New(erpsim.Options{Invoices: 250})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	client, err := erp.New(erp.Options{BaseURL: srv.URL, Username: "erpsync", Password: "erpsync-demo-password"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	catalog := streams.MustDefault()
	runner := &sync.Runner{Pool: pool, Prefetch: 1}
	target := sync.Target{Source: source, Logins: []sync.Login{{Name: "erpsync", Client: client}}, PageSize: 100, Prefixes: map[string]string{"messaging": "/messaging"}}
	syncAll := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, name := range catalog.Names() {
			s, _ := catalog.Lookup(name)
			if res := runner.Run(ctx, nil, target, s, nil)[0]; res.Err != nil || res.Status != model.StatusSucceeded {
				t.Fatalf("sync %s: %s: %v", name, res.Status, res.Err)
			}
		}
	}

	// Times come from the database's clock, which wrote synced_at and deleted_at: a test
	// server on another machine may run a little ahead of this one.
	dbNow := func() time.Time {
		t.Helper()
		var ts time.Time
		if err := pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&ts); err != nil {
			t.Fatalf("reading the database's clock: %v", err)
		}
		return ts
	}

	syncAll()
	for {
		started := dbNow()
		changeERP(sim)
		syncAll()
		now = dbNow().Truncate(time.Millisecond) // Grafana's precision
		// A second sync that straddled Monday 00:00 UTC wrote part of its changes last week:
		// change and sync once more, all within this week.
		if !startOf(now.UTC(), "w").After(started) {
			return dbURL, sim, now
		}
	}
}

// changeERP makes what the ERP does between two syncs: the first nChanged invoices are
// corrected (dated today, a new total), the last nDeleted are deleted, a rate changes.
func changeERP(sim *erpsim.Sim) {
	at := time.Now().UTC()
	sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
		for i := range inv[:nChanged] {
			inv[i].Date = at.Format(time.DateOnly)
			inv[i].TotalBC = inv[i].TotalBC.Add(decimal.New(1, 0))
			inv[i].UpdatedAt = at.Format(time.RFC3339)
		}
		return inv[:len(inv)-nDeleted]
	})
	sim.SetCurrencyRate(changedRateOf, changedRate)
}

// bookedRevenue is the panel's answer computed from the simulator: the base-currency total of
// the invoices neither draft nor cancelled whose date falls in r.
func bookedRevenue(sim *erpsim.Sim, r TimeRange) decimal.Decimal {
	from, to := r.From.UTC().Format(time.DateOnly), r.To.UTC().Format(time.DateOnly)
	sum := decimal.Zero
	for _, inv := range sim.Invoices() {
		if inv.Raw == nil && inv.Status != "draft" && inv.Status != "cancelled" && inv.Date >= from && inv.Date <= to {
			sum = sum.Add(inv.TotalBC)
		}
	}
	return sum
}

// countRows runs sql and decodes every row, as Grafana reads them all.
func countRows(ctx context.Context, conn *pgxpool.Pool, sql string) (int, error) {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		if _, err := rows.Values(); err != nil {
			return n, fmt.Errorf("decoding row %d: %w", n+1, err)
		}
		n++
	}
	return n, rows.Err()
}

// firstColumn is a variable query's values: its first column, as text.
func firstColumn(ctx context.Context, conn *pgxpool.Pool, sql string) ([]string, error) {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprint(v[0]))
	}
	return out, rows.Err()
}

func countBy(ctx context.Context, conn *pgxpool.Pool, sql string) (map[string]int64, error) {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sql, err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}
