package config

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	_ "time/tzdata" // CRON_TZ schedules must parse on hosts without zoneinfo

	"github.com/erpsync/erpsync/internal/model"
)

// TestSchedules is when streams run: cron specs, and the two schedules of a
// stream that follows.
func TestSchedules(t *testing.T) {
	t.Run("ParsesCronSpecsDescriptorsAndTimeZones", func(t *testing.T) {
		for _, s := range []string{"@every 5m", "@every 1h30m", "@hourly", "@daily", "0 6 * * *", "*/15 * * * 1-5", "CRON_TZ=Europe/Berlin 0 6 * * *", "TZ=UTC 0 0 1 * *"} {
			if _, err := ParseSchedule(s); err != nil {
				t.Errorf("ParseSchedule(%q): %v", s, err)
			}
		}
		for _, s := range []string{"", "every 5m", "@every", "@every five", "0 6 * *", "0 0 6 * * *", "61 * * * *", "CRON_TZ=Nowhere/Land 0 6 * * *"} {
			if _, err := ParseSchedule(s); err == nil {
				t.Errorf("ParseSchedule(%q) succeeded, want error", s)
			}
		}
	})

	t.Run("AppliesERPSYNC_SCHEDULEToEveryStream", func(t *testing.T) {
		cfg := mustLoad(t, baseEnv("ERPSYNC_SCHEDULE=*/10 * * * *"), Options{Streams: testSpecs})
		for _, st := range cfg.Sources[0].Streams {
			if st.Schedule != "*/10 * * * *" {
				t.Errorf("stream %s schedule = %q, want ERPSYNC_SCHEDULE", st.Name, st.Schedule)
			}
		}
	})
}

