package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestStatus documents `erpsync status`.
func TestStatus(t *testing.T) {
	t.Parallel()
	// After a sync of the core streams, status --json prints one entry per core
	// stream, each last run succeeded, and the table says the same; before any run it
	// prints an empty list.
	t.Run("ListsEveryCoreStreamAfterASync", func(t *testing.T) {
		t.Parallel()
		_, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 75, PageSizeCap: 50})
		dbURL := testdb.New(t)
		env := erpEnv(simURL, dbURL, goodPassword, "ERPSYNC_ERP_PAGE_SIZE=50")

		// Before any run: an empty JSON list, not null.
		r := runMain(t, env, "status", "--json")
		if r.code != exitOK {
			t.Fatalf("status --json before any run: exit %d\n%s", r.code, r)
		}
		var empty []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &empty); err != nil || empty == nil || len(empty) != 0 {
			t.Errorf("status --json before any run: want [], got %q (err %v)", r.stdout, err)
		}

		if r := runMain(t, env, "sync"); r.code != exitOK {
			t.Fatalf("sync: exit %d\n%s", r.code, r)
		}
		r = runMain(t, env, "status", "--json")
		if r.code != exitOK {
			t.Fatalf("status --json: exit %d\n%s", r.code, r)
		}
		if !json.Valid([]byte(r.stdout)) {
			t.Fatalf("status --json printed invalid JSON:\n%s", r.stdout)
		}
		var st []struct {
			Source        string `json:"source"`
			Stream        string `json:"stream"`
			LastRunStatus string `json:"last_run_status"`
			LastError     string `json:"last_error"`
			LastSuccess   string `json:"last_success"`
			Sweep         bool   `json:"sweep_in_progress"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, r.stdout)
		}
		var streams []string
		for _, s := range st {
			streams = append(streams, s.Stream)
			if s.Source != "default" {
				t.Errorf("stream %s: source %q, want default", s.Stream, s.Source)
			}
			if s.LastRunStatus != "succeeded" {
				t.Errorf("stream %s: last_run_status %q, want succeeded (error %q)", s.Stream, s.LastRunStatus, s.LastError)
			}
			if s.LastSuccess == "" {
				t.Errorf("stream %s: no last_success", s.Stream)
			}
			if s.Sweep {
				t.Errorf("stream %s: sweep still in progress after a successful sync", s.Stream)
			}
		}
		slices.Sort(streams)
		want := slices.Sorted(slices.Values(coreStreams))
		if !slices.Equal(streams, want) {
			t.Errorf("status --json streams = %v, want one entry per core stream %v", streams, want)
		}

		// The table form says the same.
		r = runMain(t, env, "status")
		if r.code != exitOK || strings.Count(r.stdout, "succeeded") != len(coreStreams) {
			t.Errorf("status: exit %d, want 0 and %d lines with succeeded\n%s", r.code, len(coreStreams), r)
		}
	})

	// It warns of what needs an operator: a run that has held its lock for more than
	// three intervals of its schedule, and held deletions.
	t.Run("WarnsOfARunHeldTooLongAndOfHeldDeletions", func(t *testing.T) {
		t.Parallel()
		// invoices: a follow run held an hour against its 30-second schedule.
		// journal_entries: a complete sweep held an hour against its weekly
		// one, which is no warning.
		dbURL := databaseWith(t, `
INSERT INTO erp.sync_runs (source, stream, kind, status, started_at) VALUES ('default', 'invoices', 'follow', 'running', now() - interval '1 hour');
INSERT INTO erp.sync_runs (source, stream, kind, status, started_at) VALUES ('default', 'journal_entries', 'sweep', 'running', now() - interval '1 hour');
INSERT INTO erp.sync_checkpoints (source, stream, last_sweep_completed_at, held_deletions) VALUES ('default', 'cashboxes', now(), 40);`)
		// Their processes still hold the locks they run under.
		testdb.HoldStreamLock(t, dbURL, "", "erpsync", "default", "invoices", model.KindFollow)
		testdb.HoldStreamLock(t, dbURL, "", "erpsync", "default", "journal_entries", model.KindSweep)
		got := statusField(t, dbURL, "warning")
		if !strings.Contains(got["invoices"], "running for 1h0m") || !strings.Contains(got["invoices"], "3x its schedule") {
			t.Errorf("invoices warning %q, want the follow run held an hour against its 30-second schedule", got["invoices"])
		}
		if strings.Contains(got["journal_entries"], "running for") {
			t.Errorf("journal_entries warning %q, want none for a sweep an hour into its weekly schedule", got["journal_entries"])
		}
		if !strings.Contains(got["cashboxes"], "40 deletions held") || !strings.Contains(got["cashboxes"], "--confirm-deletions cashboxes") {
			t.Errorf("cashboxes warning %q", got["cashboxes"])
		}
		if sched := statusField(t, dbURL, "schedules_from")["invoices"]; sched != "the stream's defaults" {
			t.Errorf("invoices schedules from %q, want the stream's defaults", sched)
		}
	})

	// A run recorded as running whose process is gone (killed: nothing holds the
	// lock it runs under) is told from one in progress: LAST RUN says so, WARNING
	// names the run and its process and says the next run closes it and resumes
	// the sweep after its last page; SWEEP says the first load stopped there and
	// resumes. Once a process holds the lock, the run is in progress again.
	t.Run("TellsARunWhoseProcessIsGoneFromOneInProgress", func(t *testing.T) {
		t.Parallel()
		dbURL := databaseWith(t, `
INSERT INTO erp.sync_checkpoints (source, stream, sweep_id, sweep_started_at, cursor, pages, rows)
  VALUES ('default', 'invoices', nextval('erp.sweep_id_seq'), now() - interval '5 minutes', 'C136', 135, 67500);
INSERT INTO erp.sync_runs (source, stream, kind, status, started_at, host, pid)
  VALUES ('default', 'invoices', 'follow', 'running', now() - interval '5 minutes', 'node-1', 4242);`)
		var id int64
		if err := testdb.ObserverPool(t, dbURL).QueryRow(context.Background(), `SELECT id FROM erp.sync_runs`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		env := environ("ERPSYNC_DATABASE_URL=" + dbURL)
		r := runMain(t, env, "status", "--json", "invoices")
		var st []struct {
			ProcessGone bool   `json:"process_gone"`
			FirstLoad   bool   `json:"first_load"`
			Warning     string `json:"warning"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st) != 1 {
			t.Fatalf("status --json: %v\n%s", err, r)
		}
		want := fmt.Sprintf("run %d (pid 4242 on node-1) is recorded as running but its process is gone (nothing holds the stream's lock): "+
			"the next run closes it as abandoned and resumes the sweep after page 135", id)
		if !st[0].ProcessGone || !st[0].FirstLoad || st[0].Warning != want {
			t.Errorf("status of a first load whose process is gone: %+v, want it gone, a first load, warning %q", st[0], want)
		}
		r = runMain(t, env, "status", "invoices")
		for _, want := range []string{"running (process gone)", "first load stopped: 135 pages, 67500 rows; resumes on the next run"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("status table lacks %q\n%s", want, r)
			}
		}

		testdb.HoldStreamLock(t, dbURL, "", "erpsync", "default", "invoices", model.KindFollow)
		r = runMain(t, env, "status", "invoices")
		if !strings.Contains(r.stdout, "first load in progress: 135 pages, 67500 rows") || strings.Contains(r.stdout, "gone") {
			t.Errorf("status of a first load whose process holds its lock: want it in progress\n%s", r)
		}
	})

	// A list that is followed shows its three schedules and where they came from,
	// its window (pages, ids, why that size) once a window run read it, and what
	// each stream asks of the ERP an hour, per login and per source.
	t.Run("ShowsEachListsWindowItsSchedulesAndWhatTheyAskOfTheERP", func(t *testing.T) {
		t.Parallel()
		_, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 120, PageSizeCap: 50})
		dbURL := testdb.New(t)
		env := erpEnv(simURL, dbURL, goodPassword, "ERPSYNC_ERP_PAGE_SIZE=50")
		for _, args := range [][]string{{"sync", "invoices"}, {"sync", "--window", "invoices"}} {
			if r := runMain(t, env, args...); r.code != exitOK {
				t.Fatalf("%s: exit %d\n%s", args, r.code, r)
			}
		}
		r := runMain(t, env, "status", "--json", "invoices")
		var st []model.StreamStatus
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st) != 1 {
			t.Fatalf("status --json invoices: %v\n%s", err, r)
		}
		s := st[0]
		if s.WindowSchedule != "@every 10m" || s.SchedulesFrom != "the stream's defaults" {
			t.Errorf("window schedule %q from %q, want the default @every 10m", s.WindowSchedule, s.SchedulesFrom)
		}
		if s.LastWindow == nil || s.RecentChangesSecs == nil || s.WindowPages != 3 || s.WindowFromID == "" || !strings.Contains(s.WindowSizeWhy, "pages") {
			t.Errorf("window: last %v, recent changes %v s, %d pages from id %q (%q); want the 3 pages of 120 invoices read",
				s.LastWindow, s.RecentChangesSecs, s.WindowPages, s.WindowFromID, s.WindowSizeWhy)
		}
		// 3 pages a sweep, daily; a window of 3 pages every 10 minutes (18); a
		// request per follow run (120).
		want := map[model.RunKind]float64{model.KindFollow: 120, model.KindWindow: 18, model.KindSweep: 3.0 / 24}
		for kind, n := range want {
			if math.Abs(s.RequestsPerHour[kind]-n) > 0.01 {
				t.Errorf("%s asks %.2f requests an hour, want %.2f", kind, s.RequestsPerHour[kind], n)
			}
		}
		r = runMain(t, env, "status")
		for _, want := range []string{"follow @every 30s, window @every 10m, sweep @every 24h (the stream's defaults)",
			"3 pages, ids " + s.WindowFromID + " to the newest", "source default: about "} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("status does not say %q:\n%s", want, r.stdout)
			}
		}
	})

	// A schedule from the file's top-level key "schedule" is named as such,
	// though a sweep schedule taken from the schedule is written the same
	// way; what a sweep or window schedule derives from is not named twice.
	t.Run("NamesTheSettingEachScheduleCameFrom", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			sc      config.StreamConfig
			follows bool
			want    string
		}{
			{config.StreamConfig{ScheduleFrom: "schedule", SweepFrom: config.FromSchedule, WindowFrom: config.FromNone}, false, "schedule"},
			{config.StreamConfig{ScheduleFrom: "schedule", SweepFrom: config.FromSchedule, WindowFrom: config.FromNone}, true,
				"schedule, no window: its schedules are set and window_schedule is not"},
			{config.StreamConfig{ScheduleFrom: config.FromDefault, SweepFrom: config.FromDefault, WindowFrom: config.FromDefault, WindowSchedule: "@every 10m"},
				true, "the stream's defaults"},
			{config.StreamConfig{ScheduleFrom: "ERPSYNC_SCHEDULE", SweepFrom: "sweep_schedule", WindowFrom: "window_schedule", WindowSchedule: "@every 10m"},
				true, "ERPSYNC_SCHEDULE, sweep_schedule, window_schedule"},
		} {
			if got := schedulesFrom(c.sc, c.follows); got != c.want {
				t.Errorf("schedulesFrom(%+v) = %q, want %q", c.sc, got, c.want)
			}
		}
	})

	// A list shorter than its window is read whole, often as one page: the
	// window and a sweep in progress count it as a sentence does.
	t.Run("CountsOnePageInTheSingular", func(t *testing.T) {
		t.Parallel()
		why := "20 pages until changes are seen"
		for _, c := range []struct{ got, want string }{
			{window(model.WindowStatus{WindowPages: 1, WindowFromID: "1001", WindowSizeWhy: why}), "1 page, ids 1001 to the newest (" + why + ")"},
			{window(model.WindowStatus{WindowPages: 26, WindowFromID: "974001"}), "26 pages, ids 974001 to the newest"},
			{sweepState(model.StreamStatus{SweepStatus: model.SweepStatus{SweepInProgress: true, SweepPages: 1, SweepRows: 250}}),
				"in progress: 1 page, 250 rows"},
			{sweepState(model.StreamStatus{LastRun: model.LastRun{ProcessGone: true},
				SweepStatus: model.SweepStatus{SweepInProgress: true, SweepPages: 135, SweepRows: 67500, SweepResumable: true}}),
				"stopped: 135 pages, 67500 rows; resumes on the next run"},
		} {
			if c.got != c.want {
				t.Errorf("got %q, want %q", c.got, c.want)
			}
		}
	})

	// New records, recent changes and everything are each judged against their own
	// schedule: recent changes 40 minutes old are late for a window every 10
	// minutes, not once a budget spaces the windows out 2.5x; 25 minutes is not
	// late either way.
	t.Run("JudgesEachFreshnessAgainstItsOwnSchedule", func(t *testing.T) {
		t.Parallel()
		dbURL := databaseWith(t, `
INSERT INTO erp.sync_checkpoints (source, stream, last_sweep_completed_at, last_sweep_rows) VALUES
  ('default', 'invoices', now() - interval '2 hours', 10000000), ('default', 'journal_entries', now() - interval '2 hours', 10);
INSERT INTO erp.sync_follow (source, stream, login, last_follow_at) VALUES
  ('default', 'invoices', '', now() - interval '1 minute'), ('default', 'journal_entries', '', now() - interval '1 minute');
INSERT INTO erp.sync_window (source, stream, login, last_window_at) VALUES
  ('default', 'invoices', '', now() - interval '40 minutes'), ('default', 'journal_entries', '', now() - interval '25 minutes');`)
		warnings := func(env ...string) map[string]string {
			r := runMain(t, environ(append(env, "ERPSYNC_DATABASE_URL="+dbURL, "ERPSYNC_ERP_BASE_URL=https://erp.example.com",
				"ERPSYNC_STREAMS=invoices,journal_entries")...), "status", "--json")
			var st []model.StreamStatus
			if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
				t.Fatalf("status --json: %v\n%s", err, r)
			}
			out := map[string]string{}
			for _, s := range st {
				out[s.Stream] = s.Warning
			}
			return out
		}
		got := warnings()
		if !strings.Contains(got["invoices"], "recent changes 40m0s old, more than 3x its window schedule") || strings.Contains(got["invoices"], "new records") ||
			strings.Contains(got["invoices"], "data ") {
			t.Errorf("invoices warning %q, want recent changes late alone", got["invoices"])
		}
		if got["journal_entries"] != "" {
			t.Errorf("journal_entries warning %q, want none", got["journal_entries"])
		}
		// 10,000,000 invoices at 500 a page, daily, leave 380 of a budget of 500
		// to sweeps (833) and windows (240 of both lists): 2.8x.
		if got := warnings("ERPSYNC_ERP_REQUESTS_PER_HOUR=500"); got["invoices"] != "" {
			t.Errorf("invoices warning %q under a budget that spaces windows out, want none", got["invoices"])
		}
	})

	// It shows the streams it is given (all when none; an unknown name is refused),
	// and LAST ERROR is the error of the last run that ended: a success after a
	// failure clears it, a run in progress does not.
	t.Run("ShowsTheStreamsNamedAndTheErrorOfTheLastRunThatEnded", func(t *testing.T) {
		t.Parallel()
		dbURL := databaseWith(t, `
INSERT INTO erp.sync_runs (source, stream, status, started_at, finished_at, error) VALUES
  ('default', 'invoices', 'failed', now() - interval '2 hours', now() - interval '2 hours', 'invoices boom'),
  ('default', 'invoices', 'succeeded', now() - interval '1 hour', now() - interval '1 hour', NULL),
  ('default', 'cashboxes', 'succeeded', now() - interval '2 hours', now() - interval '2 hours', NULL),
  ('default', 'cashboxes', 'failed', now() - interval '1 hour', now() - interval '1 hour', 'cashboxes boom'),
  ('default', 'currencies', 'failed', now() - interval '2 hours', now() - interval '2 hours', 'currencies boom'),
  ('default', 'currencies', 'running', now() - interval '1 minute', NULL, NULL);`)
		status := func(streams ...string) map[string]string { return statusField(t, dbURL, "last_error", streams...) }
		want := map[string]string{"invoices": "", "cashboxes": "cashboxes boom", "currencies": "currencies boom"}
		if got := status(); fmt.Sprint(got) != fmt.Sprint(want) { // maps print sorted
			t.Errorf("status: last errors %v, want %v", got, want)
		}
		if got := status("invoices", "cashboxes"); fmt.Sprint(got) != fmt.Sprint(map[string]string{"invoices": "", "cashboxes": "cashboxes boom"}) {
			t.Errorf("status invoices cashboxes: %v, want those two streams only", got)
		}
		if r := runMain(t, environ("ERPSYNC_DATABASE_URL="+dbURL), "status", "invoice"); r.code != exitUsage || !strings.Contains(r.stderr, `unknown stream "invoice"`) {
			t.Errorf("status with an unknown stream: want exit 2 naming it\n%s", r)
		}
	})
}
