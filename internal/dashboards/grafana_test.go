package dashboards

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// loadDashboard reads the dashboard at name, a path in the repository.
func loadDashboard(t *testing.T, name string) Dashboard {
	t.Helper()
	d, err := Load(filepath.Join(repo, name))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRelativeTime documents relativeTime, Grafana's time expressions read
// at a moment.
func TestRelativeTime(t *testing.T) {
	now := time.Date(2026, 11, 26, 1, 41, 28, 0, time.UTC) // a Thursday
	t.Run("ReadsNowMinusAnAmountRoundedToAUnit", func(t *testing.T) {
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
	})

	t.Run("RefusesAnExpressionItCannotRead", func(t *testing.T) {
		for _, bad := range []string{"2026-01-01", "now-7x", "now-", "now/q"} {
			if _, err := relativeTime(bad, now, false); err == nil {
				t.Errorf("relativeTime(%q) succeeded, want an error", bad)
			}
		}
	})
}

// TestExpand documents Expand: a panel's SQL with its macros and variables
// replaced as Grafana replaces them.
func TestExpand(t *testing.T) {
	r := TimeRange{time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 26, 1, 41, 28, 5e8, time.UTC)}
	vars := map[string][]string{"source": {"main", "o'hara"}}
	t.Run("ReplacesMacrosAndVariablesAsGrafanaDoes", func(t *testing.T) {
		for _, c := range []struct{ sql, want string }{
			{`WHERE $__timeFilter(synced_at) AND source IN ($source)`,
				`WHERE synced_at BETWEEN '2026-11-23T00:00:00Z' AND '2026-11-26T01:41:28.5Z' AND source IN ('main','o''hara')`},
			{`SELECT $__timeFrom()::timestamptz, $__timeTo(), ${source}, ${source:sqlstring}`,
				`SELECT '2026-11-23T00:00:00Z'::timestamptz, '2026-11-26T01:41:28.5Z', 'main','o''hara', 'main','o''hara'`},
			{`SELECT $__timeGroupAlias(t, '1h'), $__unixEpochFilter(e)`,
				`SELECT floor(extract(epoch from t)/3600)*3600 AS "time", e >= 1795392000 AND e <= 1795657288`},
		} {
			got, err := Expand(c.sql, vars, r)
			if err != nil || got != c.want {
				t.Errorf("Expand(%q)\n got %q, %v\nwant %q", c.sql, got, err, c.want)
			}
		}
	})

	t.Run("RefusesWhatItCannotReplace", func(t *testing.T) {
		for _, bad := range []string{
			`SELECT $__interval`,              // a global variable this test does not give
			`WHERE $__timeFilterx(t)`,         // unknown macro
			`WHERE company IN ($company)`,     // a variable the dashboard does not define
			`WHERE $__timeGroup(t, '1M')`,     // not a fixed interval
			`WHERE source = '[[source]]'`,     // deprecated syntax, not replaced here
			`WHERE source IN (${source:csv})`, // a format this test does not write
		} {
			if got, err := Expand(bad, vars, r); err == nil {
				t.Errorf("Expand(%q) = %q, want an error", bad, got)
			}
		}
	})
}

// TestDashboard documents Dashboard, a Grafana dashboard as its JSON
// holds it.
func TestDashboard(t *testing.T) {
	// Panels inside a collapsed row are in the row's own list; Panels finds them.
	t.Run("PanelsIncludeThoseOfACollapsedRow", func(t *testing.T) {
		var d Dashboard
		err := json.Unmarshal([]byte(`{"panels": [
		{"id": 1, "type": "table", "title": "top"},
		{"id": 2, "type": "row", "title": "row", "collapsed": true, "panels": [{"id": 3, "type": "table", "title": "inside"}]}
	]}`), &d)
		if err != nil {
			t.Fatal(err)
		}
		var titles []string
		for _, p := range d.Panels() {
			titles = append(titles, p.Title)
		}
		if got := strings.Join(titles, ","); got != "top,row,inside" {
			t.Errorf("Panels = %s, want top,row,inside", got)
		}
	})

	// A panel's range is the dashboard's, or its own relative time ending at now.
	t.Run("PanelRangeIsTheDashboardsOrThePanelsOwnEndingNow", func(t *testing.T) {
		var d Dashboard
		if err := json.Unmarshal([]byte(`{"time": {"from": "now-11M/M", "to": "now"}}`), &d); err != nil {
			t.Fatal(err)
		}
		now := time.Date(2026, 12, 31, 23, 59, 59, 999e6, time.UTC)
		for _, c := range []struct {
			timeFrom string
			from     time.Time
		}{
			{"", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
			{"30d", time.Date(2026, 12, 1, 23, 59, 59, 999e6, time.UTC)},
			{"now/w", time.Date(2026, 12, 28, 0, 0, 0, 0, time.UTC)},
		} {
			r, err := d.PanelRange(Panel{Title: "p", TimeFrom: c.timeFrom}, now)
			if err != nil || !r.From.Equal(c.from) || !r.To.Equal(now) {
				t.Errorf("timeFrom %q: %v..%v, %v; want %v..%v", c.timeFrom, r.From, r.To, err, c.from, now)
			}
		}
		if _, err := d.PanelRange(Panel{Title: "p", TimeFrom: "30x"}, now); err == nil {
			t.Error("timeFrom 30x: no error")
		}
	})
}
