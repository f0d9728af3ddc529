package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/sync/streams"
)

// The freshness report behind `make freshness`: how soon a new invoice
// reaches the warehouse while the daemon follows the list, and what
// following costs the ERP, in each of the four shapes a list that can be
// followed may have (oldest or newest first; cursors that are positions
// or the last key seen), against the simulator answering slowly as an
// ERP does. Each shape is a lane (lane.go): a simulator, a warehouse and
// the erpsync processes measured on them. The lanes load one after the
// other (that is CPU), then are measured side by side (that is mostly
// waiting for the ERP's answers and for the follow schedule).

// FreshnessOptions of the freshness report. Zero values take the
// defaults of `make freshness`.
type FreshnessOptions struct {
	AdminURL string // server where the report creates its databases
	Binary   string // the erpsync binary measured
	Sizes    []int  // invoices of the simulator: one report each (100,000 and 1,000,000)
	PageSize int    // the simulator's page-size cap and the page_size asked (100)
	// Latency of each answer of the simulator once the warehouse is
	// loaded (100 ms).
	Latency time.Duration
	// Follow is the daemon's follow schedule, @every Follow (the
	// stream's default, 30 s).
	Follow time.Duration
	// Samples new invoices are issued in each shape outside sweeps, and
	// as many during sweeps (10), at random moments over Window (five
	// follow intervals).
	Samples int
	Window  time.Duration
	// GoalInvoices: the goals on freshness and on requests an hour are
	// checked at this many invoices and more (1,000,000).
	GoalInvoices int
	// DatabasePrefix starts the names of the databases the report
	// creates and drops (default: erpsync_bench_ and a random suffix).
	DatabasePrefix string
}

// The goals the report checks; its error names those missed.
const (
	freshnessGoal      = 45 * time.Second // a new invoice in the warehouse
	followRequestsGoal = 3                // requests of a follow run with at most one page new
	fewerRequestsGoal  = 100              // times fewer ERP requests an hour than a sweep per run
)

// invoicesPath is the route of the invoice list, whose requests are
// counted.
var invoicesPath = streams.Invoices().Path

func (o FreshnessOptions) withDefaults() (FreshnessOptions, error) {
	d, err := invoiceDefaults()
	if err != nil {
		return o, err
	}
	if len(o.Sizes) == 0 {
		o.Sizes = []int{100000, 1000000}
	}
	if o.PageSize <= 0 {
		o.PageSize = 100
	}
	if o.Latency <= 0 {
		o.Latency = 100 * time.Millisecond
	}
	if o.Follow <= 0 {
		o.Follow = d.follow
	}
	if o.Samples <= 0 {
		o.Samples = 10
	}
	if o.Window <= 0 {
		o.Window = 5 * o.Follow
	}
	if o.GoalInvoices <= 0 {
		o.GoalInvoices = 1000000
	}
	if o.DatabasePrefix == "" {
		o.DatabasePrefix = randomPrefix()
	}
	return o, nil
}

// patience is how long an invoice issued may take to reach the warehouse
// before it is counted missing.
func (o FreshnessOptions) patience() time.Duration {
	return max(4*o.Follow, o.Follow+time.Minute)
}

// schedules are the invoices' default schedules, which the requests an
// hour are computed at.
type schedules struct {
	followSpec, sweepSpec string
	follow, sweep         time.Duration
}

func invoiceDefaults() (schedules, error) {
	info := streams.Invoices().Declared()
	s := schedules{followSpec: info.ScheduleDefault(), sweepSpec: info.SweepScheduleDefault()}
	for _, x := range []struct {
		spec string
		d    *time.Duration
	}{{s.followSpec, &s.follow}, {s.sweepSpec, &s.sweep}} {
		sched, err := config.ParseSchedule(x.spec)
		if err != nil {
			return s, fmt.Errorf("the invoices' default schedule %q: %w", x.spec, err)
		}
		*x.d = config.Interval(sched, time.Now())
	}
	return s, nil
}

