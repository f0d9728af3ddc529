package bench

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/testdb"
)

// TestFreshness documents Freshness, the report of `make freshness`.
func TestFreshness(t *testing.T) {
	// The report at a tiny N, a fast follow schedule and a short latency, against a
	// binary built from this tree, so that a change which breaks it (a flag, a
	// variable, a schedule, the daemon, the report's arithmetic) fails here rather
	// than on the day the figures are measured. It checks that every figure is
	// reported, and the goals that hold at any size; at 4,000 invoices a complete
	// sweep is 40 requests, so the goal of 50x fewer requests an hour cannot be met,
	// and the report must say so and fail. The list is 40 pages: the edit 30 pages
	// from its newest end is outside the window of 20 pages the daemon starts with.
	t.Run("ReportsEveryFigureAndMissesTheGoalATinyNCannotMeet", func(t *testing.T) {
		if testing.Short() {
			t.Skip("bench test: builds erpsync and runs its daemon; skipped with -short")
		}
		ctx, bin, prefix := reportTest(t)
		var out bytes.Buffer
		err := Freshness(ctx, FreshnessOptions{
			AdminURL: testdb.AdminURL(), Binary: bin, Sizes: []int{4000}, PageSize: 100,
			Latency: 10 * time.Millisecond, Follow: time.Second, WindowEvery: 2 * time.Second, Samples: 3, Spread: 3 * time.Second,
			FarPages: 30, GoalInvoices: 4000, DatabasePrefix: prefix,
		}, &out)
		report := out.String()
		t.Logf("report:\n%s", report)
		var missed *GoalsMissed
		if !errors.As(err, &missed) {
			t.Fatalf("Freshness: %v, want the goals missed", err)
		}
		if len(missed.Misses) != 1 || !strings.Contains(missed.Misses[0], "50x fewer ERP requests an hour") {
			t.Errorf("goals missed: %q, want only the requests an hour (a sweep of 40 pages)", missed.Misses)
		}
		for _, want := range []string{
			"erpsync freshness: 4,000 invoices, 100 a page, 10ms an answer",
			"follows the invoices @every 1s, re-reads their\nnewest pages @every 2s and sweeps them @every 24h (as told, not the defaults;",
			"\nN = 4,000\n",
			"  loaded newest first, last key cursors:",
			"  new invoices and edits outside sweeps:",
			"  new invoices during complete sweeps:",
			"The policy's curve (a model, not measured)",
			"  ok      a new invoice in the warehouse within 45s at 4,000 invoices: ",
			"  ok      at most 3 requests per follow run with at most one page new: ",
			"  ok      an edit or a deletion inside the window in the warehouse within 15m, 30m when held",
			"  ok      any edit or deletion within 25h, 49h when held",
			"  MISSED  at 4,000 invoices, 50x fewer ERP requests an hour",
			"the report took ",
		} {
			if !strings.Contains(report, want) {
				t.Errorf("the report has no %q", want)
			}
		}
		// Each figure, in each of the four shapes.
		cells := func(label string) []string {
			m := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(label) + `(.*)$`).FindStringSubmatch(report)
			if m == nil {
				t.Errorf("the report has no line %q", label)
				return nil
			}
			c := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(m[1]), -1)
			if len(c) != len(shapes) {
				t.Errorf("%q: %d cells %q, want one per shape", label, len(c), c)
			}
			return c
		}
		number := func(label, cell string) float64 {
			m := regexp.MustCompile(`^[\d,.]+`).FindString(strings.TrimSpace(cell))
			v, err := strconv.ParseFloat(strings.ReplaceAll(m, ",", ""), 64)
			if err != nil {
				t.Errorf("%q: %q is not a figure", label, cell)
			}
			return v
		}
		for _, c := range cells("requests of a complete sweep") {
			if v := number("requests of a complete sweep", c); v != 40 {
				t.Errorf("requests of a complete sweep = %v, want 40 (4,000 invoices, 100 a page)", v)
			}
		}
		d, err := invoiceDefaults() // the report computes at the invoices' defaults, and says them
		if err != nil {
			t.Fatal(err)
		}
		for _, label := range []string{"a complete sweep at 10ms an answer", "a follow run, 0 new: requests (time)",
			"a follow run, 1 new: requests (time)", "a follow run, 1 new again", "a follow run, 250 new: requests (time)",
			"a window run: pages, requests (time)",
			"  outside sweeps", "  during a complete sweep",
			"  an edit 2 pages from the newest end", "  an edit 15 pages from the newest end", "  a deletion 2 pages from the newest end",
			"  inside the window: " + every(d.window) + " and a window run", "  outside it: " + every(d.sweep) + " and a complete sweep",
			"  before: a complete sweep per run, " + d.followSpec, "  follow runs " + d.followSpec + ", nothing new",
			"  window runs " + d.windowSpec, "  complete sweeps " + d.sweepSpec, "  all three, nothing new", "  all three, a new invoice every run",
			"  follow runs: runs, requests an hour", "  window runs: runs, requests (time) each", "  its window: pages",
			"  every request an hour (logins too)",
			"requests_per_hour 1,000: window, sweep every", "requests_per_hour 200: window, sweep every"} {
			for _, c := range cells(label) {
				if v := number(label, c); v <= 0 {
					t.Errorf("%q: %q, want a positive figure", label, c)
				}
			}
		}
		// 250 new invoices are three pages at least: more than one request.
		for _, c := range cells("a follow run, 250 new: requests (time)") {
			if v := number("250 new", c); v < 3 {
				t.Errorf("a follow run after 250 new invoices asked %v pages, want 3 at least", v)
			}
		}
		// The window reads the pages it was sized to, from the first page of a list
		// newest first or the anchor as many pages before the end of one oldest first.
		for _, c := range cells("  its window: pages") {
			if v := number("its window", c); v < 20 || v > 21 {
				t.Errorf("the daemon's window read %v pages, want the 20 of a window not yet learned (21: an oldest-first list's short newest page)", v)
			}
		}
		// The edit outside the window is left to the sweep: not written by the window
		// runs, written by the complete sweeps that followed.
		for _, c := range cells("  an edit 30 pages from the newest end, before a sweep") {
			if c != "not written" {
				t.Errorf("the edit outside the window: %q, want it not written before a sweep", c)
			}
		}
		for _, c := range cells("    once a complete sweep completed after it") {
			if c != "written" {
				t.Errorf("the edit outside the window once a sweep completed: %q, want written", c)
			}
		}
		for _, bad := range []string{"NaN", "Inf", "MISSING", "SWEPT", "NONE", "NO VERSION", "REFUSED", "error"} {
			if strings.Contains(report, bad) {
				t.Errorf("the report shows %q", bad)
			}
		}
		if left := benchDatabases(t, prefix); len(left) > 0 {
			t.Errorf("the report left its databases behind: %v", left)
		}
	})
}

