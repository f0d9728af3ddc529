package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erpcost"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

func cmdStatus(e *command) error {
	fs, cfgFile := e.flags("status")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := e.parse(fs); err != nil {
		return err
	}
	named, err := e.lookup(e.positional())
	if err != nil {
		return err
	}
	cfg, err := e.loadConfig(*cfgFile, false)
	if err != nil {
		return err
	}
	ctx, cancel := e.signalContext()
	defer cancel()
	pool, err := openReader(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := db.LoadStatus(ctx, pool)
	if err != nil {
		return err
	}
	if len(named) > 0 {
		st = slices.DeleteFunc(st, func(s model.StreamStatus) bool {
			return !slices.ContainsFunc(named, func(n sync.Stream) bool { return n.Declared().Name == s.Stream })
		})
	}
	estimates, err := estimate(ctx, pool, cfg)
	if err != nil {
		return err
	}
	warn(st, cfg, e.catalog, estimates, time.Now())
	for i := range st {
		if s, ok := e.catalog.Lookup(st[i].Stream); ok {
			st[i].Contract = s.Declared().Contract.String()
		}
	}
	if *asJSON {
		if st == nil {
			st = []model.StreamStatus{}
		}
		return e.writeJSON(st)
	}
	printStatus(e.stdout, st)
	printEstimates(e.stdout, estimates)
	return nil
}

// estimate is what each source's schedules ask of its ERP an hour, as the
// daemon reckons it (stretched to fit its budget), by source.
func estimate(ctx context.Context, q db.Querier, cfg config.Config) (map[string]erpcost.Estimate, error) {
	out := map[string]erpcost.Estimate{}
	for _, src := range cfg.Sources {
		sizes, err := db.ListSizes(ctx, q, src.Name)
		if err != nil {
			return nil, err
		}
		out[src.Name] = erpcost.Of(src, sizes)
	}
	return out, nil
}

// printEstimates says, per source, what its schedules ask of its ERP.
func printEstimates(w io.Writer, estimates map[string]erpcost.Estimate) {
	for _, name := range slices.Sorted(maps.Keys(estimates)) {
		fmt.Fprintf(w, "source %s: %s\n", name, estimates[name])
	}
}

// warn notes what an operator should look at: a run whose process is
// gone, a run that has held its stream's lock for more than a few
// intervals of its schedule (stuck, or its process gone with its session
// still open), new records, recent changes or data older than that, each
// judged against its own schedule (window runs and sweeps as stretched to
// fit the source's budget), deletions held by the guard, and what the
// login's runs warned of (drift, rejected records, a list that may be
// cut). It fills in each stream's schedules and what it asks of the ERP.
func warn(st []model.StreamStatus, cfg config.Config, catalog *sync.Catalog, estimates map[string]erpcost.Estimate, now time.Time) {
	for i := range st {
		s := &st[i]
		every := map[model.RunKind]time.Duration{}
		for _, src := range cfg.Sources {
			sc, ok := src.Stream(s.Stream)
			if !ok || src.Name != s.Source {
				continue
			}
			follows := false
			if c, ok := catalog.Lookup(s.Stream); ok {
				follows = c.Declared().Follows
			}
			s.Schedule, s.SweepSchedule, s.WindowSchedule, s.SchedulesFrom = sc.Schedule, sc.SweepSchedule, sc.WindowSchedule, schedulesFrom(sc, follows)
			e := estimates[src.Name]
			stretch := func(d time.Duration) time.Duration { return time.Duration(float64(d) * max(e.Stretch, 1)) }
			every[model.KindSweep] = stretch(interval(sc.SweepSchedule, now))
			if sc.Followed() {
				every[model.KindFollow] = interval(sc.Schedule, now)
			}
			if sc.WindowSchedule != "" {
				every[model.KindWindow] = stretch(interval(sc.WindowSchedule, now))
			}
			s.RequestsPerHour = e.PerKey[s.Key]
			if e.Stretch > 1 {
				s.ScheduleStretch = e.Stretch
			}
		}
		var notes []string
		running := every[model.KindSweep]
		if s.LastRunKind == model.KindFollow || s.LastRunKind == model.KindWindow {
			running = every[s.LastRunKind]
		}
		switch {
		case s.ProcessGone:
			notes = append(notes, goneNote(*s))
		case s.LastRunStatus == model.StatusRunning && s.LastRunStarted != nil && model.Overdue(now.Sub(*s.LastRunStarted), running):
			notes = append(notes, fmt.Sprintf("running for %s, more than %dx its schedule", now.Sub(*s.LastRunStarted).Round(time.Second), model.OverdueFactor))
		}
		for _, age := range []struct {
			secs *float64
			kind model.RunKind
			what string
		}{
			{s.FreshnessSecs, model.KindSweep, "data %s old, more than %dx its schedule"},
			{s.NewRecordsSecs, model.KindFollow, "new records %s late, more than %dx its follow schedule"},
			{s.RecentChangesSecs, model.KindWindow, "recent changes %s old, more than %dx its window schedule"},
		} {
			if age.secs != nil && model.Overdue(time.Duration(*age.secs*float64(time.Second)), every[age.kind]) {
				notes = append(notes, fmt.Sprintf(age.what, (time.Duration(*age.secs)*time.Second).Round(time.Second), model.OverdueFactor))
			}
		}
		if s.HeldDeletions > 0 {
			notes = append(notes, sync.HeldWarning(s.HeldDeletions, s.Stream))
		}
		if s.StreamWarning != "" {
			notes = append(notes, s.StreamWarning)
		}
		s.Warning = strings.Join(notes, "; ")
	}
}

// goneNote says that a run's process is gone, and what the next run does
// about it.
func goneNote(s model.StreamStatus) string {
	where := ""
	if s.LastRunPID != 0 {
		where = fmt.Sprintf(" (pid %d on %s)", s.LastRunPID, dash(s.LastRunHost))
	}
	next := "the next run closes it as abandoned"
	switch {
	case s.SweepInProgress && s.SweepResumable:
		next += fmt.Sprintf(" and resumes the sweep after page %d", s.SweepPages)
	case s.SweepInProgress:
		next += " and starts the sweep over"
	}
	return fmt.Sprintf("run %d%s is recorded as running but its process is gone (nothing holds the stream's lock): %s", s.LastRunID, where, next)
}

// sweepState says where a login's complete sweeps stand: idle, or the one
// in progress (the first load, and whether its process is gone).
func sweepState(s model.StreamStatus) string {
	if !s.SweepInProgress {
		return "idle"
	}
	what := "in progress"
	if s.FirstLoad {
		what = "first load in progress"
	}
	rows := fmt.Sprintf("%d rows", s.SweepRows)
	if s.LastSweepRows != nil && *s.LastSweepRows > 0 {
		rows = fmt.Sprintf("%d of about %d rows", s.SweepRows, *s.LastSweepRows)
	}
	out := fmt.Sprintf("%s: %s, %s", what, pages(s.SweepPages), rows)
	if s.ProcessGone {
		out = fmt.Sprintf("stopped: %s, %s; ", pages(s.SweepPages), rows)
		if s.FirstLoad {
			out = "first load " + out
		}
		if s.SweepResumable {
			out += "resumes on the next run"
		} else {
			out += "starts over on the next run"
		}
	}
	return out
}

// interval is the time between two runs of a schedule (0: none).
func interval(spec string, now time.Time) time.Duration {
	sched, err := config.ParseSchedule(spec)
	if err != nil {
		return 0
	}
	return config.Interval(sched, now)
}

// schedulesFrom says where a stream's schedules came from: "the
// stream's defaults", or the settings that gave them; for a list that
// follows and has no window, why.
func schedulesFrom(sc config.StreamConfig, follows bool) string {
	// A sweep schedule taken from the schedule, and no window, are told
	// by their own field only: the file's top-level key "schedule" reads
	// the same as FromSchedule and names where a schedule came from.
	settings := []string{sc.ScheduleFrom}
	if sc.SweepFrom != config.FromSchedule {
		settings = append(settings, sc.SweepFrom)
	}
	if sc.WindowFrom != config.FromNone {
		settings = append(settings, sc.WindowFrom)
	}
	var from []string
	for _, f := range settings {
		if f == config.FromDefault {
			f = "the stream's defaults"
		}
		if f != "" && !slices.Contains(from, f) {
			from = append(from, f)
		}
	}
	if follows && sc.WindowSchedule == "" {
		from = append(from, "no window: its schedules are set and window_schedule is not")
	}
	return strings.Join(from, ", ")
}

func printStatus(w io.Writer, st []model.StreamStatus) {
	if len(st) == 0 {
		fmt.Fprintln(w, "no stream has run yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSTREAM\tLOGIN\tCONTRACT\tSCHEDULES\tLISTS\tORDER\tLAST RUN\tFINISHED\tLAST SWEEP\tFRESHNESS\tSWEEP\tLAST FOLLOW\tLAST WINDOW\tWINDOW\tLAST ERROR\tWARNING")
	for _, s := range st {
		fresh := "never"
		if s.FreshnessSecs != nil {
			fresh = (time.Duration(*s.FreshnessSecs) * time.Second).String()
		}
		follow := ts(s.LastFollow)
		if s.FollowSwept != "" {
			follow += " (swept: " + s.FollowSwept + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Source, s.Stream, dash(s.Login), dash(s.Contract),
			schedules(s), listScope(s.ListScope), dash(string(s.ListOrder)), lastRun(s), ts(s.LastRunFinished), ts(s.LastSuccess), fresh, sweepState(s),
			follow, ts(s.LastWindow), window(s.WindowStatus), dash(oneLine(s.LastError, 80)), dash(s.Warning))
	}
	tw.Flush()
}

// lastRun is the last run's status, and whether its process is gone.
func lastRun(s model.StreamStatus) string {
	if s.ProcessGone {
		return string(s.LastRunStatus) + " (process gone)"
	}
	return dash(string(s.LastRunStatus))
}

// schedules says when a stream runs and where that came from: "follow
// @every 30s, window @every 10m, sweep @every 24h (the stream's
// defaults)" for a list that is followed, with how far its window runs
// and sweeps are stretched to fit the source's budget.
func schedules(s model.StreamStatus) string {
	if s.Schedule == "" {
		return "-"
	}
	var runs []string
	if s.SweepSchedule != "" && s.SweepSchedule != s.Schedule {
		runs = append(runs, "follow "+s.Schedule)
	}
	if s.WindowSchedule != "" {
		runs = append(runs, "window "+s.WindowSchedule)
	}
	out := s.Schedule
	if len(runs) > 0 {
		out = strings.Join(append(runs, "sweep "+cmp.Or(s.SweepSchedule, s.Schedule)), ", ")
	}
	if s.ScheduleStretch > 1 {
		out += fmt.Sprintf(", window runs and sweeps %.2fx as far apart (requests_per_hour)", s.ScheduleStretch)
	}
	return out + " (" + s.SchedulesFrom + ")"
}

// window says where a login's window of a list stands: "26 pages, ids
// 974001 to the newest (why it has that size)".
func window(w model.WindowStatus) string {
	if w.WindowPages == 0 {
		return "-"
	}
	out := pages(int64(w.WindowPages))
	if w.WindowFromID != "" {
		out += ", ids " + w.WindowFromID + " to the newest"
	}
	if w.WindowSizeWhy != "" {
		out += " (" + w.WindowSizeWhy + ")"
	}
	return out
}

// pages counts pages as a sentence does: "1 page", "26 pages". A list
// shorter than its window is read whole, often as one page.
func pages(n int64) string {
	if n == 1 {
		return "1 page"
	}
	return fmt.Sprintf("%d pages", n)
}

func ts(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string, n int) string {
	for i, c := range s {
		if c == '\n' || i >= n {
			return s[:i] + "..."
		}
	}
	return s
}
