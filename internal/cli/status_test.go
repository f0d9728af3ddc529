package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

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