// TestFreshnessArithmetic documents the figures the freshness report computes
// from what it measured, and how it judges them against its goals, on lanes
// whose figures are written here: no simulator, no warehouse.
func TestFreshnessArithmetic(t *testing.T) {
	// The schedules the report computes at, written out so that the figures below
	// do not move with the stream's declared defaults.
	d := schedules{followSpec: "@every 30s", windowSpec: "@every 10m", sweepSpec: "@every 24h",
		follow: 30 * time.Second, window: 10 * time.Minute, sweep: 24 * time.Hour}
	const n = 1000000
	// measured is a lane of a million invoices as a report measures one: a
	// complete sweep of 10,000 requests in 1,000 s, follow runs of one request, a
	// window run of 20 pages and 21 requests in 2 s, every change in the warehouse
	// soon.
	measured := func() *lane {
		return &lane{
			shape:         shapes[0],
			n:             n,
			sweepRequests: 10000,
			sweep:         sweepTime{secs: 1000, completed: 1},
			follows:       []followRun{{added: 0, requests: 1}, {added: 1, requests: 3}, {added: 1, requests: 1}, {added: 250, requests: 5}},
			windowRun:     windowRun{requests: 21, pages: 20, secs: 2},
			window:        windowRun{pages: 20},
			outside:       samples{secs: []float64{10, 20, 29}},
			during:        samples{secs: []float64{12, 25}},
			edits: []*edit{
				{pages: 2, issued: time.Now(), secs: 300, version: true},
				{pages: 15, issued: time.Now(), secs: 590, version: true},
				{pages: 2, delete: true, issued: time.Now(), secs: 200},
				{pages: 500, outside: true, issued: time.Now()},
			},
			farSwept:   1,
			daemonRuns: map[string]runsOf{"window": {runs: 2, secs: 5}},
		}
	}
	near := func(t *testing.T, what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6*max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}

	t.Run("RequestsAnHourAddEachKindOfRunAtItsSchedule", func(t *testing.T) {
		h := measured().hourly(d)
		// Before: a sweep per follow tick, back to back as it takes 1,000 s > 30 s.
		near(t, "before", h.before, 10000*3600/1000.0)
		near(t, "follow runs, nothing new", h.follow[0], 120)
		near(t, "follow runs, a new invoice at each (the second run with one new)", h.follow[1], 120)
		near(t, "window runs", h.window, 6*21)
		near(t, "complete sweeps", h.sweep, 10000/24.0)
		near(t, "all three", h.total[1], 120+126+10000/24.0)
		near(t, "times fewer", h.ratio[1], 36000/(120+126+10000/24.0))
	})

	t.Run("TimesNotWaitedForAreAScheduleAndARunTwiceWhenHeld", func(t *testing.T) {
		dv := measured().derived(d)
		if want := 10*time.Minute + 2*time.Second; dv.edit != want {
			t.Errorf("inside the window: %s, want %s (an interval and a window run)", dv.edit, want)
		}
		if want := 2 * (10*time.Minute + 2*time.Second); dv.held != want {
			t.Errorf("a held deletion inside the window: %s, want %s", dv.held, want)
		}
		if want := 24*time.Hour + 1000*time.Second; dv.sweep != want {
			t.Errorf("outside the window: %s, want %s (an interval and a sweep)", dv.sweep, want)
		}
		if want := 2 * (24*time.Hour + 1000*time.Second); dv.sweepHeld != want {
			t.Errorf("a held deletion outside the window: %s, want %s", dv.sweepHeld, want)
		}
	})

	t.Run("AnEditIsSeenByTheNextRunThatReadsItsPage", func(t *testing.T) {
		p := policy{windowPages: 20, windowEvery: 10 * time.Minute, windowRun: time.Minute, sweepEvery: 24 * time.Hour, sweepRun: time.Hour}
		for _, c := range []struct {
			page   int
			within time.Duration
			want   float64
		}{
			{0, 15 * time.Minute, 1},         // the window: an interval and a run at most
			{19, 6 * time.Minute, 5.0 / 11},  // (6 - 1) of 10 + 1 minutes
			{19, time.Minute, 0},             // not before the run has read it
			{20, 15 * time.Minute, 0},        // outside the window: the sweep's
			{500, 13 * time.Hour, 12.0 / 25}, // (13 - 1) of 24 + 1 hours
			{500, 26 * time.Hour, 1},         // a day, a sweep and more
		} {
			near(t, fmt.Sprintf("seen %d pages from the end within %s", c.page, c.within), p.seen(c.page, c.within), c.want)
		}
	})

	t.Run("TheCurveWeighsTheStatedEditsByWhereTheyLie", func(t *testing.T) {
		// 1,000 invoices a day, 100 a page: 20 pages are the last two days, so the
		// window holds the half of the edits made to invoices of the last day and a
		// sixth of the 30 % made to those 1 to 7 days old.
		p := policy{windowPages: 20, windowEvery: 10 * time.Minute, sweepEvery: 24 * time.Hour}
		// The others wait for the sweep: a 96th of them within 15 minutes, a 24th
		// within an hour. (The bands are summed over a thousand points each: a
		// thousandth is close enough.)
		inside := 0.50 + 0.30/6
		close := func(what string, got, want float64) {
			if math.Abs(got-want) > 1e-3 {
				t.Errorf("%s = %.4f, want %.4f", what, got, want)
			}
		}
		close("within 15 min", p.share(15*time.Minute, n, 100), inside+(1-inside)/96)
		close("within an hour", p.share(time.Hour, n, 100), inside+(1-inside)/24)
		close("within a day", p.share(24*time.Hour, n, 100), 1)
		wide := p
		wide.windowPages = n / 100
		close("within 15 min, the whole list a window", wide.share(15*time.Minute, n, 100), 1)
	})

	t.Run("ABudgetStretchesWindowRunsAndSweepsAsTheDaemonDoes", func(t *testing.T) {
		l := measured()
		p, asks, stretch, refused := l.budgeted(d, 1000, n, 100)
		if refused || stretch != 1 || p.windowEvery != d.window || p.sweepEvery != d.sweep {
			t.Errorf("a budget above what the defaults ask: stretch %v, refused %v, window %s, sweep %s; want the schedules as they are",
				stretch, refused, p.windowEvery, p.sweepEvery)
		}
		near(t, "asks at 1,000", asks, l.hourly(d).total[1])
		// The daemon's estimate: a request per follow run (120), the window's pages per
		// window run (6 x 20) and a sweep's pages per sweep (10,000 / 24) stretched to
		// fit what the follow runs leave of 400.
		p, asks, stretch, refused = l.budgeted(d, 400, n, 100)
		want := (120 + 10000/24.0) / (400 - 120)
		near(t, "stretch at 400", stretch, want)
		if refused || p.windowEvery != time.Duration(float64(d.window)*want) || p.sweepEvery != time.Duration(float64(d.sweep)*want) {
			t.Errorf("at 400: window %s, sweep %s, refused %v; want both %.3fx their schedules", p.windowEvery, p.sweepEvery, refused, want)
		}
		near(t, "asks at 400 (measured requests per run)", asks, 120+(126+10000/24.0)/want)
		if p.windowPages != 20 || p.windowRun != 2500*time.Millisecond || p.sweepRun != 1000*time.Second {
			t.Errorf("policy %+v, want the daemon's window (20 pages), its window runs' mean time (2.5 s), the sweep's time", p)
		}
		if _, _, _, refused := l.budgeted(d, 120, n, 100); !refused {
			t.Errorf("a budget the follow runs alone spend is not refused")
		}
	})

	t.Run("GoalsAreMetByFiguresWithinThem", func(t *testing.T) {
		o, err := FreshnessOptions{Sizes: []int{n}}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range o.goals(map[int][]*lane{n: {measured(), measured()}}, d) {
			if !g.checked || !g.ok {
				t.Errorf("%s %s: %s", g.verdict(), g.name, g.detail)
			}
		}
	})

	t.Run("EachGoalIsMissedByTheFigureItIsAbout", func(t *testing.T) {
		o, err := FreshnessOptions{Sizes: []int{n}}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		// The cases that miss the requests an hour too.
		alsoFewer := map[string]bool{"a sweep of 2 hours": true}
		for _, c := range []struct {
			what   string
			change func(*lane)
			goal   string // the start of the goal missed
			detail string // in what it says
		}{
			{"a new invoice after 46 s", func(l *lane) { l.during.secs = []float64{46} }, "a new invoice", "46.0 s at most"},
			{"a follow run of 4 requests", func(l *lane) { l.follows[1].requests = 4 }, "at most 3 requests", "4 at most"},
			{"an edit after 15 min and a second", func(l *lane) { l.edits[1].secs = 901 }, "an edit or a deletion inside", "an edit 15 pages"},
			{"an edit never seen", func(l *lane) { l.edits[0].secs, l.edits[0].missing = 0, true }, "an edit or a deletion inside", "not there after 21m"},
			{"an edit with no version", func(l *lane) { l.edits[0].version = false }, "an edit or a deletion inside", "no version"},
			{"a deletion after 16 min, not held", func(l *lane) { l.edits[2].secs = 960 }, "an edit or a deletion inside", "a deletion 2 pages"},
			{"a held deletion after 31 min", func(l *lane) { l.edits[2].secs, l.edits[2].held = 1860, true }, "an edit or a deletion inside", "1,860 s"},
			{"the edit outside left unwritten by a sweep", func(l *lane) { l.farSwept = -1 }, "any edit or deletion", "not written by a complete sweep"},
			// A sweep of 2 hours also makes sweeps back to back ask 5,000 an hour, not 36,000.
			{"a sweep of 2 hours", func(l *lane) { l.sweep.secs = 7200 }, "any edit or deletion", "26.0 h"},
			{"window runs of 300 requests", func(l *lane) { l.windowRun.requests = 300 }, "at 1,000,000 invoices, 50x fewer", "follow 120, window 1,800"},
		} {
			l := measured()
			c.change(l)
			var missed []string
			for _, g := range o.goals(map[int][]*lane{n: {measured(), l}}, d) {
				if g.checked && !g.ok {
					missed = append(missed, g.name+": "+g.detail)
				}
			}
			if alsoFewer[c.what] {
				if len(missed) != 2 || !strings.HasPrefix(missed[1], "at 1,000,000 invoices, 50x fewer") {
					t.Errorf("%s: missed %q, want the requests an hour missed too", c.what, missed)
					continue
				}
				missed = missed[:1]
			}
			if len(missed) != 1 || !strings.HasPrefix(missed[0], c.goal) || !strings.Contains(missed[0], c.detail) {
				t.Errorf("%s: missed %q, want only %q, saying %q", c.what, missed, c.goal, c.detail)
			}
		}
		// A held deletion has twice as long as one that is not.
		l := measured()
		l.edits[2].secs, l.edits[2].held = 1700, true
		for _, g := range o.goals(map[int][]*lane{n: {l}}, d) {
			if !g.ok {
				t.Errorf("a deletion held at a page boundary, there after 1,700 s: %s missed (%s)", g.name, g.detail)
			}
		}
	})

	t.Run("AnEditBeyondAShortListIsNeitherMadeNorJudged", func(t *testing.T) {
		o, err := FreshnessOptions{Sizes: []int{10000}}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		// 10,000 invoices are 100 pages: the edit 500 pages back is beyond them.
		var beyond []int
		for _, e := range o.edits(10000) {
			if e.at < 0 || e.at >= o.EditSpread {
				t.Errorf("%s at %s, want a moment within %s", e.label(), e.at, o.EditSpread)
			}
			if e.beyond {
				beyond = append(beyond, e.pages)
			}
		}
		if !slices.Equal(beyond, []int{500}) {
			t.Errorf("edits beyond a list of 100 pages: %v, want only the one 500 pages back", beyond)
		}
		l := measured()
		l.edits[3].beyond, l.edits[3].issued, l.farSwept = true, time.Time{}, 0
		for _, g := range o.goals(map[int][]*lane{10000: {l}}, d) {
			if !g.ok {
				t.Errorf("an edit beyond the list: %s missed (%s)", g.name, g.detail)
			}
		}
	})

	t.Run("BelowTheGoalsSizeOnlyTheFollowRunsAreJudged", func(t *testing.T) {
		o, err := FreshnessOptions{Sizes: []int{1000}}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		l := measured()
		l.edits[0].secs, l.windowRun.requests = 5000, 5000
		for _, g := range o.goals(map[int][]*lane{1000: {l}}, d) {
			follows := strings.HasPrefix(g.name, "at most 3 requests")
			if g.checked != follows || !g.ok {
				t.Errorf("at 1,000 invoices: %s %s (%s); want only the follow runs checked", g.verdict(), g.name, g.detail)
			}
		}
	})

	t.Run("TheDaemonsRequestsAreSummedByKindFromItsMetrics", func(t *testing.T) {
		got, err := requestKinds(`# HELP erpsync_erp_requests_total HTTP exchanges with the ERP
# TYPE erpsync_erp_requests_total counter
erpsync_erp_requests_total{code="200",kind="follow",route="/sales/api/invoices/list/",source="main",stream="invoices"} 240
erpsync_erp_requests_total{code="200",kind="window",route="/sales/api/invoices/list/",source="main",stream="invoices"} 42
erpsync_erp_requests_total{code="500",kind="window",route="/sales/api/invoices/list/",source="main",stream="invoices"} 1
erpsync_erp_requests_total{code="200",kind="login",route="/api/auth/login/",source="main",stream=""} 2
erpsync_erp_retries_total{reason="server_error",route="/sales/api/invoices/list/",source="main"} 1
`)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]float64{"follow": 240, "window": 43, "login": 2}; !maps.Equal(got, want) {
			t.Errorf("requests by kind %v, want %v", got, want)
		}
		if _, err := requestKinds(`erpsync_erp_requests_total{kind="follow"} many`); err == nil {
			t.Errorf("a count that is not a number read without an error")
		}
	})

	t.Run("AnEditSaysWhenAndHowItReachedTheWarehouse", func(t *testing.T) {
		issued := time.Now()
		for _, c := range []struct {
			e    edit
			want string
		}{
			{edit{}, "-"},
			{edit{issued: issued, secs: 312.4, version: true}, "312 s"},
			{edit{issued: issued, secs: 312.4}, "312 s NO VERSION"},
			{edit{issued: issued, delete: true, secs: 700, held: true}, "700 s (held)"},
			{edit{issued: issued, missing: true}, "MISSING"},
			{edit{issued: issued, outside: true}, "not written"},
			{edit{issued: issued, outside: true, secs: 8, version: true}, "written, 8.0 s"},
			{edit{beyond: true, outside: true}, "beyond the list"},
		} {
			if got := c.e.String(); got != c.want {
				t.Errorf("%+v: %q, want %q", c.e, got, c.want)
			}
		}
	})
}