// Freshness measures and prints the freshness report to out. It returns
// a *GoalsMissed when the figures miss a goal.
func Freshness(ctx context.Context, o FreshnessOptions, out io.Writer) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	d, err := invoiceDefaults()
	if err != nil {
		return err
	}
	began := time.Now()
	sizes := make([]string, len(o.Sizes))
	for i, n := range o.Sizes {
		sizes[i] = thousands(n)
	}
	fmt.Fprintf(out, `erpsync freshness: %s invoices, %d a page, %s an answer, each of the four shapes of a list
that can be followed. The daemon (erpsync run) follows the invoices @every %s (sweeps @every %s:
none comes); %d new invoices per shape at random moments over %s, outside sweeps, then as many
while complete sweeps (erpsync sync invoices) run back to back. %d CPUs, load average %s.
`, strings.Join(sizes, " and "), o.PageSize, o.Latency, every(o.Follow), every(farSweeps), o.Samples, every(o.Window), runtime.NumCPU(), loadAverage())
	measured := map[int][]*lane{}
	for _, n := range o.Sizes {
		fmt.Fprintf(out, "\nN = %s\n", thousands(n))
		lanes, err := o.measure(ctx, n, out)
		if err != nil {
			return fmt.Errorf("%s invoices: %w", thousands(n), err)
		}
		measured[n] = lanes
		printLanes(out, lanes, o, d)
	}
	goals := o.goals(measured, d)
	fmt.Fprintf(out, "\ngoals\n")
	var missed []string
	for _, g := range goals {
		fmt.Fprintf(out, "  %-7s %s: %s\n", g.verdict(), g.name, g.detail)
		if g.checked && !g.ok {
			missed = append(missed, g.name+" ("+g.detail+")")
		}
	}
	fmt.Fprintf(out, "\nthe report took %s; load average at its end %s\n", time.Since(began).Round(time.Second), loadAverage())
	if len(missed) > 0 {
		return &GoalsMissed{Misses: missed}
	}
	return nil
}

