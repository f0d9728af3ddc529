package sync_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
)

// What real installations send. Each test serves one hostile case from
// the simulator and checks the promises: every good row present with
// exact sums, the bad ones in erp.rejected_records once, the next run
// succeeding, nothing live marked deleted.

func TestHostileInvoicesNeverStopAStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 300})
	h.sim.SetHostileInvoices(true)
	for run := 1; run <= 2; run++ {
		res := h.mustRun("invoices")
		if res.Stats.Rejected == 0 {
			t.Errorf("run %d: nothing rejected", run)
		}
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NULL`); n != int64(h.sim.ExpectedInvoiceCount()) {
		t.Errorf("live invoices = %d, want %d", n, h.sim.ExpectedInvoiceCount())
	}
	if got := h.text(`SELECT sum(total_bc)::text FROM erp.invoices`); got != h.sim.ExpectedInvoiceTotal().String() {
		t.Errorf("sum(total_bc) = %s, want %s", got, h.sim.ExpectedInvoiceTotal())
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NOT NULL`); n != 0 {
		t.Errorf("%d rows marked deleted", n)
	}
	raw := map[string][]byte{}
	for i, inv := range erpsim.HostileInvoices() {
		raw[erpsim.HostileInvoiceCases()[i].Name] = inv.Raw
	}
	for _, c := range erpsim.HostileInvoiceCases() {
		if !c.Rejected {
			continue
		}
		// Stored once, with the very bytes received, counted twice.
		var rows, count int64
		var reason string
		err := h.pool.QueryRow(context.Background(), `SELECT count(*), coalesce(max(count), 0), coalesce(max(reason), '')
			FROM erp.rejected_records WHERE stream = 'invoices' AND record = $1`, raw[c.Name]).Scan(&rows, &count, &reason)
		if err != nil {
			t.Fatal(err)
		}
		if rows != 1 || count != 2 {
			t.Errorf("%s: %d rejected rows counted %d, want one row counted 2 (reason %q)", c.Name, rows, count, reason)
		}
	}
	if got := h.text(`SELECT detail || ' x' || count FROM erp.schema_drift WHERE field = 'id' AND change = 'duplicate'`); !strings.HasPrefix(got, "listed twice on one page") {
		t.Errorf("duplicate id drift = %s", got)
	}
	for _, reason := range []string{"\\u0000", "surrogate", "UTF-8", "integer digits", "bytes long", "has no id", "not a decimal number"} {
		if n := h.count(`SELECT count(*) FROM erp.rejected_records WHERE strpos(reason, $1) > 0`, reason); n == 0 {
			t.Errorf("no rejection says %q", reason)
		}
	}
}

func TestHostileDetailsNeverStopAStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{SlashIDs: true})
	h.sim.SetHostileDetails(true)
	bad := h.sim.HostileDetailIDs()
	streams := []string{"journal_entries", "payment_vouchers", "receipt_vouchers", "journal_lines", "balance_sheet", "cashbox_access"}
	for run := 1; run <= 2; run++ {
		for _, s := range streams {
			h.mustRun(s)
		}
	}
	// Every document but the malformed one has its lines; ids with '/'
	// reached their previews.
	if n := h.count(`SELECT count(*) FROM erp.journal_line_documents`); n != 30+12+12-1 {
		t.Errorf("documents with lines = %d, want 53 (all but the malformed preview)", n)
	}
	if n := h.count(`SELECT count(*) FROM erp.journal_line_documents WHERE document_id = $1`, bad.OverflowLinePreview); n != 1 {
		t.Errorf("the preview with one bad line lost its good lines")
	}
	for what, id := range map[string]string{"malformed preview": "journal_entry " + bad.MalformedPreview} {
		if n := h.count(`SELECT count FROM erp.rejected_records WHERE stream = 'journal_lines' AND record_id = $1`, id); n != 2 {
			t.Errorf("%s: rejected count %d, want one row seen twice", what, n)
		}
	}
	if n := h.count(`SELECT count(*) FROM erp.rejected_records WHERE stream = 'journal_lines'`); n != 3 {
		t.Errorf("journal_lines rejected rows = %d, want 3 (malformed preview, overflow line, surrogate line)", n)
	}
	// The node Postgres cannot hold is rejected, and so are its ancestors,
	// whose payload (the record as received) holds it; the rest stays.
	if n := h.count(`SELECT count(*) FROM erp.balance_sheet_snapshots WHERE node = $1`, fmt.Sprint(bad.OverflowBalanceNode)); n != 0 {
		t.Errorf("the node Postgres cannot hold was stored")
	}
	if n := h.count(`SELECT count(*) FROM erp.balance_sheet_snapshots`); n != 9 {
		t.Errorf("balance sheet nodes = %d, want the 9 that do not hold the bad one", n)
	}
	if n := h.count(`SELECT count(*) FROM erp.rejected_records WHERE stream = 'balance_sheet'`); n != 3 {
		t.Errorf("balance_sheet rejected rows = %d, want the bad leaf and its 2 ancestors", n)
	}
	if n := h.count(`SELECT count(*) FROM erp.rejected_records WHERE stream = 'cashbox_access'`); n != 1 {
		t.Errorf("cashbox_access rejected rows = %d, want the grant without a user", n)
	}
	if n := h.count(`SELECT count(*) FROM erp.cashbox_access WHERE deleted_at IS NOT NULL`); n != 0 {
		t.Errorf("%d grants marked deleted; the cashbox whose access route answered 404 keeps its grants", n)
	}
	if got := h.text(`SELECT string_agg(DISTINCT note, ' ') FROM erp.sync_runs WHERE stream = 'cashbox_access'`); !strings.Contains(got, "404") {
		t.Errorf("cashbox_access note = %q, want the 404 recorded", got)
	}
}

