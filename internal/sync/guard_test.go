package sync_test

import (
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

const (
	reconsPath   = "/accounts/api/cashbox-reconciliations/"
	paymentsPath = "/accounts/api/payment-vouchers/"
)

// TestEmptyAnswerOnSmallListIsHeld: one empty answer on a list of six
// rows would leave the stream with none; the guard holds it, whatever the
// list's size.
func TestEmptyAnswerOnSmallListIsHeld(t *testing.T) {
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
}

// TestListCutAtDefaultPageSizeMarksNothing: a one-list answer with no
// paging signal that holds exactly a usual default page size may be the
// ERP cutting the list: it marks nothing deleted, and says so in the
// run's note and the stream's warning, until an answer no longer looks
// cut. A list of exactly ten that lost nothing is fine.
func TestListCutAtDefaultPageSizeMarksNothing(t *testing.T) {
	h := newHarness(t, erpsim.Options{})
	h.mustRun("payment_vouchers")
	if n := h.count(`SELECT count(*) FROM erp.payment_vouchers WHERE deleted_at IS NULL`); n != 12 {
		t.Fatalf("%d live vouchers, want the simulator's 12", n)
	}
	h.sim.SetListCut(paymentsPath, 10)
	res := h.mustRun("payment_vouchers")
	if res.Stats.Deleted != 0 {
		t.Errorf("a list cut at 10 marked %d rows deleted", res.Stats.Deleted)
	}
	want := "the answer holds exactly 10 records and no paging signal: the ERP may cut the list at a default page size, so the 2 rows it no longer lists were not marked deleted"
	if note := h.text(`SELECT note FROM erp.sync_runs WHERE id = $1`, res.RunID); note != want {
		t.Errorf("run note %q, want %q", note, want)
	}
	if w := h.text(`SELECT warning FROM erp.stream_freshness WHERE stream = 'payment_vouchers'`); w != want {
		t.Errorf("stream warning %q, want %q", w, want)
	}
	// The whole list again: the warning goes.
	h.sim.SetListCut(paymentsPath, 0)
	h.mustRun("payment_vouchers")
	if w := h.text(`SELECT warning FROM erp.stream_freshness WHERE stream = 'payment_vouchers'`); w != "<null>" {
		t.Errorf("stream warning %q after a whole answer, want none", w)
	}

	// Ten records that lost nothing.
	ten := newHarness(t, erpsim.Options{})
	ten.sim.SetListCut(paymentsPath, 10)
	ten.mustRun("payment_vouchers")
	res = ten.mustRun("payment_vouchers")
	if note := ten.text(`SELECT coalesce(note, '') FROM erp.sync_runs WHERE id = $1`, res.RunID); note != "" {
		t.Errorf("a list of ten that lost nothing noted %q", note)
	}
}

// TestEmptyAccessListsAreHeld: access lists are read cashbox by cashbox,
// and what they no longer list is decided once, at the end, by the
// deletion guard: every list answered empty (a permission withdrawn) is
// held; one cashbox whose users were all removed is marked.
func TestEmptyAccessListsAreHeld(t *testing.T) {
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
}
