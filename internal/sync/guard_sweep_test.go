package sync_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	gosync "sync"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

const (
	guardJournalPath  = "/accounts/api/journal-entries/"
	guardInvoicesPath = "/sales/api/invoices/list/"
	guardCashboxPath  = "/accounts/api/cashboxes/"
)

// TestTheDeletionGuardOnACompleteSweep: what a complete sweep finds gone
// is held when it is more than half of the stream's live rows and more
// than ten of them, or all of them; otherwise it is marked at once. The
// boundaries, read through the ERP: ten and eleven rows gone, exactly
// half and one more than half, an empty stream.
func TestTheDeletionGuardOnACompleteSweep(t *testing.T) {
	t.Parallel()
	liveNote := func(h *harness, table string, runID int64) (int64, string) {
		return h.count(`SELECT count(*) FROM erp.` + table + ` WHERE deleted_at IS NULL`),
			h.text(`SELECT coalesce(note, '') FROM erp.sync_runs WHERE id = $1`, runID)
	}

	t.Run("holds sixteen of thirty gone, one more than half, and marks fifteen, exactly half", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{})
		h.mustRun("journal_entries")
		h.sim.SetListCut(guardJournalPath, 14)
		res := h.mustRun("journal_entries")
		live, note := liveNote(h, "journal_entries", res.RunID)
		if res.HeldDeletions != 16 || res.Stats.Deleted != 0 || live != 30 {
			t.Errorf("16 of 30 gone: held %d, deleted %d, live %d; want 16 held, none deleted, 30 live", res.HeldDeletions, res.Stats.Deleted, live)
		}
		want := "deletion held: 16 of 30 live rows gone (sweep 1 of 3 that must agree; or confirm with erpsync sync --confirm-deletions journal_entries)"
		if note != want {
			t.Errorf("note %q, want %q", note, want)
		}
		h.sim.SetListCut(guardJournalPath, 0)
		h.mustRun("journal_entries")
		h.sim.SetListCut(guardJournalPath, 15)
		res = h.mustRun("journal_entries")
		live, note = liveNote(h, "journal_entries", res.RunID)
		if res.HeldDeletions != 0 || res.Stats.Deleted != 15 || live != 15 {
			t.Errorf("15 of 30 gone: held %d, deleted %d, live %d; want none held, 15 deleted, 15 live", res.HeldDeletions, res.Stats.Deleted, live)
		}
		if note != "" {
			t.Errorf("exactly half gone noted %q, want nothing", note)
		}
	})

	t.Run("marks ten of nineteen gone: more than half, but not more than ten", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 19})
		h.mustRun("invoices")
		h.sim.SetListCut(guardInvoicesPath, 9)
		res := h.mustRun("invoices")
		live, note := liveNote(h, "invoices", res.RunID)
		if res.HeldDeletions != 0 || res.Stats.Deleted != 10 || live != 9 {
			t.Errorf("10 of 19 gone: held %d, deleted %d, live %d; want none held, 10 deleted, 9 live (note %q)", res.HeldDeletions, res.Stats.Deleted, live, note)
		}
	})

	t.Run("holds eleven of twenty gone: more than half, and more than ten", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 20})
		h.mustRun("invoices")
		h.sim.SetListCut(guardInvoicesPath, 9)
		res := h.mustRun("invoices")
		live, note := liveNote(h, "invoices", res.RunID)
		if res.HeldDeletions != 11 || res.Stats.Deleted != 0 || live != 20 {
			t.Errorf("11 of 20 gone: held %d, deleted %d, live %d; want 11 held, none deleted, 20 live", res.HeldDeletions, res.Stats.Deleted, live)
		}
		if !strings.HasPrefix(note, "deletion held: 11 of 20 live rows gone (sweep 1 of 3 that must agree;") {
			t.Errorf("note %q does not say 11 of 20 were held", note)
		}
	})

	t.Run("holds nothing of an empty stream", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{})
		h.sim.SetEmptyList(guardCashboxPath, true)
		for run := 1; run <= 2; run++ {
			res := h.mustRun("cashbox_access")
			live, note := liveNote(h, "cashbox_access", res.RunID)
			if res.HeldDeletions != 0 || res.Stats.Deleted != 0 || live != 0 || note != "" {
				t.Errorf("run %d of an empty stream: held %d, deleted %d, live %d, note %q; want nothing at all", run, res.HeldDeletions, res.Stats.Deleted, live, note)
			}
			if n := h.count(`SELECT count(*) FROM erp.sync_checkpoints WHERE stream = 'cashbox_access' AND (held_deletions <> 0 OR held_sweeps <> 0)`); n != 0 {
				t.Errorf("run %d of an empty stream recorded a held deletion", run)
			}
		}
	})
}