// TestSweepSchedules is the two schedules of a stream that follows: follow
// runs on schedule, complete sweeps on sweep_schedule, and a configuration
// written before streams could follow keeping its meaning.
func TestSweepSchedules(t *testing.T) {
	// schedulesOf loads a source enabling invoices (which follows) and
	// currencies (which does not), with the file's keys under them, and
	// renders each as "schedule (from) / sweep (from)".
	schedulesOf := func(t *testing.T, env []string, top, invoices, currencies string) (map[string]string, Config, error) {
		t.Helper()
		yaml := top + "\nsources:\n  - base_url: https://erp.example.com\n    streams:\n      invoices: {" + invoices + "}\n      currencies: {" + currencies + "}\n"
		cfg, err := Load(env, Options{Streams: testSpecs, ConfigFile: writeFile(t, "c.yaml", yaml)})
		out := map[string]string{}
		if err == nil {
			for _, sc := range cfg.Sources[0].Streams {
				out[sc.Name] = fmt.Sprintf("%s (%s) / %s (%s)", sc.Schedule, sc.ScheduleFrom, sc.SweepSchedule, sc.SweepFrom)
			}
		}
		return out, cfg, err
	}
	const own = "sources[0].streams.invoices."

	for _, tt := range []struct {
		name                   string
		env                    []string
		top, invoices          string
		wantInvoices, wantCurr string
	}{
		{name: "AStreamConfiguredWithNeitherTakesItsDefaults",
			wantInvoices: "@every 5m (default) / @every 6h (default)", wantCurr: "@every 30m (default) / @every 30m (schedule)"},
		{name: "ERPSYNC_SCHEDULEAloneKeepsEveryRunASweep", env: []string{"ERPSYNC_SCHEDULE=@every 10m"},
			wantInvoices: "@every 10m (ERPSYNC_SCHEDULE) / @every 10m (schedule)", wantCurr: "@every 10m (ERPSYNC_SCHEDULE) / @every 10m (schedule)"},
		{name: "TheFilesScheduleAloneKeepsEveryRunASweep", top: `schedule: "@every 15m"`,
			wantInvoices: "@every 15m (schedule) / @every 15m (schedule)", wantCurr: "@every 15m (schedule) / @every 15m (schedule)"},
		{name: "AStreamsScheduleAloneKeepsEveryRunASweep", invoices: `schedule: "@every 2m"`,
			wantInvoices: "@every 2m (" + own + "schedule) / @every 2m (schedule)", wantCurr: "@every 30m (default) / @every 30m (schedule)"},
		{name: "AStreamsSweepScheduleAloneKeepsTheDefaultFollowSchedule", invoices: `sweep_schedule: "@daily"`,
			wantInvoices: "@every 5m (default) / @daily (" + own + "sweep_schedule)", wantCurr: "@every 30m (default) / @every 30m (schedule)"},
		{name: "ERPSYNC_SWEEP_SCHEDULEAppliesToTheStreamsThatFollow", env: []string{"ERPSYNC_SWEEP_SCHEDULE=@every 12h"},
			wantInvoices: "@every 5m (default) / @every 12h (ERPSYNC_SWEEP_SCHEDULE)", wantCurr: "@every 30m (default) / @every 30m (schedule)"},
		{name: "AStreamsOwnSweepScheduleWinsOverTheVariable", env: []string{"ERPSYNC_SWEEP_SCHEDULE=@every 12h"}, invoices: `sweep_schedule: "@daily"`,
			wantInvoices: "@every 5m (default) / @daily (" + own + "sweep_schedule)", wantCurr: "@every 30m (default) / @every 30m (schedule)"},
		{name: "BothVariablesSetBoth", env: []string{"ERPSYNC_SCHEDULE=@every 1m", "ERPSYNC_SWEEP_SCHEDULE=CRON_TZ=Europe/Berlin 0 2 * * *"},
			wantInvoices: "@every 1m (ERPSYNC_SCHEDULE) / CRON_TZ=Europe/Berlin 0 2 * * * (ERPSYNC_SWEEP_SCHEDULE)", wantCurr: "@every 1m (ERPSYNC_SCHEDULE) / @every 1m (schedule)"},
		{name: "TheFilesSweepScheduleComesAfterTheVariable", top: "schedule: '@every 15m'\nsweep_schedule: '@hourly'",
			wantInvoices: "@every 15m (schedule) / @hourly (sweep_schedule)", wantCurr: "@every 15m (schedule) / @every 15m (schedule)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, cfg, err := schedulesOf(t, tt.env, tt.top, tt.invoices, "")
			if err != nil {
				t.Fatal(err)
			}
			if got["invoices"] != tt.wantInvoices || got["currencies"] != tt.wantCurr {
				t.Errorf("invoices %q, currencies %q;\nwant     %q, %q", got["invoices"], got["currencies"], tt.wantInvoices, tt.wantCurr)
			}
			if len(cfg.Warnings) > 0 {
				t.Errorf("warnings: %q", cfg.Warnings)
			}
		})
	}

	t.Run("RefusesASweepScheduleOfAStreamThatCannotFollow", func(t *testing.T) {
		_, _, err := schedulesOf(t, nil, "", "", `sweep_schedule: "@daily"`)
		wantConfigError(t, err, "sources[0].streams.currencies.sweep_schedule", "currencies cannot follow", "streams that can follow: invoices, journal_entries")
	})

	t.Run("RefusesASweepScheduleThatDoesNotParse", func(t *testing.T) {
		_, _, err := schedulesOf(t, nil, "", `sweep_schedule: "nightly"`, "")
		wantConfigError(t, err, own+`sweep_schedule: "nightly"`)
		_, _, err = schedulesOf(t, []string{"ERPSYNC_SWEEP_SCHEDULE=CRON_TZ=Mars/Olympus 0 2 * * *"}, "", "", "")
		wantConfigError(t, err, "ERPSYNC_SWEEP_SCHEDULE", "Mars/Olympus")
	})

	t.Run("WarnsOfSweepsMoreFrequentThanFollowRuns", func(t *testing.T) {
		for _, tt := range []struct {
			invoices string
			warn     bool
		}{
			{`sweep_schedule: "@every 1m"`, true},
			{`sweep_schedule: "*/2 * * * *"`, true},
			{`sweep_schedule: "@every 5m"`, false},
			{`sweep_schedule: "0 2 * * *"`, false},
			{`schedule: "@every 1h", sweep_schedule: "*/30 * * * *"`, true},
			{`schedule: "0 6 * * 1-5", sweep_schedule: "0 7 * * *"`, true},
		} {
			_, cfg, err := schedulesOf(t, nil, "", tt.invoices, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := len(cfg.Warnings) > 0; got != tt.warn {
				t.Errorf("%s: warnings %q, want a warning: %v", tt.invoices, cfg.Warnings, tt.warn)
			} else if got && !strings.Contains(cfg.Warnings[0], own+"sweep_schedule") {
				t.Errorf("warning %q does not name the setting", cfg.Warnings[0])
			}
		}
	})
}

