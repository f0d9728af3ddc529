// Package dashboards tests the Grafana dashboards in deploy/grafana and their provisioning in
// docker-compose.yml. This file reads a dashboard the way Grafana would for its SQL panels: the
// panels (those inside collapsed rows too), the template variables, the time ranges and the
// Postgres data source's macros, so that every query can be run as Grafana would send it.
package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	WeekStart  string  `json:"weekStart"`
	Time       rawTime `json:"time"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type rawTime struct {
	From string `json:"from"`
	To   string `json:"to"`
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int      `json:"id"`
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Datasource *dsRef   `json:"datasource"`
	TimeFrom   string   `json:"timeFrom"` // the panel's own relative range ("now/w", "7d")
	Targets    []target `json:"targets"`
	Panels     []panel  `json:"panels"` // a collapsed row keeps its panels here
}

type target struct {
	RefID      string `json:"refId"`
	Datasource *dsRef `json:"datasource"`
	Format     string `json:"format"`
	RawSQL     string `json:"rawSql"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Datasource *dsRef          `json:"datasource"`
	Query      json.RawMessage `json:"query"` // SQL data sources: the SQL, or {"rawSql": ...}
}

// loadDashboard reads the dashboard at name, a path in the repository.
func loadDashboard(t *testing.T, name string) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, name))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

// allPanels is every panel of the dashboard, rows and the panels of collapsed rows included,
// in the order of the file.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// datasources are the data sources p names: its own, then its queries' (nil where one names none).
func (p panel) datasources() []*dsRef {
	refs := []*dsRef{p.Datasource}
	for _, tg := range p.Targets {
		refs = append(refs, tg.Datasource)
	}
	return refs
}

// sql is the variable's query: Grafana stores a SQL variable's query as a plain string (older
// dashboards) or as a query object with rawSql.
func (v variable) sql() (string, error) {
	var s string
	if err := json.Unmarshal(v.Query, &s); err == nil {
		return s, nil
	}
	var q struct {
		RawSQL string `json:"rawSql"`
	}
	if err := json.Unmarshal(v.Query, &q); err != nil {
		return "", fmt.Errorf("variable %s: query is neither SQL nor an object with rawSql: %w", v.Name, err)
	}
	return q.RawSQL, nil
}

// timeRange is the range a panel's queries are sent with.
type timeRange struct{ from, to time.Time }

// dashboardRange evaluates the dashboard's default time range at now: "to" rounds up to the end
// of its unit, as Grafana's time picker does.
func (d dashboard) dashboardRange(now time.Time) (timeRange, error) {
	from, err := relativeTime(d.Time.From, now, false)
	if err != nil {
		return timeRange{}, fmt.Errorf("dashboard time.from: %w", err)
	}
	to, err := relativeTime(d.Time.To, now, true)
	if err != nil {
		return timeRange{}, fmt.Errorf("dashboard time.to: %w", err)
	}
	return timeRange{from, to}, nil
}

// panelRange is the range of p's queries: the dashboard's, or the panel's relative time. Grafana
// reads a relative time "X" as "now-X", and ends every relative time at now ("now/w": this week
// so far).
func (d dashboard) panelRange(p panel, now time.Time) (timeRange, error) {
	if p.TimeFrom == "" {
		return d.dashboardRange(now)
	}
	expr := p.TimeFrom
	if !strings.Contains(expr, "now") {
		expr = "now-" + expr
	}
	from, err := relativeTime(expr, now, false)
	if err != nil {
		return timeRange{}, fmt.Errorf("panel %q timeFrom: %w", p.Title, err)
	}
	return timeRange{from, now}, nil
}

var relativeStep = regexp.MustCompile(`^([-+])(\d+)([smhdwMy])|^/([smhdwMy])`)

// relativeTime evaluates Grafana's date math ("now", "now-7d", "now/w", "now-11M/M") at now in
// UTC, weeks starting on Monday (the dashboards set weekStart: monday). A rounding goes to the
// start of the unit, or with roundUp to its last millisecond.
func relativeTime(expr string, now time.Time, roundUp bool) (time.Time, error) {
	rest, ok := strings.CutPrefix(expr, "now")
	if !ok {
		return time.Time{}, fmt.Errorf("%q: only times relative to now are supported", expr)
	}
	at := now.UTC()
	for rest != "" {
		m := relativeStep.FindStringSubmatch(rest)
		if m == nil {
			return time.Time{}, fmt.Errorf("%q: cannot read %q", expr, rest)
		}
		rest = rest[len(m[0]):]
		if m[4] != "" {
			at = startOf(at, m[4])
			if roundUp {
				at = add(at, 1, m[4]).Add(-time.Millisecond)
			}
			continue
		}
		n, _ := strconv.Atoi(m[2])
		if m[1] == "-" {
			n = -n
		}
		at = add(at, n, m[3])
	}
	return at, nil
}

