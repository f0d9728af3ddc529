package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
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
	warn(st, cfg, time.Now())
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
	return nil
}

// warn notes what an operator should look at: a run whose process is
// gone, a run that has held its stream's lock for more than a few
// intervals of its schedule (stuck, or its process gone with its session
// still open), data older than that, deletions held by the guard, and
// what the login's runs warned of (drift, rejected records, a list that
// may be cut).
func warn(st []model.StreamStatus, cfg config.Config, now time.Time) {
	for i := range st {
		s := &st[i]
		// The complete sweeps' schedule judges the data's age; a list
		// that is followed has its follow runs' too, which judges how late
		// new records are.
		var sweepEvery, followEvery time.Duration
		for _, src := range cfg.Sources {
			if sc, ok := src.Stream(s.Stream); ok && src.Name == s.Source {
				s.Schedule, s.SweepSchedule, s.SchedulesFrom = sc.Schedule, sc.SweepSchedule, schedulesFrom(sc)
				sweepEvery = interval(sc.SweepSchedule, now)
				if sc.SweepSchedule != sc.Schedule {
					followEvery = interval(sc.Schedule, now)
				}
			}
		}
		var notes []string
		running := sweepEvery
		if s.LastRunKind == model.KindFollow {
			running = followEvery
		}
		switch {
		case s.ProcessGone:
			notes = append(notes, goneNote(*s))
		case s.LastRunStatus == model.StatusRunning && s.LastRunStarted != nil && model.Overdue(now.Sub(*s.LastRunStarted), running):
			notes = append(notes, fmt.Sprintf("running for %s, more than %dx its schedule", now.Sub(*s.LastRunStarted).Round(time.Second), model.OverdueFactor))
		}
		if s.FreshnessSecs != nil && model.Overdue(time.Duration(*s.FreshnessSecs*float64(time.Second)), sweepEvery) {
			notes = append(notes, fmt.Sprintf("data %s old, more than %dx its schedule", (time.Duration(*s.FreshnessSecs)*time.Second).Round(time.Second), model.OverdueFactor))
		}
		if followEvery > 0 && s.NewRecordsSecs != nil && model.Overdue(time.Duration(*s.NewRecordsSecs*float64(time.Second)), followEvery) {
			notes = append(notes, fmt.Sprintf("new records %s late, more than %dx its follow schedule", (time.Duration(*s.NewRecordsSecs)*time.Second).Round(time.Second), model.OverdueFactor))
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
	out := fmt.Sprintf("%s: %d pages, %s", what, s.SweepPages, rows)
	if s.ProcessGone {
		out = fmt.Sprintf("stopped: %d pages, %s; ", s.SweepPages, rows)
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

// schedulesFrom says where a stream's schedules came from.
func schedulesFrom(sc config.StreamConfig) string {
	switch {
	case sc.ScheduleFrom == config.FromDefault && (sc.SweepFrom == config.FromDefault || sc.SweepFrom == config.FromSchedule):
		return "the stream's defaults"
	case sc.SweepFrom == config.FromSchedule:
		return sc.ScheduleFrom
	}
	return sc.ScheduleFrom + ", " + sc.SweepFrom
}

func printStatus(w io.Writer, st []model.StreamStatus) {
	if len(st) == 0 {
		fmt.Fprintln(w, "no stream has run yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSTREAM\tLOGIN\tCONTRACT\tSCHEDULES\tLISTS\tORDER\tLAST RUN\tFINISHED\tLAST SWEEP\tFRESHNESS\tSWEEP\tLAST FOLLOW\tLAST ERROR\tWARNING")
	for _, s := range st {
		fresh := "never"
		if s.FreshnessSecs != nil {
			fresh = (time.Duration(*s.FreshnessSecs) * time.Second).String()
		}
		follow := ts(s.LastFollow)
		if s.FollowSwept != "" {
			follow += " (swept: " + s.FollowSwept + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Source, s.Stream, dash(s.Login), dash(s.Contract),
			schedules(s), listScope(s.ListScope), dash(string(s.ListOrder)), lastRun(s), ts(s.LastRunFinished), ts(s.LastSuccess), fresh, sweepState(s),
			follow, dash(oneLine(s.LastError, 80)), dash(s.Warning))
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

// schedules says when a stream runs and where that came from: "@every
// 30s / @every 168h (the stream's defaults)" for a list that is followed.
func schedules(s model.StreamStatus) string {
	if s.Schedule == "" {
		return "-"
	}
	out := s.Schedule
	if s.SweepSchedule != "" && s.SweepSchedule != s.Schedule {
		out = "follow " + s.Schedule + ", sweep " + s.SweepSchedule
	}
	return out + " (" + s.SchedulesFrom + ")"
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
