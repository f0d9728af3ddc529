package config

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ParseSchedule accepts standard 5-field cron specs, descriptors such as
// @every 5m or @hourly, and a CRON_TZ= prefix.
func ParseSchedule(spec string) (cron.Schedule, error) {
	return cron.ParseStandard(spec)
}

// checkSchedule refuses a schedule that does not parse, quoting it.
func checkSchedule(spec string) error {
	if _, err := ParseSchedule(spec); err != nil {
		return fmt.Errorf("%q: %v", spec, err)
	}
	return nil
}

// Interval is the time between the two ticks of a schedule that follow
// now: the interval of @every, the next one of a cron spec.
func Interval(s cron.Schedule, now time.Time) time.Duration {
	first := s.Next(now)
	return s.Next(first).Sub(first)
}

// schedules completes a stream's three schedules and says where each
// came from. sched, sweep and window are what resolved schedule,
// sweep_schedule and window_schedule (stored in sc when set), pages what
// resolved window_pages.
//
// A stream that follows reads what is new on its Schedule, its newest
// pages on its WindowSchedule and its whole list on its SweepSchedule.
// Before streams could follow, every run was a complete sweep; so where a
// schedule is set and no sweep schedule, the sweep schedule is the
// schedule, and such a configuration keeps its meaning. Likewise before
// windows: a stream whose schedule or sweep schedule is set has a window
// only when its window schedule is set too. The stream's own defaults
// apply only to a stream configured with none of them. A stream that
// cannot follow sweeps on its schedule, and refuses a sweep_schedule, a
// window_schedule or window_pages of its own.
func schedules(p place, sc *StreamConfig, sp StreamSpec, specs []StreamSpec, sched, sweep, window, pages value) (warnings []string, refused *problem) {
	sc.ScheduleFrom = sched.from
	if !sched.set {
		sc.Schedule, sc.ScheduleFrom = sp.Schedule, FromDefault
		if err := checkSchedule(sc.Schedule); err != nil {
			pr := p.fail(sched, fmt.Errorf("not set, and the stream's default does not parse: %v", err))
			return nil, &pr
		}
	}
	if !sp.Follows {
		for _, v := range []value{sweep, window, pages} {
			if v.here && v.set {
				can := specNames(specs, func(s StreamSpec) bool { return s.Follows })
				pr := p.fail(v, fmt.Errorf("%s cannot follow, so each of its runs reads it whole, on its schedule; streams that can follow: %s",
					sc.Name, cmp.Or(strings.Join(can, ", "), "none")))
				return nil, &pr
			}
		}
		sc.SweepSchedule, sc.SweepFrom = sc.Schedule, FromSchedule
		sc.WindowSchedule, sc.WindowFrom, sc.WindowPages = "", FromNone, 0
		return nil, nil
	}
	switch {
	case sweep.set:
		sc.SweepFrom = sweep.from
	case sched.set:
		sc.SweepSchedule, sc.SweepFrom = sc.Schedule, FromSchedule
	default:
		sc.SweepSchedule, sc.SweepFrom = cmp.Or(sp.SweepSchedule, sp.Schedule), FromDefault
		if err := checkSchedule(sc.SweepSchedule); err != nil {
			pr := p.fail(sweep, fmt.Errorf("not set, and the stream's default does not parse: %v", err))
			return nil, &pr
		}
	}
	switch {
	case window.set:
		sc.WindowFrom = window.from
	case sched.set || sweep.set || sp.WindowSchedule == "":
		sc.WindowSchedule, sc.WindowFrom = "", FromNone
	default:
		sc.WindowSchedule, sc.WindowFrom = sp.WindowSchedule, FromDefault
		if err := checkSchedule(sc.WindowSchedule); err != nil {
			pr := p.fail(window, fmt.Errorf("not set, and the stream's default does not parse: %v", err))
			return nil, &pr
		}
	}
	follow, _ := ParseSchedule(sc.Schedule)
	sweeps, _ := ParseSchedule(sc.SweepSchedule)
	if perWeek(sweeps) > perWeek(follow) {
		warnings = append(warnings, fmt.Sprintf("%s: %q sweeps more often than the follow runs of schedule %q (%s); each sweep reads the whole list",
			p.where(value{from: sc.SweepFrom}), sc.SweepSchedule, sc.Schedule, sc.ScheduleFrom))
	}
	if windows, err := ParseSchedule(sc.WindowSchedule); err == nil && perWeek(windows) <= perWeek(sweeps) {
		warnings = append(warnings, fmt.Sprintf("%s: %q re-reads the newest pages no more often than the complete sweeps of %q (%s), which read them too",
			p.where(window), sc.WindowSchedule, sc.SweepSchedule, sc.SweepFrom))
	}
	if pages.here && pages.set && sc.WindowSchedule == "" {
		warnings = append(warnings, fmt.Sprintf("%s: the stream has no window (its schedule or sweep schedule is set, and no window_schedule), so window_pages sets nothing",
			p.where(pages)))
	}
	return warnings, nil
}

// perWeek is how many times a schedule fires in a week: the same for any
// week for @every, counted over one for a cron spec (whose ticks are
// minutes, so at most 10,080).
func perWeek(s cron.Schedule) float64 {
	const week = 7 * 24 * time.Hour
	if c, ok := s.(cron.ConstantDelaySchedule); ok {
		return float64(week) / float64(c.Delay)
	}
	start := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC) // a Monday
	n := 0
	for t := s.Next(start); !t.IsZero() && t.Before(start.Add(week)); t = s.Next(t) {
		n++
	}
	return float64(n)
}

// RunsPerHour is how many times a schedule fires in an hour, over a week
// (0 for a spec that does not parse).
func RunsPerHour(spec string) float64 {
	s, err := ParseSchedule(spec)
	if err != nil {
		return 0
	}
	return perWeek(s) / (7 * 24)
}

// FollowRequestsPerHour is the least the follow runs of a source ask of
// its ERP: a request per follow run, per login, per stream that follows
// (a run that finds something new asks more). A request budget must hold
// more than that; each stream's share is said in parts.
func (s Source) FollowRequestsPerHour() (total float64, parts []string) {
	for _, sc := range s.Streams {
		if !sc.Followed() {
			continue
		}
		runs := RunsPerHour(sc.Schedule)
		total += runs * float64(len(s.Logins))
		parts = append(parts, fmt.Sprintf("%s: %s × %.0f follow runs an hour of %q", sc.Name, plural(len(s.Logins), "login"), runs, sc.Schedule))
	}
	return total, parts
}

// plural writes n things.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
