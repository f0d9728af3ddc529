package cli

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
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
