package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/dashboards"
)

// The panel report times the finance dashboard's invoice panels, as Grafana sends them, as the
// three kinds of login that read the warehouse, next to the same question on a typed copy of
// the invoices: plain tables with the typed columns only (no row-level security, no payload)
// and the same indexes, read as the superuser. That copy is the limit: what the panels would cost
// if the warehouse were a typed table.

const (
	// The goals: every panel within panelGoal of the limit for every login, and a scoped login
	// within scopedGoal of the plain analyst; the as-of totals within asOfGoal of the limit for
	// every login.
	panelGoal  = 1.5
	scopedGoal = 1.25
	asOfGoal   = 2.0
	// revenuePanel is the panel whose plan the report explains as the scoped login.
	revenuePanel = "Revenue per month and currency"
	// limitSchema holds the typed copies.
	limitSchema = "bench_limit"
)

// invoiceTable is how a panel's SQL names the invoices (the view of live invoices, or the table
// with the deleted ones), and changeColumn a time filter on when rows changed rather than on the
// invoice's date.
var (
	invoiceTable = regexp.MustCompile(`\berp\.(invoices(?:_current)?)\b`)
	changeColumn = regexp.MustCompile(`\$__timeFilter\(\s*(?:\w+\.)?(?:synced_at|deleted_at|first_seen_at)\s*\)`)
)

// logins of the report, in the order of its columns; the limit is read as the superuser.
var loginNames = [...]string{"superuser", "analyst", "scoped"}

// panelCase is one query of one panel over one range.
type panelCase struct {
	title, label  string // the panel, and which range (and query, for a panel with several)
	sql, limitSQL string
	goal          float64 // each login's time over the limit's, at most (0: no goal)
	panel         bool    // a query a panel sends: a scoped login within scopedGoal of the analyst
}

// panelResult is what the report measured of a case.
type panelResult struct {
	c     panelCase
	rows  int
	limit float64
	secs  [len(loginNames)]float64
}

func (r panelResult) ratio(i int) float64 { return r.secs[i] / r.limit }

// over tells whether ratio x misses goal as printed (to two decimals).
func over(x, goal float64) bool { return rounded(x, 2) > goal }

// rounded is x as printed with the given decimals.
func rounded(x float64, decimals int) float64 {
	p := math.Pow10(decimals)
	return math.Round(x*p) / p
}

// overGoal tells whether login i misses r's goal over the limit.
func (r panelResult) overGoal(i int) bool { return r.c.goal > 0 && over(r.ratio(i), r.c.goal) }

// scopedOverGoal tells whether the scoped login misses the goal over the analyst.
func (r panelResult) scopedOverGoal() bool { return r.c.panel && over(r.secs[2]/r.secs[1], scopedGoal) }

// misses are the goals r misses, as text.
func (r panelResult) misses() []string {
	var out []string
	for i, name := range loginNames {
		if r.overGoal(i) {
			out = append(out, fmt.Sprintf("%s %.2fx the limit (goal <= %.2fx)", name, r.ratio(i), r.c.goal))
		}
	}
	if r.scopedOverGoal() {
		out = append(out, fmt.Sprintf("scoped %.2fx the analyst (goal <= %.2fx)", r.secs[2]/r.secs[1], scopedGoal))
	}
	return out
}