func TestDrift(t *testing.T) {
	load := func(t *testing.T, invoices string) (StreamConfig, error) {
		t.Helper()
		path := writeFile(t, "c.yaml", "sources:\n  - streams:\n      invoices: {"+invoices+"}\n")
		cfg, err := Load(nil, Options{Streams: testSpecs, ConfigFile: path})
		if err != nil {
			return StreamConfig{}, err
		}
		return cfg.Sources[0].Streams[0], nil
	}
	t.Run("RecordsByDefault", func(t *testing.T) {
		if sc, err := load(t, ""); err != nil || sc.Drift != DriftRecord {
			t.Errorf("drift %q, %v; want record", sc.Drift, err)
		}
	})
	t.Run("StopsWhenAsked", func(t *testing.T) {
		if sc, err := load(t, "drift: stop"); err != nil || sc.Drift != DriftStop {
			t.Errorf("drift %q, %v; want stop", sc.Drift, err)
		}
	})
	t.Run("RefusesAnyOtherWord", func(t *testing.T) {
		_, err := load(t, "drift: halt")
		wantConfigError(t, err, `sources[0].streams.invoices.drift: "halt" is not record or stop`)
	})
}

// TestWindowSchedules is the third schedule of a stream that follows: its
// window runs, which a configuration written before windows gets only
// when it asks.
func TestWindowSchedules(t *testing.T) {
	// windowOf loads a source enabling invoices (which follows) and
	// currencies (which does not) and renders invoices' window as
	// "schedule (from), pages".
	windowOf := func(t *testing.T, env []string, top, invoices, currencies string) (string, Config, error) {
		t.Helper()
		yaml := top + "\nsources:\n  - base_url: https://erp.example.com\n    streams:\n      invoices: {" + invoices + "}\n      currencies: {" + currencies + "}\n"
		cfg, err := Load(env, Options{Streams: testSpecs, ConfigFile: writeFile(t, "c.yaml", yaml)})
		if err != nil {
			return "", cfg, err
		}
		if c, _ := cfg.Sources[0].Stream("currencies"); c.WindowSchedule != "" || c.WindowFrom != FromNone {
			t.Errorf("currencies has a window: %q (%s)", c.WindowSchedule, c.WindowFrom)
		}
		sc, _ := cfg.Sources[0].Stream("invoices")
		return fmt.Sprintf("%s (%s), %d", sc.WindowSchedule, sc.WindowFrom, sc.WindowPages), cfg, nil
	}
	const own = "sources[0].streams.invoices."

	for _, tt := range []struct {
		name, top, invoices string
		env                 []string
		want                string
	}{
		{name: "AStreamConfiguredWithNoScheduleTakesItsDefault", want: "@every 20m (default), 0"},
		{name: "AStreamsScheduleKeepsItWithoutAWindow", invoices: `schedule: "@every 2m"`, want: " (none), 0"},
		{name: "AStreamsSweepScheduleKeepsItWithoutAWindow", invoices: `sweep_schedule: "@daily"`, want: " (none), 0"},
		{name: "ERPSYNC_SCHEDULEKeepsItWithoutAWindow", env: []string{"ERPSYNC_SCHEDULE=@every 10m"}, want: " (none), 0"},
		{name: "TheFilesScheduleKeepsItWithoutAWindow", top: `schedule: "@every 15m"`, want: " (none), 0"},
		{name: "AWindowScheduleAsksForOne", invoices: `schedule: "@every 2m", sweep_schedule: "@daily", window_schedule: "@every 15m"`,
			want: "@every 15m (" + own + "window_schedule), 0"},
		{name: "ERPSYNC_WINDOW_SCHEDULEAsksForOne", env: []string{"ERPSYNC_WINDOW_SCHEDULE=@every 5m"}, invoices: `sweep_schedule: "@daily"`,
			want: "@every 5m (ERPSYNC_WINDOW_SCHEDULE), 0"},
		{name: "TheFilesWindowScheduleAsksForOne", top: `sweep_schedule: "@daily"` + "\nwindow_schedule: '@hourly'", want: "@hourly (window_schedule), 0"},
		{name: "WindowPagesSetsTheWindowsSize", invoices: `window_pages: 30`, want: "@every 20m (default), 30"},
		{name: "WindowPagesZeroLearnsIt", invoices: `window_pages: 0`, want: "@every 20m (default), 0"},
		{name: "WindowPagesTakesTheLargestWindow", invoices: fmt.Sprintf(`window_pages: %d`, model.MaxWindowPages),
			want: fmt.Sprintf("@every 20m (default), %d", model.MaxWindowPages)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, cfg, err := windowOf(t, tt.env, tt.top, tt.invoices, "")
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("window %q, want %q", got, tt.want)
			}
			if len(cfg.Warnings) > 0 {
				t.Errorf("warnings: %q", cfg.Warnings)
			}
		})
	}

	t.Run("RefusesAWindowOfAStreamThatCannotFollow", func(t *testing.T) {
		_, _, err := windowOf(t, nil, "", "", `window_schedule: "@hourly"`)
		wantConfigError(t, err, "sources[0].streams.currencies.window_schedule", "currencies cannot follow", "streams that can follow: invoices, journal_entries")
		_, _, err = windowOf(t, nil, "", "", `window_pages: 5`)
		wantConfigError(t, err, "sources[0].streams.currencies.window_pages", "currencies cannot follow")
	})

	t.Run("LeavesTheStreamsThatCannotFollowOutOfTheSharedSettings", func(t *testing.T) {
		if _, _, err := windowOf(t, []string{"ERPSYNC_WINDOW_SCHEDULE=@every 5m"}, "", "", ""); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("RefusesWindowPagesBeyondTheLargestWindow", func(t *testing.T) {
		for _, v := range []string{"-1", strconv.Itoa(model.MaxWindowPages + 1), "2.5", "many"} {
			_, _, err := windowOf(t, nil, "", "window_pages: "+v, "")
			wantConfigError(t, err, own+"window_pages")
		}
	})

	t.Run("RefusesAWindowScheduleThatDoesNotParse", func(t *testing.T) {
		_, _, err := windowOf(t, nil, "", `window_schedule: "often"`, "")
		wantConfigError(t, err, own+`window_schedule: "often"`)
	})

	t.Run("WarnsOfWindowPagesWithoutAWindow", func(t *testing.T) {
		_, cfg, err := windowOf(t, nil, "", `schedule: "@every 2m", window_pages: 10`, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], own+"window_pages") || !strings.Contains(cfg.Warnings[0], "no window") {
			t.Errorf("warnings %q, want one naming window_pages", cfg.Warnings)
		}
	})

	t.Run("WarnsOfAWindowNoMoreFrequentThanSweeps", func(t *testing.T) {
		_, cfg, err := windowOf(t, nil, "", `window_schedule: "@every 6h"`, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], own+"window_schedule") {
			t.Errorf("warnings %q, want one naming window_schedule", cfg.Warnings)
		}
	})
}

