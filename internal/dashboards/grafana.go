// Package dashboards reads the shipped Grafana dashboards (deploy/grafana) as Grafana does, for
// the tests of this package and for the bench: the panels (those inside collapsed rows too), the
// template variables, the time ranges with Grafana's relative date math, and the Postgres data
// source's macros, so that every query can be run as Grafana would send it.
package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Dashboard is what this package reads of a dashboard's JSON model.
type Dashboard struct {
	UID       string
	Title     string
	WeekStart string
	Time      RawTime    // the default time range, as written ("now-11M/M", "now")
	Variables []Variable // templating.list, in order
	top       []Panel    // the panels at the top level; rows hold the panels of collapsed rows
}

// RawTime is a time range as a dashboard writes it.
type RawTime struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// DataSourceRef names a data source: its plugin type and uid.
type DataSourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Panel is a panel, or a row.
type Panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *DataSourceRef `json:"datasource"`
	// TimeFrom is the panel's own relative range ("now/w", "7d"), Grafana's "Relative time"
	// query option; empty, the panel uses the dashboard's range.
	TimeFrom string   `json:"timeFrom"`
	Targets  []Target `json:"targets"`
	Panels   []Panel  `json:"panels"` // a collapsed row keeps its panels here
}

// Target is one query of a panel.
type Target struct {
	RefID      string         `json:"refId"`
	Datasource *DataSourceRef `json:"datasource"`
	Format     string         `json:"format"`
	RawSQL     string         `json:"rawSql"`
}

// Variable is a template variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Datasource *DataSourceRef  `json:"datasource"`
	Query      json.RawMessage `json:"query"` // SQL data sources: the SQL, or {"rawSql": ...}
}

// UnmarshalJSON reads a dashboard's JSON model.
func (d *Dashboard) UnmarshalJSON(b []byte) error {
	var raw struct {
		UID        string  `json:"uid"`
		Title      string  `json:"title"`
		WeekStart  string  `json:"weekStart"`
		Time       RawTime `json:"time"`
		Panels     []Panel `json:"panels"`
		Templating struct {
			List []Variable `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*d = Dashboard{UID: raw.UID, Title: raw.Title, WeekStart: raw.WeekStart, Time: raw.Time,
		Variables: raw.Templating.List, top: raw.Panels}
	return nil
}

// Load reads the dashboard in the file at path.
func Load(path string) (Dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Dashboard{}, err
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return Dashboard{}, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// Panels is every panel of the dashboard, rows and the panels of collapsed rows included, in
// the order of the file.
func (d Dashboard) Panels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.top)
	return out
}

// Panel is the panel titled title (rows and collapsed rows searched too).
func (d Dashboard) Panel(title string) (Panel, bool) {
	for _, p := range d.Panels() {
		if p.Title == title {
			return p, true
		}
	}
	return Panel{}, false
}

// Datasources are the data sources p names: its own, then its queries' (nil where one names
// none).
func (p Panel) Datasources() []*DataSourceRef {
	refs := []*DataSourceRef{p.Datasource}
	for _, tg := range p.Targets {
		refs = append(refs, tg.Datasource)
	}
	return refs
}

// SQL is the variable's query: Grafana stores a SQL variable's query as a plain string (older
// dashboards) or as a query object with rawSql.
func (v Variable) SQL() (string, error) {
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

// TimeRange is the range a panel's queries are sent with.
type TimeRange struct{ From, To time.Time }

// Range evaluates the dashboard's default time range at now: "to" rounds up to the end of its
// unit, as Grafana's time picker does.
func (d Dashboard) Range(now time.Time) (TimeRange, error) {
	from, err := relativeTime(d.Time.From, now, false)
	if err != nil {
		return TimeRange{}, fmt.Errorf("dashboard time.from: %w", err)
	}
	to, err := relativeTime(d.Time.To, now, true)
	if err != nil {
		return TimeRange{}, fmt.Errorf("dashboard time.to: %w", err)
	}
	return TimeRange{from, to}, nil
}

// PanelRange is the range of p's queries at now: the dashboard's, or the panel's relative time.
// Grafana reads a relative time "X" as "now-X", and ends every relative time at now ("now/w":
// this week so far).
func (d Dashboard) PanelRange(p Panel, now time.Time) (TimeRange, error) {
	if p.TimeFrom == "" {
		return d.Range(now)
	}
	expr := p.TimeFrom
	if !strings.Contains(expr, "now") {
		expr = "now-" + expr
	}
	from, err := relativeTime(expr, now, false)
	if err != nil {
		return TimeRange{}, fmt.Errorf("panel %q timeFrom: %w", p.Title, err)
	}
	return TimeRange{from, now}, nil
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

// Expand returns sql as Grafana would send it to Postgres for the range r, with vars the values
// of the dashboard's variables (All, or what a multi-value variable has selected). Anything
// left that looks like a variable or a macro is an error: Grafana would send it as it is, and
// the panel would fail or, worse, quietly read something else.
func Expand(sql string, vars map[string][]string, r TimeRange) (string, error) {
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
func macro(name string, args []string, r TimeRange) (string, error) {
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
		return fmt.Sprintf("%s BETWEEN %s AND %s", args[0], ts(r.From), ts(r.To)), nil
	case "__timeFrom":
		return ts(r.From), nil
	case "__timeTo":
		return ts(r.To), nil
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
		return fmt.Sprintf("%s >= %d AND %s <= %d", args[0], r.From.Unix(), args[0], r.To.Unix()), nil
	case "__unixEpochFrom":
		return strconv.FormatInt(r.From.Unix(), 10), nil
	case "__unixEpochTo":
		return strconv.FormatInt(r.To.Unix(), 10), nil
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