// measure runs the report's steps for n invoices, each on every lane.
func (o FreshnessOptions) measure(ctx context.Context, n int, out io.Writer) ([]*lane, error) {
	ctx, stop := context.WithCancel(ctx) // the simulators' serving
	defer stop()
	var lanes []*lane
	defer func() {
		for _, l := range lanes {
			l.close()
		}
	}()
	for i, sh := range shapes {
		start := time.Now()
		l, err := o.newLane(ctx, sh, n, fmt.Sprintf("%s%d_%d", o.DatabasePrefix, n, i))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sh, err)
		}
		lanes = append(lanes, l)
		if err := l.load(ctx); err != nil {
			return nil, fmt.Errorf("%s: loading: %w", sh, err)
		}
		fmt.Fprintf(out, "  loaded %-31s %6.1f s (two complete sweeps, no latency: %.1f s and %.1f s)\n", sh.String()+":", time.Since(start).Seconds(), l.loads[0], l.loads[1])
	}
	for _, l := range lanes {
		l.sim.SetLatency(o.Latency)
	}
	steps := []struct {
		what string
		run  func(*lane) error
	}{
		{"follow runs after " + followsAfter() + " new invoices", func(l *lane) error { return l.measureFollows(ctx) }},
		{"the daemons' first follow runs", func(l *lane) error { return l.startDaemon(ctx, o) }},
		{"new invoices outside sweeps", func(l *lane) error { return l.measureOutside(ctx, o) }},
		{"new invoices during complete sweeps", func(l *lane) error { return l.measureDuring(ctx, o) }},
	}
	for _, step := range steps {
		start := time.Now()
		errs := make([]error, len(lanes))
		var wg sync.WaitGroup
		for i, l := range lanes {
			wg.Go(func() {
				if err := step.run(l); err != nil {
					errs[i] = fmt.Errorf("%s: %s: %w", l.shape, step.what, err)
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "  %-46s %6.1f s (the four shapes at once)\n", step.what+":", time.Since(start).Seconds())
	}
	return lanes, nil
}

// followsAfter lists the new invoices before each measured follow run.
func followsAfter() string {
	s := make([]string, len(addedByFollow))
	for i, n := range addedByFollow {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// hourly is what the ERP is asked an hour: before follow runs, a complete
// sweep on every tick of the follow schedule (back to back when a sweep
// takes longer); now, follow runs on that schedule and a complete sweep
// on the sweep schedule (weekly, the default, or daily), with nothing new
// at each follow run or one new invoice at each. Computed from the
// requests and the sweep time measured.
type hourly struct {
	before                  float64
	weekly, daily           [2]float64 // nothing new, one new invoice at each follow run
	weeklyRatio, dailyRatio [2]float64
}

func (l *lane) hourly(d schedules) hourly {
	sweep := float64(l.sweepRequests)
	var h hourly
	h.before = sweep * 3600 / max(l.sweep.secs, d.follow.Seconds())
	follows := float64(time.Hour) / float64(d.follow)
	for i, f := range []followRun{l.follows[followIdle], l.follows[followBusy]} {
		h.weekly[i] = follows*float64(f.requests) + sweep*float64(time.Hour)/float64(d.sweep)
		h.daily[i] = follows*float64(f.requests) + sweep*float64(time.Hour)/float64(24*time.Hour)
		h.weeklyRatio[i], h.dailyRatio[i] = h.before/h.weekly[i], h.before/h.daily[i]
	}
	return h
}

// printLanes prints the figures of one size, a column per shape.
func printLanes(out io.Writer, lanes []*lane, o FreshnessOptions, d schedules) {
	row := func(label string, cell func(*lane) string) {
		fmt.Fprintf(out, "  %-46s", label)
		for _, l := range lanes {
			fmt.Fprintf(out, "%18s", cell(l))
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintln(out)
	row("", func(l *lane) string { return l.shape.first })
	row("", func(l *lane) string { return l.shape.second + " cursors" })
	row("requests of a complete sweep", func(l *lane) string { return thousands(l.sweepRequests) })
	row(fmt.Sprintf("a complete sweep at %s an answer", o.Latency), func(l *lane) string {
		if l.sweep.completed > 0 {
			return seconds(l.sweep.secs)
		}
		return seconds(l.sweep.secs) + " (c)"
	})
	for i, added := range addedByFollow {
		label := fmt.Sprintf("a follow run, %d new: requests (time)", added)
		if i > 0 && added == addedByFollow[i-1] {
			label = fmt.Sprintf("a follow run, %d new again", added)
		}
		row(label, func(l *lane) string {
			f := l.follows[i]
			if f.swept != "" {
				return fmt.Sprintf("%d SWEPT", f.requests)
			}
			return fmt.Sprintf("%d (%.1f s)", f.requests, f.secs)
		})
	}
	fmt.Fprintf(out, "  a new invoice in the warehouse after, median / max:\n")
	row("  outside sweeps", func(l *lane) string { return l.outside.String() })
	row("  during a complete sweep", func(l *lane) string { return l.during.String() })
	fmt.Fprintf(out, "  ERP requests an hour at the defaults (computed):\n")
	row(fmt.Sprintf("  before: a complete sweep per run, %s", d.followSpec), func(l *lane) string { return thousands(int(l.hourly(d).before + 0.5)) })
	for i, what := range []string{"nothing new", "1 new each run"} {
		row(fmt.Sprintf("  follow + sweep %s, %s", d.sweepSpec, what), func(l *lane) string {
			h := l.hourly(d)
			return fmt.Sprintf("%s = %.0fx", thousands(int(h.weekly[i]+0.5)), h.weeklyRatio[i])
		})
	}
	for i, what := range []string{"nothing new", "1 new each run"} {
		row(fmt.Sprintf("  follow + a daily sweep, %s", what), func(l *lane) string {
			h := l.hourly(d)
			return fmt.Sprintf("%s = %.0fx", thousands(int(h.daily[i]+0.5)), h.dailyRatio[i])
		})
	}
	row("the daemon's ERP requests an hour (measured)", func(l *lane) string {
		return thousands(int(float64(l.daemonAll)*float64(time.Hour)/float64(l.daemonWindow) + 0.5))
	})
	if stopped := stoppedSweeps(lanes); stopped != "" {
		fmt.Fprintf(out, `
  (c) computed: a sweep's requests at the rate of the sweep stopped once the new invoices had
      arrived, pages read in that time, by shape: %s.`, stopped)
	}
	fmt.Fprintf(out, `
  Requests an hour (computed, at the defaults): before follow runs, a complete sweep on every
  tick of %s, back to back when it takes longer; now a follow run every %s asking what the
  follow run above with 0 new asked (nothing new) or with 1 new again (1 new each run), and a
  complete sweep every %s (or daily). The daemon's count (measured) is every request it made,
  logins included, while the invoices outside sweeps were issued (%s, one every %s on average).
`, d.followSpec, every(d.follow), every(d.sweep), every(lanes[0].daemonWindow.Round(time.Second)),
		every((o.Window / time.Duration(o.Samples)).Round(100*time.Millisecond)))
}

// stoppedSweeps says what the stopped sweeps had read, and in how long
// ("" when every lane's sweeps completed).
func stoppedSweeps(lanes []*lane) string {
	var s []string
	for _, l := range lanes {
		if l.sweep.completed == 0 {
			s = append(s, fmt.Sprintf("%s in %.0f s", thousands(int(l.sweep.pages)), l.sweep.elapsed))
		}
	}
	return strings.Join(s, ", ")
}

func (s samples) String() string {
	if len(s.secs) == 0 {
		return fmt.Sprintf("%d MISSING", s.missing)
	}
	t := fmt.Sprintf("%.1f / %.1f s", median(s.secs), slices.Max(s.secs))
	if s.missing > 0 {
		t += fmt.Sprintf(" +%d MISSING", s.missing)
	}
	return t
}

// goal is one goal of the report, as the figures meet it.
type goal struct {
	name    string
	checked bool // false: no figure the goal is about was measured
	ok      bool
	detail  string
}

func (g goal) verdict() string {
	switch {
	case !g.checked:
		return "-"
	case g.ok:
		return "ok"
	}
	return "MISSED"
}

// goals checks the figures against the report's goals: freshness and
// requests an hour at o.GoalInvoices and above, requests per follow run
// at every size. Each is judged on the worst lane.
func (o FreshnessOptions) goals(measured map[int][]*lane, d schedules) []goal {
	fresh := goal{name: fmt.Sprintf("a new invoice in the warehouse within %s at %s invoices", freshnessGoal, thousands(o.GoalInvoices)), ok: true}
	follow := goal{name: fmt.Sprintf("at most %d requests per follow run with at most one page new", followRequestsGoal), ok: true}
	fewer := goal{name: fmt.Sprintf("at %s invoices, %dx fewer ERP requests an hour than a complete sweep per run", thousands(o.GoalInvoices), fewerRequestsGoal), ok: true}
	worstFresh, worstRatio, worstFollow := -1.0, -1.0, -1
	for _, n := range slices.Sorted(maps.Keys(measured)) {
		for _, l := range measured[n] {
			for _, f := range l.follows {
				if f.added > 1 {
					continue // more than one page may be new
				}
				follow.checked = true
				if f.requests > worstFollow {
					worstFollow = f.requests
					follow.detail = fmt.Sprintf("%d at most (%s, %d new, N = %s)", f.requests, l.shape, f.added, thousands(n))
				}
				if f.requests > followRequestsGoal || f.swept != "" {
					follow.ok = false
				}
			}
			if n < o.GoalInvoices {
				continue
			}
			fresh.checked, fewer.checked = true, true
			for _, phase := range []struct {
				what string
				s    samples
			}{{"outside sweeps", l.outside}, {"during a sweep", l.during}} {
				if phase.s.missing > 0 {
					fresh.ok = false
					fresh.detail = fmt.Sprintf("%d invoices not there after %s (%s, %s, N = %s)", phase.s.missing, o.patience(), l.shape, phase.what, thousands(n))
					worstFresh = 1e9
					continue
				}
				if len(phase.s.secs) == 0 {
					continue
				}
				if m := slices.Max(phase.s.secs); m > worstFresh {
					worstFresh = m
					fresh.detail = fmt.Sprintf("%.1f s at most (%s, %s, N = %s)", m, l.shape, phase.what, thousands(n))
				}
			}
			// Judged on the busier case: a new invoice at every follow run.
			h := l.hourly(d)
			if r := h.weeklyRatio[1]; worstRatio < 0 || r < worstRatio {
				worstRatio = r
				fewer.detail = fmt.Sprintf("%.0fx at least, with a new invoice at every follow run (%s: %s an hour against %s; %.0fx with nothing new)",
					r, l.shape, thousands(int(h.weekly[1]+0.5)), thousands(int(h.before+0.5)), h.weeklyRatio[0])
			}
		}
	}
	if worstFresh > freshnessGoal.Seconds() {
		fresh.ok = false
	}
	if worstRatio >= 0 && worstRatio < fewerRequestsGoal {
		fewer.ok = false
	}
	for _, g := range []*goal{&fresh, &fewer} {
		if !g.checked {
			g.detail = fmt.Sprintf("not checked: no size of %s invoices or more", thousands(o.GoalInvoices))
		}
	}
	return []goal{fresh, follow, fewer}
}

// seconds writes a time in seconds, to a tenth below ten.
func seconds(s float64) string {
	if s < 10 {
		return fmt.Sprintf("%.1f s", s)
	}
	return thousands(int(s+0.5)) + " s"
}

// every writes a duration as a schedule does: 8760h, not 8760h0m0s.
func every(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// thousands writes n with commas between its thousands: 1,000,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// loadAverage is the machine's load average (1, 5 and 15 minutes), as
// uptime says it: other work on the machine slows what is measured.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