func add(t time.Time, n int, unit string) time.Time {
	switch unit {
	case "s":
		return t.Add(time.Duration(n) * time.Second)
	case "m":
		return t.Add(time.Duration(n) * time.Minute)
	case "h":
		return t.Add(time.Duration(n) * time.Hour)
	case "d":
		return t.AddDate(0, 0, n)
	case "w":
		return t.AddDate(0, 0, 7*n)
	case "M":
		return t.AddDate(0, n, 0)
	default: // "y"
		return t.AddDate(n, 0, 0)
	}
}

func startOf(t time.Time, unit string) time.Time {
	y, mo, d := t.Date()
	switch unit {
	case "s":
		return t.Truncate(time.Second)
	case "m":
		return t.Truncate(time.Minute)
	case "h":
		return t.Truncate(time.Hour)
	case "d":
		return time.Date(y, mo, d, 0, 0, 0, 0, time.UTC)
	case "w":
		monday := (int(t.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, mo, d-monday, 0, 0, 0, 0, time.UTC)
	case "M":
		return time.Date(y, mo, 1, 0, 0, 0, 0, time.UTC)
	default: // "y"
		return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC)
	}
}

// Grafana replaces a dashboard's variables in the browser ($name, ${name}, ${name:format}), then
// the Postgres data source replaces its macros on the server: the same regular expression as
// Grafana's (an argument list cannot hold a parenthesis).
var (
	variableRef = regexp.MustCompile(`\$\{(\w+)(?::(\w+))?\}|\$(\w+)`)
	macroCall   = regexp.MustCompile(`\$([_a-zA-Z0-9]+)\(([^)]*)\)`)
	leftover    = regexp.MustCompile(`\$\{?\w+|\[\[\w+`)
)

// expand returns sql as Grafana would send it to Postgres for the range r, with vars the values
// of the dashboard's variables (All, or what a multi-value variable has selected). Anything
// left that looks like a variable or a macro is an error: Grafana would send it as it is, and
// the panel would fail or, worse, quietly read something else.
func expand(sql string, vars map[string][]string, r timeRange) (string, error) {
	var errs []string
	sql = variableRef.ReplaceAllStringFunc(sql, func(ref string) string {
		m := variableRef.FindStringSubmatch(ref)
		name, format := m[1]+m[3], m[2]
		values, ok := vars[name]
		if !ok {
			return ref // a macro, or unknown: Grafana too leaves it
		}
		if format != "" && format != "sqlstring" {
			errs = append(errs, fmt.Sprintf("%s: format %q not supported here", ref, format))
			return ref
		}
		return sqlList(values)
	})
	sql = macroCall.ReplaceAllStringFunc(sql, func(call string) string {
		m := macroCall.FindStringSubmatch(call)
		out, err := macro(m[1], splitArgs(m[2]), r)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", call, err))
			return call
		}
		return out
	})
	if errs == nil {
		if left := leftover.FindAllString(sql, -1); left != nil {
			errs = append(errs, fmt.Sprintf("unknown variables or macros left: %s", strings.Join(left, ", ")))
		}
	}
	if errs != nil {
		return "", fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return sql, nil
}

// sqlList is how Grafana's SQL data sources write a multi-value variable: each value quoted as
// a string literal, separated by commas, for "col IN ($var)".
func sqlList(values []string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
	}
	return strings.Join(quoted, ",")
}

func splitArgs(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	args := strings.Split(s, ",")
	for i := range args {
		args[i] = strings.TrimSpace(args[i])
	}
	return args
}

// macro is one of the Postgres data source's macros (Grafana's
// pkg/tsdb/grafana-postgresql-datasource/macros.go). Times are written in UTC, RFC 3339.
func macro(name string, args []string, r timeRange) (string, error) {
	ts := func(t time.Time) string { return "'" + t.UTC().Format(time.RFC3339Nano) + "'" }
	needArgs := func(n int) error {
		if len(args) < n {
			return fmt.Errorf("needs %d arguments", n)
		}
		return nil
	}
	switch name {
	case "__timeFilter":
		if err := needArgs(1); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s BETWEEN %s AND %s", args[0], ts(r.from), ts(r.to)), nil
	case "__timeFrom":
		return ts(r.from), nil
	case "__timeTo":
		return ts(r.to), nil
	case "__time":
		if err := needArgs(1); err != nil {
			return "", err
		}
		return args[0] + ` AS "time"`, nil
	case "__timeEpoch":
		if err := needArgs(1); err != nil {
			return "", err
		}
		return fmt.Sprintf(`extract(epoch from %s) as "time"`, args[0]), nil
	case "__unixEpochFilter":
		if err := needArgs(1); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s >= %d AND %s <= %d", args[0], r.from.Unix(), args[0], r.to.Unix()), nil
	case "__unixEpochFrom":
		return strconv.FormatInt(r.from.Unix(), 10), nil
	case "__unixEpochTo":
		return strconv.FormatInt(r.to.Unix(), 10), nil
	case "__timeGroup", "__timeGroupAlias":
		// The fill argument changes what Grafana does with the result, not the SQL.
		if err := needArgs(2); err != nil {
			return "", err
		}
		step, err := fixedInterval(strings.Trim(args[1], "'"))
		if err != nil {
			return "", err
		}
		s := step.Seconds()
		out := fmt.Sprintf("floor(extract(epoch from %s)/%v)*%v", args[0], s, s)
		if name == "__timeGroupAlias" {
			out += ` AS "time"`
		}
		return out, nil
	}
	return "", fmt.Errorf("unknown macro $%s", name)
}

