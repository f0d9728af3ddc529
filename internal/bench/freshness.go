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
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erpcost"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync/streams"
)

// The freshness report behind `make freshness`: how soon a new invoice,
// an edit and a deletion reach the warehouse while the daemon runs at its
// schedules (follow runs for what is new, window runs for the newest
// pages, complete sweeps for everything), and what that costs the ERP, in
// each of the four shapes a list that can be followed may have (oldest or
// newest first; cursors that are positions or the last key seen), against
// the simulator answering slowly as an ERP does. Each shape is a lane
// (lane.go): a simulator, a warehouse and the erpsync processes measured
// on them. The lanes load one after the other (that is CPU), then are
// measured side by side (that is mostly waiting for the ERP's answers and
// for the schedules). What a day-long sweep schedule gives is derived from
// the schedule and a sweep's measured duration, not waited for; and the
// policy's curve (the share of a stated stream of edits seen within 15
// minutes, an hour and a day at three budgets) is a model built on the
// measured costs.

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
	// Follow and WindowEvery are the daemon's follow and window
	// schedules, @every each (the stream's defaults, 30 s and 10 minutes;
	// when either differs, the daemon is given all three schedules, its
	// sweeps at the stream's default).
	Follow, WindowEvery time.Duration
	// Samples new invoices are issued in each shape outside sweeps, and
	// as many during sweeps (10), at random moments over Spread (five
	// follow intervals).
	Samples int
	Spread  time.Duration
	// Edits, at random moments over EditSpread (one window interval) while
	// the new invoices outside sweeps are issued: a change to an invoice
	// each of EditPages from the list's newest end (2 and 15: inside the
	// window), a deletion DeletePages from it (2), and a change FarPages
	// from it (500: outside the window, left to the sweep; negative: none).
	EditSpread  time.Duration
	EditPages   []int
	DeletePages int
	FarPages    int
	// Budgets are the requests_per_hour the policy's curve is modelled at
	// (1,000, 400 and 200).
	Budgets []int
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
	// An edit or a deletion inside the window in the warehouse; a
	// deletion held at a page boundary for the next window run to
	// confirm.
	editGoal = 15 * time.Minute
	heldGoal = 30 * time.Minute
	// Any edit and any deletion, left to the sweep; a deletion held at a
	// page boundary outside the window.
	anyChangeGoal  = 25 * time.Hour
	heldSweepsGoal = 49 * time.Hour
	// Times fewer ERP requests an hour, follow runs, window runs and
	// sweeps together at the defaults, than complete sweeps back to back:
	// follow runs alone would give 100x and more; the window and a daily
	// sweep spend half of that on changes.
	fewerRequestsGoal = 50
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
	if o.WindowEvery <= 0 {
		o.WindowEvery = d.window
	}
	if o.Samples <= 0 {
		o.Samples = 10
	}
	if o.Spread <= 0 {
		o.Spread = 5 * o.Follow
	}
	if o.EditSpread <= 0 {
		o.EditSpread = o.WindowEvery
	}
	if len(o.EditPages) == 0 {
		o.EditPages = []int{2, 15}
	}
	if o.DeletePages <= 0 {
		o.DeletePages = 2
	}
	if o.FarPages == 0 {
		o.FarPages = 500
	}
	if len(o.Budgets) == 0 {
		o.Budgets = []int{1000, 400, 200}
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

// editPatience is how long an edit inside the window may take to reach
// the warehouse before it is counted missing: two window intervals, three
// for a deletion (held at a page boundary, it waits for a second window
// run), and a minute.
func (o FreshnessOptions) editPatience(deletion bool) time.Duration {
	if deletion {
		return 3*o.WindowEvery + time.Minute
	}
	return 2*o.WindowEvery + time.Minute
}

// daemonSchedules are the variables that set the daemon's schedules: none
// at the stream's defaults, so that the report measures the defaults as
// an installation gets them; else all three (a schedule set alone would
// make every run a complete sweep, as it did before streams followed).
func (o FreshnessOptions) daemonSchedules() []string {
	d, err := invoiceDefaults()
	if err == nil && o.Follow == d.follow && o.WindowEvery == d.window {
		return nil
	}
	return []string{"ERPSYNC_SCHEDULE=@every " + every(o.Follow), "ERPSYNC_WINDOW_SCHEDULE=@every " + every(o.WindowEvery),
		"ERPSYNC_SWEEP_SCHEDULE=" + d.sweepSpec}
}

// schedules are the invoices' default schedules, which the requests an
// hour, the derived figures and the policy's curve are computed at.
type schedules struct {
	followSpec, windowSpec, sweepSpec string
	follow, window, sweep             time.Duration
}

func invoiceDefaults() (schedules, error) {
	info := streams.Invoices().Declared()
	s := schedules{followSpec: info.ScheduleDefault(), windowSpec: info.WindowSchedule, sweepSpec: info.SweepScheduleDefault()}
	for _, x := range []struct {
		spec string
		d    *time.Duration
	}{{s.followSpec, &s.follow}, {s.windowSpec, &s.window}, {s.sweepSpec, &s.sweep}} {
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
	atDefaults := "at the invoices' defaults"
	if o.daemonSchedules() != nil {
		atDefaults = "as told, not the defaults"
	}
	fmt.Fprintf(out, `erpsync freshness: %s invoices, %d a page, %s an answer, each of the four shapes of a list
that can be followed. The daemon (erpsync run) follows the invoices @every %s, re-reads their
newest pages @every %s and sweeps them @every %s (%s; no sweep comes:
the loads have just swept). %d new invoices per shape at random moments over %s, outside sweeps;
meanwhile, at random moments over %s, an edit %s pages from the list's newest end, a deletion
%d pages from it, and an edit %d pages from it (outside the window: left to the sweep, not waited
for). Then %d new invoices while complete sweeps (erpsync sync invoices) run back to back.
%d CPUs, load average %s.
`, strings.Join(sizes, " and "), o.PageSize, o.Latency, every(o.Follow), every(o.WindowEvery), every(d.sweep), atDefaults,
		o.Samples, every(o.Spread), every(o.EditSpread), joinInts(o.EditPages, " and "), o.DeletePages, o.FarPages, o.Samples,
		runtime.NumCPU(), loadAverage())
	measured := map[int][]*lane{}
	for _, n := range o.Sizes {
		fmt.Fprintf(out, "\nN = %s\n", thousands(n))
		lanes, err := o.measure(ctx, n, out)
		if err != nil {
			return fmt.Errorf("%s invoices: %w", thousands(n), err)
		}
		measured[n] = lanes
		printLanes(out, lanes, o, d)
		printCurve(out, lanes, n, o, d)
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

// joinInts writes ns with sep between them.
func joinInts(ns []int, sep string) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
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
		{"follow runs after " + followsAfter() + " new invoices, a window run", func(l *lane) error {
			if err := l.measureFollows(ctx); err != nil {
				return err
			}
			return l.measureWindow(ctx)
		}},
		{"the daemons' first follow runs", func(l *lane) error { return l.startDaemon(ctx, o) }},
		{"new invoices and edits outside sweeps", func(l *lane) error {
			var wg sync.WaitGroup
			var invoices, edits error
			wg.Go(func() { invoices = l.measureOutside(ctx, o) })
			wg.Go(func() { edits = l.measureEdits(ctx, o) })
			wg.Wait()
			return errors.Join(invoices, edits)
		}},
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
		fmt.Fprintf(out, "  %-58s %6.1f s (the four shapes at once)\n", step.what+":", time.Since(start).Seconds())
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
// takes longer); at the defaults, follow runs (with nothing new at each,
// or one new invoice at each), window runs and complete sweeps, each on
// its schedule. Computed from the requests of each kind of run and the
// sweep time measured.
type hourly struct {
	before        float64
	follow        [2]float64 // nothing new, one new invoice at each follow run
	window, sweep float64
	total, ratio  [2]float64
}

func (l *lane) hourly(d schedules) hourly {
	h := hourly{
		before: float64(l.sweepRequests) * 3600 / max(l.sweep.secs, d.follow.Seconds()),
		window: perHour(d.window) * float64(l.windowRun.requests),
		sweep:  perHour(d.sweep) * float64(l.sweepRequests),
	}
	for i, f := range []followRun{l.follows[followIdle], l.follows[followBusy]} {
		h.follow[i] = perHour(d.follow) * float64(f.requests)
		h.total[i] = h.follow[i] + h.window + h.sweep
		h.ratio[i] = h.before / h.total[i]
	}
	return h
}

// perHour is how many times an hour something every d happens.
func perHour(d time.Duration) float64 { return float64(time.Hour) / float64(d) }

// derived are the times the report derives rather than waits for, at the
// defaults: inside the window, a window interval and a window run (an edit
// made just after the run read its page waits for the next), twice that
// for a deletion held at a page boundary; outside it, a sweep interval and
// a complete sweep, twice that for a deletion held at a page boundary. The
// scheduler counts an interval from the end of the run before.
type derived struct {
	edit, held, sweep, sweepHeld time.Duration
}

func (l *lane) derived(d schedules) derived {
	run := secs(l.windowRun.secs)
	sweep := secs(l.sweep.secs)
	return derived{edit: d.window + run, held: 2 * (d.window + run), sweep: d.sweep + sweep, sweepHeld: 2 * (d.sweep + sweep)}
}

// secs is s seconds.
func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// printLanes prints the figures of one size, a column per shape.
func printLanes(out io.Writer, lanes []*lane, o FreshnessOptions, d schedules) {
	row := func(label string, cell func(*lane) string) {
		fmt.Fprintf(out, "  %-50s", label)
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
	row("a window run: pages, requests (time)", func(l *lane) string {
		return fmt.Sprintf("%d, %d (%.1f s)", l.windowRun.pages, l.windowRun.requests, l.windowRun.secs)
	})
	fmt.Fprintf(out, "  a new invoice in the warehouse after, median / max:\n")
	row("  outside sweeps", func(l *lane) string { return l.outside.String() })
	row("  during a complete sweep", func(l *lane) string { return l.during.String() })
	fmt.Fprintf(out, "  a change at the ERP in the warehouse after (window runs @every %s):\n", every(o.WindowEvery))
	for i := range lanes[0].edits {
		e := lanes[0].edits[i]
		label := "  " + e.label()
		if e.outside {
			label += ", before a sweep"
		}
		row(label, func(l *lane) string { return l.edits[i].String() })
		if e.outside {
			row("    once a complete sweep completed after it", func(l *lane) string {
				switch l.farSwept {
				case 1:
					return "written"
				case -1:
					return "MISSING"
				}
				return "none completed"
			})
		}
	}
	fmt.Fprintf(out, "  at most, at the defaults (derived, not waited for):\n")
	row(fmt.Sprintf("  inside the window: %s and a window run", every(d.window)), func(l *lane) string { return minutes(l.derived(d).edit) })
	row("    a deletion held at a page boundary: twice", func(l *lane) string { return minutes(l.derived(d).held) })
	row(fmt.Sprintf("  outside it: %s and a complete sweep", every(d.sweep)), func(l *lane) string { return hours(l.derived(d).sweep) })
	row("    a deletion held at a page boundary: twice", func(l *lane) string { return hours(l.derived(d).sweepHeld) })
	fmt.Fprintf(out, "  ERP requests an hour at the defaults (computed):\n")
	row(fmt.Sprintf("  before: a complete sweep per run, %s", d.followSpec), func(l *lane) string { return thousands(int(l.hourly(d).before + 0.5)) })
	row(fmt.Sprintf("  follow runs %s, nothing new", d.followSpec), func(l *lane) string { return thousands(int(l.hourly(d).follow[0] + 0.5)) })
	row("    a new invoice at every follow run", func(l *lane) string { return thousands(int(l.hourly(d).follow[1] + 0.5)) })
	row(fmt.Sprintf("  window runs %s", d.windowSpec), func(l *lane) string { return thousands(int(l.hourly(d).window + 0.5)) })
	row(fmt.Sprintf("  complete sweeps %s", d.sweepSpec), func(l *lane) string { return thousands(int(l.hourly(d).sweep + 0.5)) })
	for i, what := range []string{"nothing new", "a new invoice every run"} {
		row("  all three, "+what, func(l *lane) string {
			h := l.hourly(d)
			return fmt.Sprintf("%s = %.0fx", thousands(int(h.total[i]+0.5)), h.ratio[i])
		})
	}
	fmt.Fprintf(out, "  the daemon, measured while the edits were made (%s):\n", every(lanes[0].editWindow.Round(time.Second)))
	row("  follow runs: runs, requests an hour", func(l *lane) string {
		return fmt.Sprintf("%d, %s", l.daemonRuns["follow"].runs, thousands(int(l.daemonKinds["follow"]*perHour(l.editWindow)+0.5)))
	})
	row("  window runs: runs, requests (time) each", func(l *lane) string {
		r := l.daemonRuns["window"]
		if r.runs == 0 {
			return "NONE"
		}
		return fmt.Sprintf("%d, %.1f (%.1f s)", r.runs, l.daemonKinds["window"]/float64(r.runs), r.secs/float64(r.runs))
	})
	row("  its window: pages", func(l *lane) string { return strconv.Itoa(l.window.pages) })
	row("  every request an hour (logins too)", func(l *lane) string {
		var all float64
		for _, n := range l.daemonKinds {
			all += n
		}
		return thousands(int(all*perHour(l.editWindow) + 0.5))
	})
	if stopped := stoppedSweeps(lanes); stopped != "" {
		fmt.Fprintf(out, `
  (c) computed: a sweep's requests at the rate of the sweep stopped once the new invoices had
      arrived, pages read in that time, by shape:
      %s.`, stopped)
	}
	fmt.Fprintf(out, `
  The window: %s
  Requests an hour (computed, at the defaults): before follow runs, a complete sweep on every
  tick of %s, back to back when it takes longer; now a follow run every %s asking what the
  follow run above with 0 new asked (nothing new) or with 1 new again (a new invoice every run),
  a window run every %s asking what the window run above asked, and a complete sweep every
  %s. The daemon's counts (measured, from its metric erpsync_erp_requests_total by kind) are
  every request it made while the edits were made: its window runs are too few in that time to
  count by the hour, so each is given. An edit half way into its page, a deletion a quarter;
  "held": a deletion a window run held at a page boundary for the next to confirm.
`, lanes[0].window.why, d.followSpec, every(d.follow), every(d.window), every(d.sweep))
}

// String says when the edit reached the warehouse, and what else the
// report saw of it.
func (e *edit) String() string {
	var s string
	switch {
	case e.beyond:
		return "beyond the list"
	case e.issued.IsZero():
		return "-"
	case e.missing:
		return "MISSING"
	case e.secs == 0 && e.outside:
		return "not written"
	case e.secs == 0:
		return "MISSING"
	case e.outside:
		s = "written, " + seconds(e.secs)
	default:
		s = seconds(e.secs)
	}
	if e.held {
		s += " (held)"
	}
	if !e.delete && !e.version {
		s += " NO VERSION"
	}
	return s
}

// minutes writes a duration in minutes, to a tenth.
func minutes(d time.Duration) string { return fmt.Sprintf("%.1f min", d.Minutes()) }

// hours writes a duration in hours, to a tenth.
func hours(d time.Duration) string { return fmt.Sprintf("%.1f h", d.Hours()) }

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

// The policy's curve: the share of a stream of edits seen within 15
// minutes, an hour and a day, at three budgets of requests an hour. It is
// a model, not a measurement: the edits below, on the list of the size
// measured, at the schedules the daemon would keep under each budget
// (erpcost stretches window runs and sweeps, as the daemon does), with the
// window the daemon chose and the costs measured of real runs (a window
// run of that window, a complete sweep).
var (
	// curvePerDay invoices are issued a day: pages of the list by age.
	curvePerDay = 1000
	// curveEdits: of every edit, the share to invoices of each age, in
	// days (to 0: the oldest invoice of the list).
	curveEdits = []ageBand{{0.50, 0, 1}, {0.30, 1, 7}, {0.15, 7, 30}, {0.05, 30, 0}}
	// curveWithin are the times the curve gives the share seen within.
	curveWithin = []time.Duration{15 * time.Minute, time.Hour, 24 * time.Hour}
)

// ageBand is a share of the edits, spread evenly over invoices from
// fromDays to toDays old.
type ageBand struct {
	share, fromDays, toDays float64
}

// policy is what keeps an invoice fresh once read: window runs of
// windowPages pages every windowEvery, each taking windowRun, and complete
// sweeps every sweepEvery, each taking sweepRun.
type policy struct {
	windowPages            int
	windowEvery, windowRun time.Duration
	sweepEvery, sweepRun   time.Duration
}

// seen is the share of the edits made at a random moment to an invoice
// pagesFromEnd from the list's newest end that are in the warehouse
// within t: the runs that read its page start an interval apart from the
// end of the one before, and the edit waits for the next to start and to
// finish (the page read last, at worst). Edits to the newest page, which
// each follow run reads too, are counted as the window's: the curve
// errs low there.
func (p policy) seen(pagesFromEnd int, t time.Duration) float64 {
	every, run := p.sweepEvery, p.sweepRun
	if pagesFromEnd < p.windowPages {
		every, run = p.windowEvery, p.windowRun
	}
	return min(1, max(0, float64(t-run)/float64(every+run)))
}

// share is the share of curveEdits seen within t on a list of n invoices,
// pageSize a page.
func (p policy) share(t time.Duration, n, pageSize int) float64 {
	const steps = 1000 // points of each band
	oldest := float64(n) / float64(curvePerDay)
	var s float64
	for _, b := range curveEdits {
		to := b.toDays
		if to == 0 || to > oldest {
			to = oldest
		}
		from := min(b.fromDays, to)
		for i := range steps {
			age := from + (to-from)*(float64(i)+0.5)/steps
			s += b.share / steps * p.seen(int(age*float64(curvePerDay))/pageSize, t)
		}
	}
	return s
}

// budgeted is the policy of a lane's measured runs at the defaults under
// a budget of requests an hour, with what it asks an hour (a new invoice
// at every follow run) and the stretch of its window runs and sweeps;
// refused when the follow runs alone would spend the budget, by the rule
// the daemon refuses to start by (config.BudgetHoldsFollows).
func (l *lane) budgeted(d schedules, budget, n, pageSize int) (p policy, asks, stretch float64, refused bool) {
	src := config.Source{Name: "bench", PageSize: pageSize, RequestsPerHour: budget, Logins: []config.Login{{Username: "erpsync"}},
		Streams: []config.StreamConfig{{Name: "invoices", Schedule: d.followSpec, WindowSchedule: d.windowSpec, SweepSchedule: d.sweepSpec}}}
	pages := (n + pageSize - 1) / pageSize
	key := model.Key{Source: "bench", Stream: "invoices", Login: "erpsync"}
	e := erpcost.Of(src, map[model.Key]db.ListSize{key: {SweepRows: int64(n), RunPages: int64(pages), RunRows: int64(n), WindowPages: l.window.pages}})
	refused = config.BudgetHoldsFollows(src) != nil
	stretch = e.Stretch
	h := l.hourly(d)
	asks = h.follow[1] + (h.window+h.sweep)/stretch
	p = policy{
		windowPages: l.window.pages,
		windowEvery: time.Duration(float64(d.window) * stretch),
		windowRun:   l.windowRunTime(),
		sweepEvery:  time.Duration(float64(d.sweep) * stretch),
		sweepRun:    secs(l.sweep.secs),
	}
	return p, asks, stretch, refused
}

// windowRunTime is how long a window run of the daemon took (the one run
// on the quiet lane when the daemon completed none).
func (l *lane) windowRunTime() time.Duration {
	if r := l.daemonRuns["window"]; r.runs > 0 {
		return secs(r.secs / float64(r.runs))
	}
	return secs(l.windowRun.secs)
}

// printCurve prints the policy's curve of one size, a column per shape.
func printCurve(out io.Writer, lanes []*lane, n int, o FreshnessOptions, d schedules) {
	var bands []string
	for _, b := range curveEdits {
		if b.toDays == 0 {
			bands = append(bands, fmt.Sprintf("%.0f%% older", 100*b.share))
			continue
		}
		bands = append(bands, fmt.Sprintf("%.0f%% %.0f to %.0f", 100*b.share, b.fromDays, b.toDays))
	}
	fmt.Fprintf(out, `
  The policy's curve (a model, not measured). Edits at random moments to invoices of these ages in
  days: %s; %s invoices issued a day (%d pages).
  Each budget of requests an hour stretches window runs and sweeps as the daemon does; the window
  is the one the daemon chose; each run takes what the window runs and the sweep above took.
  Share seen within %s:
`, strings.Join(bands, ", "), thousands(curvePerDay), curvePerDay/o.PageSize, strings.Join(withinNames(), ", "))
	for _, budget := range o.Budgets {
		fmt.Fprintf(out, "  %-50s", fmt.Sprintf("requests_per_hour %s: window, sweep every", thousands(budget)))
		for _, l := range lanes {
			p, _, _, refused := l.budgeted(d, budget, n, o.PageSize)
			cell := "REFUSED"
			if !refused {
				cell = every(p.windowEvery.Round(time.Minute)) + ", " + every(p.sweepEvery.Round(time.Hour))
			}
			fmt.Fprintf(out, "%18s", cell)
		}
		fmt.Fprintf(out, "\n  %-50s", "  asks an hour; seen within "+strings.Join(withinNames(), ", "))
		for _, l := range lanes {
			p, asks, _, refused := l.budgeted(d, budget, n, o.PageSize)
			cell := "-"
			if !refused {
				var shares []string
				for _, t := range curveWithin {
					shares = append(shares, fmt.Sprintf("%.0f", 100*p.share(t, n, o.PageSize)))
				}
				cell = fmt.Sprintf("%s; %s%%", thousands(int(asks+0.5)), strings.Join(shares, " "))
			}
			fmt.Fprintf(out, "%18s", cell)
		}
		fmt.Fprintln(out)
	}
}

// withinNames names curveWithin: 15 min, 1 h, 24 h.
func withinNames() []string {
	var s []string
	for _, t := range curveWithin {
		if t < time.Hour {
			s = append(s, fmt.Sprintf("%.0f min", t.Minutes()))
		} else {
			s = append(s, fmt.Sprintf("%.0f h", t.Hours()))
		}
	}
	return s
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

// worst keeps a goal's worst figure, the larger the worse, and says it.
type worst struct {
	g   *goal
	max float64
}

func (w *worst) add(v float64, ok bool, detail string) {
	w.g.checked = true
	switch {
	case !ok && (w.g.ok || v > w.max): // the first miss, or a worse one
		w.g.ok = false
		w.max, w.g.detail = v, detail
	case w.g.ok && v > w.max:
		w.max, w.g.detail = v, detail
	}
}

// goals checks the figures against the report's goals: freshness and
// requests an hour at o.GoalInvoices and above, requests per follow run
// at every size. Each is judged on the worst lane.
func (o FreshnessOptions) goals(measured map[int][]*lane, d schedules) []goal {
	at := thousands(o.GoalInvoices)
	fresh := goal{name: fmt.Sprintf("a new invoice in the warehouse within %s at %s invoices", freshnessGoal, at), ok: true}
	follow := goal{name: fmt.Sprintf("at most %d requests per follow run with at most one page new", followRequestsGoal), ok: true}
	edits := goal{name: fmt.Sprintf("an edit or a deletion inside the window in the warehouse within %s, %s when held at a page boundary, at %s invoices",
		every(editGoal), every(heldGoal), at), ok: true}
	anyChange := goal{name: fmt.Sprintf("any edit or deletion within %s, %s when held at a page boundary outside the window (derived), at %s invoices",
		every(anyChangeGoal), every(heldSweepsGoal), at), ok: true}
	fewer := goal{name: fmt.Sprintf("at %s invoices, %dx fewer ERP requests an hour at the defaults than complete sweeps back to back", at, fewerRequestsGoal), ok: true}
	worstFresh, worstFollow, worstEdit, worstAny := worst{g: &fresh}, worst{g: &follow, max: -1}, worst{g: &edits}, worst{g: &anyChange}
	worstRatio := -1.0
	for _, n := range slices.Sorted(maps.Keys(measured)) {
		for _, l := range measured[n] {
			where := fmt.Sprintf("%s, N = %s", l.shape, thousands(n))
			for _, f := range l.follows {
				if f.added > 1 {
					continue // more than one page may be new
				}
				worstFollow.add(float64(f.requests), f.requests <= followRequestsGoal && f.swept == "",
					fmt.Sprintf("%d at most (%s, %d new)", f.requests, where, f.added))
			}
			if n < o.GoalInvoices {
				continue
			}
			for _, phase := range []struct {
				what string
				s    samples
			}{{"outside sweeps", l.outside}, {"during a sweep", l.during}} {
				if phase.s.missing > 0 {
					worstFresh.add(1e9, false, fmt.Sprintf("%d invoices not there after %s (%s, %s)", phase.s.missing, o.patience(), where, phase.what))
					continue
				}
				if len(phase.s.secs) > 0 {
					m := slices.Max(phase.s.secs)
					worstFresh.add(m, m <= freshnessGoal.Seconds(), fmt.Sprintf("%.1f s at most (%s, %s)", m, where, phase.what))
				}
			}
			for _, e := range l.edits {
				if e.beyond {
					continue
				}
				if e.outside {
					if l.farSwept < 0 {
						worstAny.add(1e9, false, fmt.Sprintf("%s: not written by a complete sweep that began after it (%s)", e.label(), where))
					}
					continue
				}
				limit := editGoal
				if e.held {
					limit = heldGoal
				}
				switch {
				case e.missing || e.secs == 0:
					worstEdit.add(1e9, false, fmt.Sprintf("%s: not there after %s (%s)", e.label(), o.editPatience(e.delete), where))
				case !e.delete && !e.version:
					worstEdit.add(1e9, false, fmt.Sprintf("%s: no version in erp.invoices_history (%s)", e.label(), where))
				default:
					worstEdit.add(e.secs, e.secs <= limit.Seconds(), fmt.Sprintf("%s at most (%s: %s)", seconds(e.secs), e.label(), where))
				}
			}
			dv := l.derived(d)
			worstAny.add(dv.sweep.Hours(), dv.sweep <= anyChangeGoal && dv.sweepHeld <= heldSweepsGoal,
				fmt.Sprintf("%s, %s held (derived: %s and a sweep of %s; %s)", hours(dv.sweep), hours(dv.sweepHeld), every(d.sweep), seconds(l.sweep.secs), where))
			// Judged on the busier case: a new invoice at every follow run.
			h := l.hourly(d)
			if r := h.ratio[1]; worstRatio < 0 || r < worstRatio {
				worstRatio = r
				fewer.checked = true
				fewer.ok = r >= fewerRequestsGoal
				fewer.detail = fmt.Sprintf("%.0fx at least, with a new invoice at every follow run (%s: %s an hour, follow %s, window %s, sweep %s, against %s; %.0fx with nothing new)",
					r, where, thousands(int(h.total[1]+0.5)), thousands(int(h.follow[1]+0.5)), thousands(int(h.window+0.5)), thousands(int(h.sweep+0.5)),
					thousands(int(h.before+0.5)), h.ratio[0])
			}
		}
	}
	for _, g := range []*goal{&fresh, &edits, &anyChange, &fewer} {
		if !g.checked {
			g.ok = true
			g.detail = fmt.Sprintf("not checked: no size of %s invoices or more", at)
		}
	}
	return []goal{fresh, follow, edits, anyChange, fewer}
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
