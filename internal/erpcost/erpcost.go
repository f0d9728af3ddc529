// Package erpcost says what a source's schedules ask of its ERP: the
// requests an hour each kind of run is expected to make, from what the
// warehouse last saw of its lists, and how far window runs and complete
// sweeps must be stretched to fit a budget of requests an hour. Follow
// runs are never stretched: new records stay as fresh as configured.
package erpcost

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// Cost is what one stream read through one login asks an hour, by kind
// of run: a request per follow run (more when it finds something new),
// the window's pages per window run, and the pages of a complete sweep
// per sweep (a stream that does not follow: every run).
type Cost map[model.RunKind]float64

// Total is the cost of every kind.
func (c Cost) Total() float64 {
	var t float64
	for _, n := range c {
		t += n
	}
	return t
}

// Estimate is what a source's schedules ask of its ERP an hour.
type Estimate struct {
	Source string
	// Budget is the source's requests_per_hour (0: none).
	Budget int
	// Stretch is how many times their configured interval window runs and
	// complete sweeps are apart, to fit the budget (1: not stretched).
	Stretch float64
	// PerKey is each stream and login's cost, PerKind the source's, both
	// stretched.
	PerKey  map[model.Key]Cost
	PerKind Cost
	// Guessed are the streams whose size is not known yet (no complete
	// sweep recorded): each of their sweeps is counted as one page.
	Guessed []string
}

// Of estimates what src's schedules ask of its ERP an hour, from sizes
// (db.ListSizes), and stretches window runs and sweeps to fit its budget.
func Of(src config.Source, sizes map[model.Key]db.ListSize) Estimate {
	e := Estimate{Source: src.Name, Budget: src.RequestsPerHour, Stretch: 1, PerKey: map[model.Key]Cost{}, PerKind: Cost{}}
	guessed := map[string]bool{}
	for _, sc := range src.Streams {
		for _, l := range src.Logins {
			k := model.Key{Source: src.Name, Stream: sc.Name, Login: l.Name()}
			size, known := sizes[k]
			pages, sized := sweepPages(size, src.PageSize)
			if !known || !sized {
				guessed[sc.Name] = true
			}
			c := Cost{model.KindSweep: config.RunsPerHour(sc.SweepSchedule) * pages}
			if sc.Followed() {
				c[model.KindFollow] = config.RunsPerHour(sc.Schedule)
			}
			if sc.WindowSchedule != "" {
				c[model.KindWindow] = config.RunsPerHour(sc.WindowSchedule) * float64(windowPages(sc, size))
			}
			e.PerKey[k] = c
		}
	}
	e.Guessed = slices.Sorted(maps.Keys(guessed))
	var fixed, flexible float64
	for _, c := range e.PerKey {
		fixed += c[model.KindFollow]
		flexible += c[model.KindWindow] + c[model.KindSweep]
	}
	// Load refuses a budget the follow runs alone would spend; one that
	// leaves them anything stretches the rest to fit what is left.
	if budget := float64(e.Budget); budget > 0 && fixed+flexible > budget && budget > fixed {
		e.Stretch = flexible / (budget - fixed)
	}
	for _, c := range e.PerKey {
		c[model.KindWindow] /= e.Stretch
		c[model.KindSweep] /= e.Stretch
		for kind, n := range c {
			e.PerKind[kind] += n
		}
	}
	return e
}

// sweepPages is how many pages a complete sweep of a list reads: its
// rows over the rows a page of it held when last read (or the page size
// asked for); a stream without sweeps, the pages of its last run. sized
// is false when nothing was recorded yet: a page is assumed.
func sweepPages(s db.ListSize, pageSize int) (pages float64, sized bool) {
	switch {
	case s.SweepRows >= 0:
		perPage := float64(pageSize)
		if s.RunPages > 0 && s.RunRows > 0 {
			perPage = float64(s.RunRows) / float64(s.RunPages)
		}
		return max(1, math.Ceil(float64(s.SweepRows)/max(perPage, 1))), true
	case s.RunPages > 0:
		return float64(s.RunPages), true
	}
	return 1, false
}

// windowPages is how many pages a window run reads: as set, else as its
// last window run read, else the window's size until it is learned.
func windowPages(sc config.StreamConfig, s db.ListSize) int {
	switch {
	case sc.WindowPages > 0:
		return sc.WindowPages
	case s.WindowPages > 0:
		return s.WindowPages
	}
	return model.UntaughtWindowPages
}

// String says the estimate in a line: "about 712 ERP requests an hour
// (follow 120, window 180, sweep 412)", with the budget and its stretch,
// and the streams whose size is guessed.
func (e Estimate) String() string {
	var parts []string
	for _, kind := range []model.RunKind{model.KindFollow, model.KindWindow, model.KindSweep} {
		if n, ok := e.PerKind[kind]; ok && (n > 0 || kind == model.KindSweep) {
			parts = append(parts, fmt.Sprintf("%s %.0f", kind, n))
		}
	}
	out := fmt.Sprintf("about %.0f ERP requests an hour (%s)", e.PerKind.Total(), strings.Join(parts, ", "))
	switch {
	case e.Stretch > 1:
		out += fmt.Sprintf("; requests_per_hour %d: window runs and complete sweeps %.2fx as far apart as their schedules say", e.Budget, e.Stretch)
	case e.Budget > 0:
		out += fmt.Sprintf("; within requests_per_hour %d", e.Budget)
	}
	if len(e.Guessed) > 0 {
		out += "; a sweep of " + strings.Join(e.Guessed, ", ") + " counted as one page until one completes"
	}
	return out
}

// Stretcher stretches schedules by a factor that may change as the
// estimate is made again (lists grow). It is safe for concurrent use;
// its zero value stretches nothing.
type Stretcher struct{ bits atomic.Uint64 }

// Set makes every schedule of the stretcher factor times as far apart
// (1, or less: as configured).
func (s *Stretcher) Set(factor float64) { s.bits.Store(math.Float64bits(factor)) }

// Factor is the stretch in force (1: none).
func (s *Stretcher) Factor() float64 {
	if f := math.Float64frombits(s.bits.Load()); f > 1 {
		return f
	}
	return 1
}

// Schedule is inner, stretched by the stretcher's factor at each tick.
func (s *Stretcher) Schedule(inner cron.Schedule) cron.Schedule {
	return stretched{inner: inner, by: s}
}

// stretched is a schedule whose ticks are its stretcher's factor apart:
// an @every schedule's interval times the factor; a cron spec's every
// n-th tick, n the factor rounded up (its ticks are fixed times).
type stretched struct {
	inner cron.Schedule
	by    *Stretcher
}

func (s stretched) Next(t time.Time) time.Time {
	f := s.by.Factor()
	if f == 1 {
		return s.inner.Next(t)
	}
	if every, ok := s.inner.(cron.ConstantDelaySchedule); ok {
		return cron.Every(time.Duration(float64(every.Delay) * f)).Next(t)
	}
	next := t
	for range int(math.Ceil(f)) {
		next = s.inner.Next(next)
	}
	return next
}