// invoiceCases are the queries of d's panels that read erp.invoices or erp.invoices_current,
// expanded as Grafana would send them with $source = source: a panel filtering on the
// invoice's date over the data's dates (the dashboard's own range evaluated at now, the end of
// the last day of the data: the year) and over its last 30 days (the panel's relative time set
// to 30d, as an analyst would); a panel filtering on when rows changed over changed, the range
// of the re-sync that changed them. limitSQL is the same SQL on the typed copies.
func invoiceCases(d dashboards.Dashboard, source string, now time.Time, changed dashboards.TimeRange) ([]panelCase, error) {
	vars := map[string][]string{"source": {source}}
	var out []panelCase
	for _, p := range d.Panels() {
		for _, tg := range p.Targets {
			if !invoiceTable.MatchString(tg.RawSQL) {
				continue
			}
			title := p.Title
			if len(p.Targets) > 1 {
				title += " (" + tg.RefID + ")"
			}
			type span struct {
				label string
				r     dashboards.TimeRange
			}
			var spans []span
			if changeColumn.MatchString(tg.RawSQL) {
				spans = append(spans, span{"1% re-sync " + changed.From.UTC().Format("15:04:05") + ".." + changed.To.UTC().Format("15:04:05"), changed})
			} else {
				year, err := d.PanelRange(dashboards.Panel{Title: p.Title}, now)
				if err != nil {
					return nil, err
				}
				last := p
				last.TimeFrom = "30d"
				month, err := d.PanelRange(last, now)
				if err != nil {
					return nil, err
				}
				spans = append(spans, span{dateSpan(year), year}, span{dateSpan(month) + " (30d)", month})
			}
			for _, s := range spans {
				sql, err := dashboards.Expand(tg.RawSQL, vars, s.r)
				if err != nil {
					return nil, fmt.Errorf("panel %q: %w", p.Title, err)
				}
				out = append(out, panelCase{title: title, label: s.label, sql: sql,
					limitSQL: invoiceTable.ReplaceAllString(sql, limitSchema+".$1"), goal: panelGoal, panel: true})
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no panel reads erp.invoices or erp.invoices_current")
	}
	return out, nil
}

func dateSpan(r dashboards.TimeRange) string {
	return r.From.UTC().Format(time.DateOnly) + ".." + r.To.UTC().Format(time.DateOnly)
}

// panelReport prints the panel report of the warehouse at dbURL (the bench's database, as its
// superuser) to out. changed is the range of the re-sync that changed 1% of the invoices.
func (o Options) panelReport(ctx context.Context, dbURL string, changed dashboards.TimeRange, out io.Writer) (misses []string, err error) {
	d, err := dashboards.Load(o.Dashboard)
	if err != nil {
		return nil, err
	}
	o.PanelRuns = max(o.PanelRuns, 1)
	su, err := connect(ctx, dbURL, nil)
	if err != nil {
		return nil, err
	}
	defer su.Close(ctx)

	// The bench's source and company, and the data's dates.
	var source string
	var companies []string
	var first, last time.Time
	err = su.QueryRow(ctx, `SELECT min(source), count(DISTINCT source), array_agg(DISTINCT company_id ORDER BY company_id),
		min(invoice_date), max(invoice_date) FROM erp.invoices WHERE deleted_at IS NULL`).Scan(&source, new(int), &companies, &first, &last)
	if err != nil {
		return nil, fmt.Errorf("reading the bench's invoices: %w", err)
	}
	now := last.AddDate(0, 0, 1).Add(-time.Millisecond) // the end of the data's last day
	cases, err := invoiceCases(d, source, now, changed)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Dashboard, err)
	}
	cases = append(cases, panelCase{title: "erp.invoices_as_of(now()) count and sum", label: "no panel", goal: asOfGoal,
		sql:      `SELECT count(*), sum(total_bc) FROM erp.invoices_as_of(now())`,
		limitSQL: `SELECT count(*), sum(total_bc) FROM ` + limitSchema + `.invoices_current`})

	if err := buildLimit(ctx, su); err != nil {
		return nil, fmt.Errorf("the typed copy: %w", err)
	}
	var indexNames string
	if err := su.QueryRow(ctx, `SELECT string_agg(c.relname, ', ' ORDER BY c.relname) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = 'erp.invoices'::regclass`).Scan(&indexNames); err != nil {
		return nil, err
	}

	// The logins: the superuser, a plain analyst and a login scoped to the bench's company.
	analyst, dropAnalyst, err := o.login(ctx, "analyst", "IN ROLE erpsync_analyst")
	if err != nil {
		return nil, err
	}
	defer dropAnalyst()
	scoped, dropScoped, err := o.login(ctx, "scoped", "")
	if err != nil {
		return nil, err
	}
	defer dropScoped()
	// The grant is the schema owner's to give: the bench migrated the schema as the superuser.
	for _, c := range companies {
		if _, err := su.Exec(ctx, `SELECT erp.grant_company($1::text::regrole, $2, $3)`, scoped.name, source, c); err != nil {
			return nil, fmt.Errorf("erp.grant_company: %w", err)
		}
	}
	conns := [len(loginNames)]*pgx.Conn{su}
	for i, l := range []loginRole{analyst, scoped} {
		c, err := connect(ctx, dbURL, url.UserPassword(l.name, l.password))
		if err != nil {
			return nil, fmt.Errorf("connecting as the %s login: %w", loginNames[i+1], err)
		}
		defer c.Close(ctx)
		conns[i+1] = c
	}

	var results []panelResult
	for _, c := range cases {
		r, err := timeCase(ctx, c, su, conns, o.PanelRuns)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
	}

	fmt.Fprintf(out, `
panel report (run 1, N = %d): the panels of %s that read erp.invoices or erp.invoices_current,
  each query as Grafana sends it ($source = '%s', simple protocol, every row read), the time range pinned
  to the data's dates (%s..%s) or to the re-sync that changed 1%% of the invoices;
  median of %d executions after one warm-up, logins interleaved; every login's answer equals the limit's, row for row
  logins: superuser (the admin URL: no row-level security), analyst (LOGIN IN ROLE erpsync_analyst),
          scoped (a login granted '%s' company %s with erp.grant_company)
  limit:  the same SQL on typed copies read as the superuser: %s.invoices_current (the live invoices' typed
          columns) and %s.invoices (every row, with first_seen_at, synced_at, deleted_at); plain tables, no
          row-level security, no payload, with the indexes of erp.invoices (%s)
  goal:   every panel within %.2fx of the limit for every login, and a scoped login at most %.2fx the plain
          analyst; the as-of totals within %.2fx of the limit for every login

`, o.Invoices, o.Dashboard, source, first.Format(time.DateOnly), last.Format(time.DateOnly), o.PanelRuns,
		source, strings.Join(companies, ", "), limitSchema, limitSchema, indexNames, panelGoal, scopedGoal, asOfGoal)
	fmt.Fprintf(out, "  %-72s %5s %8s  %15s  %15s  %15s  %8s\n", "panel, range", "rows", "limit s", "superuser s", "analyst s", "scoped s", "sc/an")
	for _, r := range results {
		if !r.c.panel {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "  %-72s %5d %8.3f", r.c.title+", "+r.c.label, r.rows, r.limit)
		for i := range loginNames {
			mark := " "
			if r.overGoal(i) {
				mark = "*"
			}
			fmt.Fprintf(out, "  %7.3f %5.2fx%s", r.secs[i], r.ratio(i), mark)
		}
		mark := " "
		if r.scopedOverGoal() {
			mark = "*"
		}
		fmt.Fprintf(out, "  %6.2fx%s\n", r.secs[2]/r.secs[1], mark)
		for _, m := range r.misses() {
			misses = append(misses, r.c.title+", "+r.c.label+": "+m)
		}
	}
	if misses == nil {
		fmt.Fprintf(out, "  every goal is met\n")
	} else {
		fmt.Fprintf(out, "  * misses the goal:\n")
		for _, m := range misses {
			fmt.Fprintf(out, "    %s\n", m)
		}
	}

	if err := explainRevenue(ctx, out, conns[2], cases); err != nil {
		return nil, err
	}
	if o.Explain {
		for _, r := range results {
			if err := explainMisses(ctx, out, r, su, conns); err != nil {
				return nil, err
			}
		}
	}
	return misses, nil
}

