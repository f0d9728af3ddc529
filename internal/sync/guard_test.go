package sync_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testutil"
)

const (
	reconsPath   = "/accounts/api/cashbox-reconciliations/"
	paymentsPath = "/accounts/api/payment-vouchers/"
)

// TestDeletionGuard documents the deletion guard through real runs: what a
// read finds gone is held when it would leave the stream without live rows,
// or is more than half of them and more than ten, until three complete
// sweeps agree or an operator confirms; anything else is marked at once.
func TestDeletionGuard(t *testing.T) {
	t.Parallel()

	t.Run("HoldsAnEmptyAnswerOnASmallList", func(t *testing.T) {
		// One empty answer on a list of six rows would leave the stream with
		// none; the guard holds it, whatever the list's size.
		h := newHarness(t, erpsim.Options{})
		h.mustRun("cashbox_reconciliations")
		if n := h.count(`SELECT count(*) FROM erp.cashbox_reconciliations WHERE deleted_at IS NULL`); n != 6 {
			t.Fatalf("%d live reconciliations, want the simulator's 6", n)
		}
		h.sim.SetEmptyList(reconsPath, true)
		res := h.mustRun("cashbox_reconciliations")
		if res.Stats.Deleted != 0 || res.HeldDeletions != 6 {
			t.Errorf("an empty answer deleted %d and held %d; want none deleted, 6 held", res.Stats.Deleted, res.HeldDeletions)
		}
		if n := h.count(`SELECT count(*) FROM erp.cashbox_reconciliations WHERE deleted_at IS NULL`); n != 6 {
			t.Errorf("%d live reconciliations after an empty answer, want 6", n)
		}
		if note := h.text(`SELECT note FROM erp.sync_runs WHERE id = $1`, res.RunID); !strings.Contains(note, "deletion held: 6 of 6 live rows gone") {
			t.Errorf("run note %q does not say the deletion was held", note)
		}
		// A list that really shrank by one is marked at once.
		h.sim.SetEmptyList(reconsPath, false)
		h.mustRun("cashbox_reconciliations")
		h.sim.SetListCut(reconsPath, 5)
		if res := h.mustRun("cashbox_reconciliations"); res.Stats.Deleted != 1 || res.HeldDeletions != 0 {
			t.Errorf("one of six gone: deleted %d, held %d; want 1 and 0", res.Stats.Deleted, res.HeldDeletions)
		}
	})

	t.Run("HoldsEmptyAccessListsAndMarksACashboxWhoseUsersAllWent", func(t *testing.T) {
		// Access lists are read cashbox by cashbox, and what they no longer list
		// is decided once, at the end, by the deletion guard: every list
		// answered empty (a permission withdrawn) is held; one cashbox whose
		// users were all removed is marked.
		h := newHarness(t, erpsim.Options{})
		h.mustRun("cashbox_access")
		live := h.count(`SELECT count(*) FROM erp.cashbox_access WHERE deleted_at IS NULL`)
		boxes := strings.Split(h.text(`SELECT string_agg(DISTINCT cashbox_id, ',') FROM erp.cashbox_access`), ",")
		if live < 4 || len(boxes) < 2 {
			t.Fatalf("%d grants of %d cashboxes: too few to tell", live, len(boxes))
		}
		access := func(box string) string { return "/accounts/api/cashboxes/" + box + "/access/" }
		for _, box := range boxes {
			h.sim.SetEmptyList(access(box), true)
		}
		res := h.mustRun("cashbox_access")
		if res.Stats.Deleted != 0 || res.HeldDeletions != live {
			t.Errorf("every access list empty: deleted %d, held %d; want none deleted, %d held", res.Stats.Deleted, res.HeldDeletions, live)
		}
		if n := h.count(`SELECT count(*) FROM erp.cashbox_access WHERE deleted_at IS NULL`); n != live {
			t.Errorf("%d live grants after empty lists, want %d", n, live)
		}
		for _, box := range boxes[1:] {
			h.sim.SetEmptyList(access(box), false)
		}
		gone := h.count(`SELECT count(*) FROM erp.cashbox_access WHERE cashbox_id = $1`, boxes[0])
		if res := h.mustRun("cashbox_access"); res.Stats.Deleted != gone || res.HeldDeletions != 0 {
			t.Errorf("one cashbox's users removed: deleted %d, held %d; want %d and 0", res.Stats.Deleted, res.HeldDeletions, gone)
		}
		if n := h.count(`SELECT count(*) FROM erp.cashbox_access WHERE deleted_at IS NOT NULL AND cashbox_id <> $1`, boxes[0]); n != 0 {
			t.Errorf("%d grants of other cashboxes marked deleted", n)
		}
	})

	// What a complete sweep finds gone is held when it is more than half of the
	// stream's live rows and more than ten of them, or all of them; otherwise it
	// is marked at once. The boundaries, read through the ERP: ten and eleven
	// rows gone, exactly half and one more than half, an empty stream.
	liveNote := func(h *harness, table string, runID int64) (int64, string) {
		return h.count(`SELECT count(*) FROM erp.` + table + ` WHERE deleted_at IS NULL`),
			h.text(`SELECT coalesce(note, '') FROM erp.sync_runs WHERE id = $1`, runID)
	}

	t.Run("HoldsSixteenOfThirtyGoneAndMarksFifteenExactlyHalf", func(t *testing.T) {
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

	t.Run("MarksTenOfNineteenGoneMoreThanHalfButNotMoreThanTen", func(t *testing.T) {
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

	t.Run("HoldsElevenOfTwentyGoneMoreThanHalfAndMoreThanTen", func(t *testing.T) {
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

	t.Run("HoldsNothingOfAnEmptyStream", func(t *testing.T) {
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

	t.Run("MarksAHeldDeletionOnlyWhenThreeSweepsAgree", func(t *testing.T) {
		// A held deletion says in the run's note which sweep of the three that
		// must agree it is; the third complete sweep finding the very same rows
		// gone marks them and says since when they were held. The log says the
		// same to an operator: how many sweeps agree, and after how many the
		// deletion applies.
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
	})

	t.Run("HoldsAnEmptyAnswerUntilItPassesOrThreeSweepsAgree", func(t *testing.T) {
		// One empty answer on a route that had rows is held by the deletion
		// guard; a glitch that passes deletes nothing, and rows gone for good are
		// marked once further complete sweeps agree.
		t.Parallel()
		const path = "/accounts/api/journal-entries/"
		h := newHarness(t, erpsim.Options{})
		h.mustRun("journal_entries") // 30 rows
		live := func() int64 { return h.count(`SELECT count(*) FROM erp.journal_entries WHERE deleted_at IS NULL`) }

		h.sim.SetEmptyList(path, true)
		res := h.mustRun("journal_entries")
		if res.HeldDeletions != 30 || res.Stats.Deleted != 0 || live() != 30 {
			t.Fatalf("empty answer: held %d, deleted %d, live %d; want 30 held, none deleted", res.HeldDeletions, res.Stats.Deleted, live())
		}
		if got := h.text(`SELECT note FROM erp.sync_runs ORDER BY id DESC LIMIT 1`); !strings.Contains(got, "deletion held") {
			t.Errorf("note = %q", got)
		}
		if n := h.count(`SELECT held_deletions FROM erp.sync_checkpoints WHERE stream = 'journal_entries'`); n != 30 {
			t.Errorf("checkpoint held_deletions = %d", n)
		}
		// The glitch passes: nothing deleted, nothing held any more.
		h.sim.SetEmptyList(path, false)
		if res := h.mustRun("journal_entries"); res.HeldDeletions != 0 || res.Stats.Deleted != 0 || live() != 30 {
			t.Errorf("after the glitch: held %d, deleted %d, live %d", res.HeldDeletions, res.Stats.Deleted, live())
		}
		if n := h.count(`SELECT held_deletions FROM erp.sync_checkpoints WHERE stream = 'journal_entries'`); n != 0 {
			t.Errorf("held_deletions = %d after a sweep that found nothing gone", n)
		}
		// Gone for good: held twice, marked by the third complete sweep.
		h.sim.SetEmptyList(path, true)
		for sweep := 1; sweep <= 2; sweep++ {
			if res := h.mustRun("journal_entries"); res.HeldDeletions != 30 || live() != 30 {
				t.Fatalf("sweep %d: held %d, live %d", sweep, res.HeldDeletions, live())
			}
		}
		if res := h.mustRun("journal_entries"); res.Stats.Deleted != 30 || res.HeldDeletions != 0 || live() != 0 {
			t.Errorf("third sweep: deleted %d, held %d, live %d; want the 30 marked", res.Stats.Deleted, res.HeldDeletions, live())
		}
	})

	t.Run("MarksAtOnceWhatAnOperatorConfirms", func(t *testing.T) {
		// An operator who knows the rows are gone confirms at once.
		t.Parallel()
		h := newHarness(t, erpsim.Options{})
		h.mustRun("journal_entries")
		h.sim.SetEmptyList("/accounts/api/journal-entries/", true)
		if res := h.mustRun("journal_entries"); res.HeldDeletions != 30 {
			t.Fatalf("held %d, want 30", res.HeldDeletions)
		}
		h.runner.ConfirmDeletions = true
		if res := h.mustRun("journal_entries"); res.Stats.Deleted != 30 {
			t.Errorf("confirmed: deleted %d, want 30", res.Stats.Deleted)
		}
		if got := h.text(`SELECT note FROM erp.sync_runs ORDER BY id DESC LIMIT 1`); !strings.Contains(got, "operator confirmed") {
			t.Errorf("note = %q", got)
		}
	})
}

const (
	guardJournalPath  = "/accounts/api/journal-entries/"
	guardInvoicesPath = "/sales/api/invoices/list/"
	guardCashboxPath  = "/accounts/api/cashboxes/"
)

// guardLog keeps a runner's JSON log lines.
type guardLog struct{ testutil.Buffer }

// last is the last line logged with message msg, decoded (nil if none).
func (l *guardLog) last(t *testing.T, msg string) map[string]any {
	t.Helper()
	var found map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
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