// fixedInterval reads an interval of fixed length ("5m", "1d", "1w"). Months and years are
// refused: Grafana turns them into a number of seconds that depends on today, so the buckets
// are not calendar months; group by date_trunc instead.
func fixedInterval(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		d, err := strconv.Atoi(n)
		return time.Duration(d) * 24 * time.Hour, err
	}
	if n, ok := strings.CutSuffix(s, "w"); ok {
		w, err := strconv.Atoi(n)
		return time.Duration(w) * 7 * 24 * time.Hour, err
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("interval %q: want a fixed length such as 5m, 1h, 1d or 1w", s)
	}
	return d, nil
}

func TestRelativeTime(t *testing.T) {
	now := time.Date(2026, 11, 26, 1, 41, 28, 0, time.UTC) // a Thursday
	for _, c := range []struct {
		expr    string
		roundUp bool
		want    time.Time
	}{
		{"now", false, now},
		{"now-7d", false, time.Date(2026, 11, 19, 1, 41, 28, 0, time.UTC)},
		{"now/w", false, time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)},
		{"now/w", true, time.Date(2026, 11, 29, 23, 59, 59, 999e6, time.UTC)},
		{"now-11M/M", false, time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)},
		{"now/d", true, time.Date(2026, 11, 26, 23, 59, 59, 999e6, time.UTC)},
		{"now-1y/y", false, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		got, err := relativeTime(c.expr, now, c.roundUp)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("relativeTime(%q, roundUp %v) = %s, %v; want %s", c.expr, c.roundUp, got, err, c.want)
		}
	}
	for _, bad := range []string{"2026-01-01", "now-7x", "now-", "now/q"} {
		if _, err := relativeTime(bad, now, false); err == nil {
			t.Errorf("relativeTime(%q) succeeded, want an error", bad)
		}
	}
}

func TestExpand(t *testing.T) {
	r := timeRange{time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 26, 1, 41, 28, 5e8, time.UTC)}
	vars := map[string][]string{"source": {"main", "o'hara"}}
	for _, c := range []struct{ sql, want string }{
		{`WHERE $__timeFilter(synced_at) AND source IN ($source)`,
			`WHERE synced_at BETWEEN '2026-11-23T00:00:00Z' AND '2026-11-26T01:41:28.5Z' AND source IN ('main','o''hara')`},
		{`SELECT $__timeFrom()::timestamptz, $__timeTo(), ${source}, ${source:sqlstring}`,
			`SELECT '2026-11-23T00:00:00Z'::timestamptz, '2026-11-26T01:41:28.5Z', 'main','o''hara', 'main','o''hara'`},
		{`SELECT $__timeGroupAlias(t, '1h'), $__unixEpochFilter(e)`,
			`SELECT floor(extract(epoch from t)/3600)*3600 AS "time", e >= 1795392000 AND e <= 1795657288`},
	} {
		got, err := expand(c.sql, vars, r)
		if err != nil || got != c.want {
			t.Errorf("expand(%q)\n got %q, %v\nwant %q", c.sql, got, err, c.want)
		}
	}
	for _, bad := range []string{
		`SELECT $__interval`,              // a global variable this test does not give
		`WHERE $__timeFilterx(t)`,         // unknown macro
		`WHERE company IN ($company)`,     // a variable the dashboard does not define
		`WHERE $__timeGroup(t, '1M')`,     // not a fixed interval
		`WHERE source = '[[source]]'`,     // deprecated syntax, not replaced here
		`WHERE source IN (${source:csv})`, // a format this test does not write
	} {
		if got, err := expand(bad, vars, r); err == nil {
			t.Errorf("expand(%q) = %q, want an error", bad, got)
		}
	}
}

// Panels inside a collapsed row are in the row's own list; allPanels finds them.
func TestAllPanelsIncludesCollapsedRows(t *testing.T) {
	var d dashboard
	err := json.Unmarshal([]byte(`{"panels": [
		{"id": 1, "type": "table", "title": "top"},
		{"id": 2, "type": "row", "title": "row", "collapsed": true, "panels": [{"id": 3, "type": "table", "title": "inside"}]}
	]}`), &d)
	if err != nil {
		t.Fatal(err)
	}
	var titles []string
	for _, p := range d.allPanels() {
		titles = append(titles, p.Title)
	}
	if got := strings.Join(titles, ","); got != "top,row,inside" {
		t.Errorf("allPanels = %s, want top,row,inside", got)
	}
}