// buildLimit makes the typed copies of the invoices in the same physical order (a plain, not a
// parallel, scan), with the indexes erp.invoices has, vacuums and analyzes them and erp.invoices
// (after the re-syncs), so that both sides are read in the same state. The limit is a typed
// table with the same indexes: bench_limit.invoices gets every index of erp.invoices (its primary
// key as a unique index), and bench_limit.invoices_current, which holds the live invoices only,
// those whose columns it has, without their predicate if it is deleted_at IS NULL (true of all its
// rows). The indexes are read from the catalog, so that a binary of another release is measured
// against the indexes of its own schema.
func buildLimit(ctx context.Context, su *pgx.Conn) error {
	const typed = `source, id, company_id, branch_id, number, invoice_date, status, currency_code, customer_id, customer_name, total_bc`
	for _, stmt := range []string{
		`SET max_parallel_workers_per_gather = 0`,
		`DROP SCHEMA IF EXISTS ` + limitSchema + ` CASCADE`,
		`CREATE SCHEMA ` + limitSchema,
		`CREATE TABLE ` + limitSchema + `.invoices_current AS SELECT ` + typed + ` FROM erp.invoices WHERE deleted_at IS NULL`,
		`CREATE TABLE ` + limitSchema + `.invoices AS SELECT ` + typed + `, first_seen_at, synced_at, deleted_at FROM erp.invoices`,
		`RESET max_parallel_workers_per_gather`,
	} {
		if _, err := su.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	indexes, err := limitIndexes(ctx, su, strings.Split(typed, ", "))
	if err != nil {
		return err
	}
	for _, stmt := range append(indexes,
		`VACUUM ANALYZE `+limitSchema+`.invoices_current`,
		`VACUUM ANALYZE `+limitSchema+`.invoices`,
		`VACUUM ANALYZE erp.invoices`,
		`VACUUM ANALYZE erp.invoices_history`,
	) {
		if _, err := su.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

// limitIndexes are the statements that give the typed copies the indexes of erp.invoices (see
// buildLimit); current are the columns of bench_limit.invoices_current.
func limitIndexes(ctx context.Context, su *pgx.Conn, current []string) ([]string, error) {
	rows, err := su.Query(ctx, `SELECT i.indisunique, array_agg(a.attname::text ORDER BY k.n) FILTER (WHERE k.n <= i.indnkeyatts),
		coalesce(array_agg(a.attname::text ORDER BY k.n) FILTER (WHERE k.n > i.indnkeyatts), '{}'),
		coalesce(pg_get_expr(i.indpred, i.indrelid), ''), i.indexprs IS NOT NULL
		FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
		LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = 'erp.invoices'::regclass
		GROUP BY i.indexrelid, i.indisunique, i.indnkeyatts, i.indpred, i.indrelid, i.indexprs ORDER BY i.indexrelid`)
	if err != nil {
		return nil, fmt.Errorf("reading the indexes of erp.invoices: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var unique, expressions bool
		var key, include []string
		var where string
		if err := rows.Scan(&unique, &key, &include, &where, &expressions); err != nil {
			return nil, err
		}
		if expressions {
			return nil, fmt.Errorf("an index of erp.invoices on expressions (%v): the typed copies cannot be given it", key)
		}
		create := "CREATE INDEX"
		if unique {
			create = "CREATE UNIQUE INDEX"
		}
		cols := "(" + strings.Join(key, ", ") + ")"
		if len(include) > 0 {
			cols += " INCLUDE (" + strings.Join(include, ", ") + ")"
		}
		pred := ""
		if where != "" {
			pred = " WHERE " + where
		}
		out = append(out, fmt.Sprintf("%s ON %s.invoices %s%s", create, limitSchema, cols, pred))
		if (where == "" || where == "(deleted_at IS NULL)") && !slices.ContainsFunc(slices.Concat(key, include), func(c string) bool {
			return !slices.Contains(current, c)
		}) {
			out = append(out, fmt.Sprintf("%s ON %s.invoices_current %s", create, limitSchema, cols))
		}
	}
	return out, rows.Err()
}

// timeCase runs c once on every connection (the warm-up), holds each login's answer to the
// limit's, then runs it runs times more on each, in turn, and keeps the medians.
func timeCase(ctx context.Context, c panelCase, su *pgx.Conn, conns [len(loginNames)]*pgx.Conn, runs int) (panelResult, error) {
	r := panelResult{c: c}
	want, _, err := query(ctx, su, c.limitSQL, true)
	if err != nil {
		return r, fmt.Errorf("%s, %s, the limit: %w\n%s", c.title, c.label, err, c.limitSQL)
	}
	if len(want) == 0 {
		return r, fmt.Errorf("%s, %s: no rows: the comparison would prove nothing\n%s", c.title, c.label, c.limitSQL)
	}
	r.rows = len(want)
	for i, conn := range conns {
		got, _, err := query(ctx, conn, c.sql, true)
		if err != nil {
			return r, fmt.Errorf("%s, %s, as the %s login: %w\n%s", c.title, c.label, loginNames[i], err, c.sql)
		}
		if err := sameRows(got, want); err != nil {
			return r, fmt.Errorf("%s, %s: the %s login's answer differs from the limit's: %w\n%s", c.title, c.label, loginNames[i], err, c.sql)
		}
	}
	limit := make([]float64, runs)
	secs := make([][]float64, len(conns))
	for k := 0; k < runs; k++ {
		if _, limit[k], err = query(ctx, su, c.limitSQL, false); err != nil {
			return r, err
		}
		for i, conn := range conns {
			_, s, err := query(ctx, conn, c.sql, false)
			if err != nil {
				return r, err
			}
			secs[i] = append(secs[i], s)
		}
	}
	r.limit = median(limit)
	for i := range conns {
		r.secs[i] = median(secs[i])
	}
	return r, nil
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 0 {
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[len(v)/2]
}

// sameRows tells how got differs from want, in order.
func sameRows(got, want []string) error {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Errorf("row %d is %q, the limit's %q", i+1, got[i], want[i])
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d rows, the limit %d", len(got), len(want))
	}
	return nil
}

// query runs sql, reads every row and, with keep, returns them as text (the simple protocol's
// text format: columns separated by tabs, NULL as \N).
func query(ctx context.Context, c *pgx.Conn, sql string, keep bool) ([]string, float64, error) {
	start := time.Now()
	rows, err := c.Query(ctx, sql)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		if !keep {
			continue
		}
		var b strings.Builder
		for i, v := range rows.RawValues() {
			if i > 0 {
				b.WriteByte('\t')
			}
			if v == nil {
				b.WriteString(`\N`)
			} else {
				b.Write(v)
			}
		}
		out = append(out, b.String())
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	return out, time.Since(start).Seconds(), nil
}

// connect opens a connection on dbURL, as user when it is not nil, that sends queries as
// Grafana's Postgres data source does: as text, unprepared, with the simple protocol.
func connect(ctx context.Context, dbURL string, user *url.Userinfo) (*pgx.Conn, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, err
	}
	if user != nil {
		u.User = user
	}
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg.RuntimeParams["application_name"] = "erpsync-bench"
	return pgx.ConnectConfig(ctx, cfg)
}

type loginRole struct{ name, password string }

// login creates a login role on the bench's server (roles belong to the whole server: its
// name is random), and returns a function that drops it.
func (o Options) login(ctx context.Context, kind, options string) (loginRole, func(), error) {
	b := make([]byte, 8)
	rand.Read(b)
	l := loginRole{name: "erpsync_bench_" + kind + "_" + hex.EncodeToString(b[:4]), password: hex.EncodeToString(b)}
	admin, err := pgx.Connect(ctx, o.AdminURL)
	if err != nil {
		return l, nil, err
	}
	defer admin.Close(ctx)
	stmt := fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s' %s", l.name, l.password, options)
	if _, err := admin.Exec(ctx, stmt); err != nil {
		return l, nil, fmt.Errorf("creating the %s login: %w", kind, err)
	}
	drop := func() {
		c, err := pgx.Connect(context.Background(), o.AdminURL)
		if err == nil {
			c.Exec(context.Background(), "DROP ROLE IF EXISTS "+l.name)
			c.Close(context.Background())
		}
	}
	return l, drop, nil
}

// explainRevenue prints whether, as the scoped login and with sequential scans off for that
// EXPLAIN only, the revenue panel over its last 30 days reads invoices_source_date with an
// Index Cond on invoice_date: row-level security only pushes leakproof operators below its
// policy, so this is what proves the dashboard's filters still reach the index. Then the plan
// the login gets with the defaults.
func explainRevenue(ctx context.Context, out io.Writer, scoped *pgx.Conn, cases []panelCase) error {
	i := slices.IndexFunc(cases, func(c panelCase) bool { return c.title == revenuePanel && strings.HasSuffix(c.label, "(30d)") })
	if i < 0 {
		return fmt.Errorf("no panel %q to explain", revenuePanel)
	}
	c := cases[i]
	explain := func(seqscan string) ([]dashboards.PlanNode, error) {
		tx, err := scoped.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = `+seqscan); err != nil {
			return nil, err
		}
		var plan string
		if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+c.sql).Scan(&plan); err != nil {
			return nil, fmt.Errorf("EXPLAIN as the scoped login: %w", err)
		}
		return dashboards.PlanNodes([]byte(plan))
	}
	forced, err := explain("off")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n  EXPLAIN of %q over %s as the scoped login, enable_seqscan off for it only:\n", c.title, c.label)
	found := false
	for _, s := range forced {
		if s.Index == "invoices_source_date" && strings.Contains(s.Cond, "invoice_date") {
			fmt.Fprintf(out, "    yes: %s using invoices_source_date, Index Cond: %s\n", s.Node, s.Cond)
			fmt.Fprintf(out, "    (row-level security keeps the index usable: the panel's filters are leakproof and go below the policy)\n")
			found = true
			break
		}
	}
	if !found {
		fmt.Fprintf(out, "    NO: no scan of invoices_source_date with an Index Cond on invoice_date (index scans: %s)\n", describeScans(forced))
	}
	asRun, err := explain("on")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "    with the defaults, the scoped login's plan reads: %s\n", describeScans(asRun))
	return nil
}

func describeScans(scans []dashboards.PlanNode) string {
	if len(scans) == 0 {
		return "no index (sequential scans)"
	}
	var parts []string
	for _, s := range scans {
		parts = append(parts, fmt.Sprintf("%s using %s (%s)", s.Node, s.Index, s.Cond))
	}
	return strings.Join(parts, "; ")
}

// explainMisses prints EXPLAIN (ANALYZE, BUFFERS) of r as each login that misses a goal, and
// the limit's.
func explainMisses(ctx context.Context, out io.Writer, r panelResult, su *pgx.Conn, conns [len(loginNames)]*pgx.Conn) error {
	if len(r.misses()) == 0 {
		return nil
	}
	plan := func(c *pgx.Conn, sql string) (string, error) {
		rows, _, err := query(ctx, c, `EXPLAIN (ANALYZE, BUFFERS) `+sql, true)
		return strings.Join(rows, "\n      "), err
	}
	p, err := plan(su, r.c.limitSQL)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n  %s, %s: the limit\n      %s\n", r.c.title, r.c.label, p)
	for i, name := range loginNames {
		if !r.overGoal(i) && (i != 2 || !r.scopedOverGoal()) {
			continue
		}
		if p, err = plan(conns[i], r.c.sql); err != nil {
			return err
		}
		fmt.Fprintf(out, "  %s, %s: as the %s login\n      %s\n", r.c.title, r.c.label, name, p)
	}
	return nil
}
