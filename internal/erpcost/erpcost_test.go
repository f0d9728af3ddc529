package erpcost

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// source is a source read through logins, with invoices on the defaults of a
// list that is followed and currencies read whole every 30 minutes.
func source(budget int, logins ...string) config.Source {
	src := config.Source{Name: "main", PageSize: 500, RequestsPerHour: budget, Streams: []config.StreamConfig{
		{Name: "invoices", Schedule: "@every 30s", WindowSchedule: "@every 10m", SweepSchedule: "@every 24h"},
		{Name: "currencies", Schedule: "@every 30m", SweepSchedule: "@every 30m"},
	}}
	for _, l := range logins {
		src.Logins = append(src.Logins, config.Login{Username: l})
	}
	return src
}

// million is what the warehouse saw of 1,000,000 invoices answered 100 a page
// (whatever page size was asked for), with a window of 26 pages, and of 40
// currencies on one page.
func million(logins ...string) map[model.Key]db.ListSize {
	out := map[model.Key]db.ListSize{}
	for _, l := range logins {
		out[model.Key{Source: "main", Stream: "invoices", Login: l}] = db.ListSize{SweepRows: 1_000_000, RunPages: 10_000, RunRows: 1_000_000, WindowPages: 26}
		out[model.Key{Source: "main", Stream: "currencies", Login: l}] = db.ListSize{SweepRows: 40, RunPages: 1, RunRows: 40}
	}
	return out
}

func near(got, want float64) bool { return math.Abs(got-want) < 0.5 }

// TestOf is the estimate of what a source's schedules ask of its ERP an hour.
func TestOf(t *testing.T) {
	// At 1,000,000 invoices, 100 a page: a request per follow run (120 an hour),
	// 26 pages every 10 minutes (156), 10,000 pages a day (417); currencies one
	// page every 30 minutes (2).
	t.Run("CountsEachKindOfRunFromWhatTheWarehouseLastSaw", func(t *testing.T) {
		e := Of(source(0, "north"), million("north"))
		want := Cost{model.KindFollow: 120, model.KindWindow: 156, model.KindSweep: 10_000.0/24 + 2}
		for kind, n := range want {
			if !near(e.PerKind[kind], n) {
				t.Errorf("%s: %.1f requests an hour, want %.1f", kind, e.PerKind[kind], n)
			}
		}
		if e.Stretch != 1 || len(e.Guessed) != 0 {
			t.Errorf("stretch %v, guessed %q; want 1 and none", e.Stretch, e.Guessed)
		}
		if s := e.String(); !strings.Contains(s, "about 695 ERP requests an hour (follow 120, window 156, sweep 419)") {
			t.Errorf("String() = %q", s)
		}
	})

	t.Run("CountsEachLoginsRunsOfItsOwn", func(t *testing.T) {
		one, two := Of(source(0, "north"), million("north")), Of(source(0, "north", "south"), million("north", "south"))
		if !near(two.PerKind.Total(), 2*one.PerKind.Total()) {
			t.Errorf("two logins ask %.0f an hour, one %.0f; want twice", two.PerKind.Total(), one.PerKind.Total())
		}
		if c := two.PerKey[model.Key{Source: "main", Stream: "invoices", Login: "south"}]; !near(c[model.KindFollow], 120) {
			t.Errorf("south's invoices: %v", c)
		}
	})

	t.Run("CountsThePagesTheERPAnsweredNotThoseAskedFor", func(t *testing.T) {
		sizes := million("north")
		k := model.Key{Source: "main", Stream: "invoices", Login: "north"}
		s := sizes[k]
		s.RunPages, s.RunRows = 0, 0 // no sweep run to tell: the page size asked for, 500
		sizes[k] = s
		if e := Of(source(0, "north"), sizes); !near(e.PerKey[k][model.KindSweep], 2_000.0/24) {
			t.Errorf("sweep %.1f an hour, want 2,000 pages a day", e.PerKey[k][model.KindSweep])
		}
	})

	t.Run("CountsASetWindowElseTheLastElseTheUntaughtOne", func(t *testing.T) {
		k := model.Key{Source: "main", Stream: "invoices", Login: "north"}
		src := source(0, "north")
		src.Streams[0].WindowPages = 5
		if c := Of(src, million("north")).PerKey[k]; !near(c[model.KindWindow], 30) {
			t.Errorf("window_pages 5: %.1f an hour, want 30", c[model.KindWindow])
		}
		if c := Of(source(0, "north"), nil).PerKey[k]; !near(c[model.KindWindow], 6*float64(model.UntaughtWindowPages)) {
			t.Errorf("no window yet: %.1f an hour, want %d pages 6 times", c[model.KindWindow], model.UntaughtWindowPages)
		}
	})

	t.Run("GuessesAPagePerSweepUntilOneIsRecorded", func(t *testing.T) {
		e := Of(source(0, "north"), nil)
		if !slices.Equal(e.Guessed, []string{"currencies", "invoices"}) || !strings.Contains(e.String(), "counted as one page until one completes") {
			t.Errorf("guessed %q: %s", e.Guessed, e)
		}
	})

	t.Run("AsksNothingOfAStreamWithoutFollowRunsOrAWindow", func(t *testing.T) {
		e := Of(source(0, "north"), million("north"))
		c := e.PerKey[model.Key{Source: "main", Stream: "currencies", Login: "north"}]
		if c[model.KindFollow] != 0 || c[model.KindWindow] != 0 {
			t.Errorf("currencies: %v", c)
		}
	})

	// A budget of 500 an hour leaves 380 to the window runs and sweeps, which ask
	// 575: they are stretched 1.51x, the follow runs not at all.
	t.Run("StretchesWindowsAndSweepsNeverFollowRunsToFitTheBudget", func(t *testing.T) {
		e := Of(source(500, "north"), million("north"))
		if !near(e.PerKind.Total(), 500) || !near(e.PerKind[model.KindFollow], 120) {
			t.Errorf("stretched to %.1f an hour, follow %.1f; want 500 and 120", e.PerKind.Total(), e.PerKind[model.KindFollow])
		}
		if want := (156 + 10_000.0/24 + 2) / 380; math.Abs(e.Stretch-want) > 0.01 {
			t.Errorf("stretch %.3f, want %.3f", e.Stretch, want)
		}
		if s := e.String(); !strings.Contains(s, "requests_per_hour 500: window runs and complete sweeps 1.51x as far apart") {
			t.Errorf("String() = %q", s)
		}
	})

	t.Run("StretchesNothingWithinTheBudget", func(t *testing.T) {
		e := Of(source(1000, "north"), million("north"))
		if e.Stretch != 1 || !strings.Contains(e.String(), "within requests_per_hour 1000") {
			t.Errorf("stretch %v: %s", e.Stretch, e)
		}
	})
}

// TestStretcher is a schedule stretched by a factor that may change.
func TestStretcher(t *testing.T) {
	at := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		spec   string
		factor float64
		want   time.Duration
	}{
		{"@every 10m", 0, 10 * time.Minute},
		{"@every 10m", 1, 10 * time.Minute},
		{"@every 10m", 1.5, 15 * time.Minute},
		{"@every 24h", 3.2, 76*time.Hour + 48*time.Minute},
		{"0 * * * *", 1, time.Hour},
		{"0 * * * *", 2.2, 3 * time.Hour}, // every third tick
	} {
		var s Stretcher
		s.Set(tt.factor)
		inner, err := config.ParseSchedule(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Schedule(inner).Next(at).Sub(at); got != tt.want {
			t.Errorf("%s stretched %vx: next in %s, want %s", tt.spec, tt.factor, got, tt.want)
		}
	}
}