func TestOneListRoutesFollowEveryPagingSignal(t *testing.T) {
	t.Parallel()
	for _, mode := range []erpsim.ListPaging{erpsim.ListPagingCursor, erpsim.ListPagingDRF, erpsim.ListPagingDataTables} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, erpsim.Options{})
			h.sim.SetListPaging(mode, 2)
			for run := 1; run <= 2; run++ {
				res := h.mustRun("cashbox_reconciliations")
				// The first page has the ERP's size (2); a DataTables list is
				// then asked for the run's page size.
				if res.Stats.Pages < 2 || res.Stats.Seen != 6 {
					t.Errorf("run %d: %d pages, %d rows; want the 6 reconciliations over several pages", run, res.Stats.Pages, res.Stats.Seen)
				}
			}
			if n := h.count(`SELECT count(*) FROM erp.cashbox_reconciliations WHERE deleted_at IS NULL`); n != 6 {
				t.Errorf("live rows = %d, want 6", n)
			}
		})
	}
}

// A route that says more exists without a way to ask for it fails the run
// and marks nothing deleted.
func TestUnfollowablePagingMarksNothing(t *testing.T) {
	t.Parallel()
	for _, mode := range []erpsim.ListPaging{erpsim.ListPagingUnfollowable, erpsim.ListPagingUnfollowableDRF} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, erpsim.Options{})
			h.mustRun("cashbox_reconciliations")
			h.sim.SetListPaging(mode, 2)
			res := h.run("cashbox_reconciliations")
			if res.Status != model.StatusFailed || !strings.Contains(fmt.Sprint(res.Err), "cannot be followed") {
				t.Errorf("status %s, err %v; want failed: more records that cannot be followed", res.Status, res.Err)
			}
			if n := h.count(`SELECT count(*) FROM erp.cashbox_reconciliations WHERE deleted_at IS NOT NULL`); n != 0 {
				t.Errorf("%d rows marked deleted", n)
			}
			h.sim.SetListPaging(erpsim.ListPagingNone, 0)
			h.mustRun("cashbox_reconciliations")
		})
	}
}

// One empty answer on a route that had rows is held by the deletion
// guard; a glitch that passes deletes nothing, and rows gone for good are
// marked once further complete sweeps agree.
func TestDeletionGuard(t *testing.T) {
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
}

// An operator who knows the rows are gone confirms at once.
func TestDeletionGuardConfirmed(t *testing.T) {
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
}

// A saved cursor refused with 404 or with {ok: false} starts a new sweep
// once, as a 400 does.
func TestRefusedCursorKinds(t *testing.T) {
	t.Parallel()
	for name, kind := range map[string]erpsim.CursorRefusal{"404": erpsim.CursorRefusal404, "ok=false": erpsim.CursorRefusal200} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, erpsim.Options{Invoices: 300})
			h.runner.Prefetch = 0
			h.sim.SetHook(failThirdInvoicePage())
			if res := h.run("invoices"); res.Status != model.StatusFailed {
				t.Fatalf("status %s", res.Status)
			}
			h.sim.SetHook(nil)
			h.sim.SetCursorRefusal(kind)
			h.sim.InvalidateCursors()
			if res := h.mustRun("invoices"); res.Stats.Pages != 6 {
				t.Errorf("pages = %d, want a whole new sweep of 6", res.Stats.Pages)
			}
			if got := h.text(`SELECT note FROM erp.sync_runs ORDER BY id DESC LIMIT 1`); !strings.Contains(got, "refused the saved cursor") {
				t.Errorf("note = %q", got)
			}
			if n := h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NULL`); n != 300 {
				t.Errorf("live rows = %d", n)
			}
		})
	}
}

func failThirdInvoicePage() erpsim.Hook {
	var calls atomic.Int32
	return func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/sales/api/invoices/list/" {
			if calls.Add(1) == 3 {
				w.WriteHeader(http.StatusForbidden)
				return true
			}
		}
		return false
	}
}

// The messaging channel is read under the installation's own prefix, and
// a token endpoint answering 201 is a login like 200.
func TestInstallationDifferences(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{MessagingPrefix: "/chat", TokenStatus: http.StatusCreated})
	h.prefixes = map[string]string{"messaging": "/chat"}
	for _, s := range []string{"messaging_conversations", "messaging_stats", "invoices"} {
		h.mustRun(s)
	}
	if n := h.count(`SELECT count(*) FROM erp.messaging_conversations`); n == 0 {
		t.Error("no conversation read under /chat")
	}
	for _, r := range h.sim.Requests() {
		if strings.HasPrefix(r.Path, "/messaging/") {
			t.Errorf("read %s: the installation serves messaging under /chat", r.Path)
		}
	}
}