// TestRequestBudget is a source's budget of requests an hour: it must
// hold more than the follow runs, which it never stretches.
func TestRequestBudget(t *testing.T) {
	load := func(t *testing.T, env []string, source string) (Config, error) {
		t.Helper()
		yaml := "sources:\n  - base_url: https://erp.example.com\n    logins: [{username: a, password_env: P}, {username: b, password_env: P}]\n" + source
		return Load(append(env, "P=secret"), Options{Streams: testSpecs, ConfigFile: writeFile(t, "c.yaml", yaml)})
	}
	// invoices follows every 5 minutes through two logins: 24 requests an
	// hour at least.
	const follows = "    streams: {invoices: {}, currencies: {}}\n"
	t.Run("IsNoneByDefault", func(t *testing.T) {
		cfg, err := load(t, nil, follows)
		if err != nil || cfg.Sources[0].RequestsPerHour != 0 {
			t.Fatalf("budget %d, %v; want none", cfg.Sources[0].RequestsPerHour, err)
		}
	})
	t.Run("HoldsMoreThanTheFollowRuns", func(t *testing.T) {
		cfg, err := load(t, nil, "    requests_per_hour: 25\n"+follows)
		if err != nil || cfg.Sources[0].RequestsPerHour != 25 {
			t.Fatalf("budget %d, %v; want 25", cfg.Sources[0].RequestsPerHour, err)
		}
	})
	t.Run("RefusesABudgetTheFollowRunsWouldSpend", func(t *testing.T) {
		for _, budget := range []string{"24", "10"} {
			_, err := load(t, nil, "    requests_per_hour: "+budget+"\n"+follows)
			wantConfigError(t, err, "sources[0].requests_per_hour", "cannot hold even the follow runs, which ask 24",
				`invoices: 2 logins × 12 follow runs an hour of "@every 5m"`, "it would take more than 24")
		}
		_, err := load(t, []string{"ERPSYNC_ERP_REQUESTS_PER_HOUR=20"}, follows)
		wantConfigError(t, err, "ERPSYNC_ERP_REQUESTS_PER_HOUR", "which ask 24")
	})
	t.Run("TakesAnyBudgetWhereNothingFollows", func(t *testing.T) {
		if _, err := load(t, nil, "    requests_per_hour: 1\n    streams: {invoices: {schedule: '@every 5m'}}\n"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("RefusesANegativeBudget", func(t *testing.T) {
		_, err := load(t, nil, "    requests_per_hour: -5\n"+follows)
		wantConfigError(t, err, "sources[0].requests_per_hour")
	})
}
