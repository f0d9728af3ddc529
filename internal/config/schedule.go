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

// schedules completes a stream's two schedules and says where each came
// from. sched and sweep are what resolved schedule and sweep_schedule
// (stored in sc when set).
//
// A stream that follows reads what is new on its Schedule and its whole
// list on its SweepSchedule. Before streams could follow, every run was a
// complete sweep; so where a schedule is set and no sweep schedule, the
// sweep schedule is the schedule, and such a configuration keeps its
// meaning. The stream's own defaults apply only to a stream configured
// with neither. A stream that cannot follow sweeps on its schedule, and
// refuses a sweep_schedule of its own.
func schedules(p place, sc *StreamConfig, sp StreamSpec, specs []StreamSpec, sched, sweep value) (warning string, refused *problem) {
	sc.ScheduleFrom = sched.from
	if !sched.set {
		sc.Schedule, sc.ScheduleFrom = sp.Schedule, FromDefault
		if err := checkSchedule(sc.Schedule); err != nil {
			pr := p.fail(sched, fmt.Errorf("not set, and the stream's default does not parse: %v", err))
			return "", &pr
		}
	}
	switch {
	case !sp.Follows:
		if sweep.here {
			can := specNames(specs, func(s StreamSpec) bool { return s.Follows })
			pr := p.fail(sweep, fmt.Errorf("%s cannot follow, so each of its runs reads it whole, on its schedule; streams that can follow: %s",
				sc.Name, cmp.Or(strings.Join(can, ", "), "none")))
			return "", &pr
		}
		sc.SweepSchedule, sc.SweepFrom = sc.Schedule, FromSchedule
		return "", nil
	case sweep.set:
		sc.SweepFrom = sweep.from
	case sched.set:
		sc.SweepSchedule, sc.SweepFrom = sc.Schedule, FromSchedule
	default:
		sc.SweepSchedule, sc.SweepFrom = cmp.Or(sp.SweepSchedule, sp.Schedule), FromDefault
		if err := checkSchedule(sc.SweepSchedule); err != nil {
			pr := p.fail(sweep, fmt.Errorf("not set, and the stream's default does not parse: %v", err))
			return "", &pr
		}
	}
	follow, _ := ParseSchedule(sc.Schedule)
	sweeps, _ := ParseSchedule(sc.SweepSchedule)
	if perWeek(sweeps) > perWeek(follow) {
		warning = fmt.Sprintf("%s: %q sweeps more often than the follow runs of schedule %q (%s); each sweep reads the whole list",
			p.where(value{from: sc.SweepFrom}), sc.SweepSchedule, sc.Schedule, sc.ScheduleFrom)
	}
	return warning, nil
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