// TestAHeldDeletionIsMarkedOnlyByThreeAgreeingSweeps: a held deletion
// says in the run's note which sweep of the three that must agree it is;
// the third complete sweep finding the very same rows gone marks them and
// says since when they were held. The log says the same to an operator:
// how many sweeps agree, and after how many the deletion applies.
func TestAHeldDeletionIsMarkedOnlyByThreeAgreeingSweeps(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 20})
	logged := &guardLog{}
	h.runner.Log = slog.New(slog.NewJSONHandler(logged, nil))
	h.mustRun("invoices")
	note := func(runID int64) string {
		return h.text(`SELECT coalesce(note, '') FROM erp.sync_runs WHERE id = $1`, runID)
	}
	held := func(sweep int) string {
		return "deletion held: 11 of 20 live rows gone (sweep " + string(rune('0'+sweep)) +
			" of 3 that must agree; or confirm with erpsync sync --confirm-deletions invoices)"
	}
	h.sim.SetListCut(guardInvoicesPath, 9)
	for sweep := 1; sweep <= 2; sweep++ {
		res := h.mustRun("invoices")
		if res.HeldDeletions != 11 || res.Stats.Deleted != 0 {
			t.Fatalf("sweep %d: held %d, deleted %d; want 11 held", sweep, res.HeldDeletions, res.Stats.Deleted)
		}
		if got := note(res.RunID); got != held(sweep) {
			t.Errorf("sweep %d: note %q, want %q", sweep, got, held(sweep))
		}
		if n := h.count(`SELECT held_sweeps FROM erp.sync_checkpoints WHERE stream = 'invoices'`); n != int64(sweep) {
			t.Errorf("sweep %d: checkpoint counts %d agreeing sweeps", sweep, n)
		}
		want := map[string]float64{"rows": 11, "live": 20, "sweeps_agreeing": float64(sweep), "applied_after": 3}
		if got := logged.last(t, "deletion held: too many live rows gone at once"); !guardSameNumbers(got, want) {
			t.Errorf("sweep %d: held deletion logged %v, want %v", sweep, got, want)
		}
	}
	res := h.mustRun("invoices")
	if res.HeldDeletions != 0 || res.Stats.Deleted != 11 {
		t.Errorf("third sweep: held %d, deleted %d; want the 11 marked", res.HeldDeletions, res.Stats.Deleted)
	}
	if got := note(res.RunID); !strings.HasPrefix(got, "11 of 20 live rows gone in 3 complete sweeps in a row since ") ||
		!strings.HasSuffix(got, ": marked deleted") {
		t.Errorf("third sweep: note %q, want the 11 marked after 3 sweeps", got)
	}
	want := map[string]float64{"rows": 11, "sweeps": 3}
	if got := logged.last(t, "held deletion confirmed by consecutive complete sweeps; marking"); !guardSameNumbers(got, want) {
		t.Errorf("third sweep: marking logged %v, want %v", got, want)
	}
	if n := h.count(`SELECT held_deletions + held_sweeps FROM erp.sync_checkpoints WHERE stream = 'invoices'`); n != 0 {
		t.Errorf("a marked deletion is still held in the checkpoint (%d)", n)
	}
}

// guardLog keeps a runner's JSON log lines.
type guardLog struct {
	mu  gosync.Mutex
	buf bytes.Buffer
}

func (l *guardLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// last is the last line logged with message msg, decoded (nil if none).
func (l *guardLog) last(t *testing.T, msg string) map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var found map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			found = rec
		}
	}
	return found
}

// guardSameNumbers reports whether rec holds each number of want under its key.
func guardSameNumbers(rec map[string]any, want map[string]float64) bool {
	for k, v := range want {
		if n, ok := rec[k].(float64); !ok || n != v {
			return false
		}
	}
	return true
}
