package sync_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

const big = "123456789012345678.123456" // float64 keeps ~16 significant digits

func setBig(sim *erpsim.Sim) {
	sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
		inv[3].TotalBC = decimal.RequireFromString(big)
		inv[4].TotalBC = decimal.RequireFromString("-0.000001")
		return inv
	})
}

func TestExactMoney(t *testing.T) {
	t.Parallel()
	for _, asString := range []bool{false, true} {
		t.Run(fmt.Sprintf("string=%v", asString), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, erpsim.Options{Invoices: 320, MoneyAsString: asString})
			setBig(h.sim)
			h.mustRun("invoices")

			id := fmt.Sprint(h.sim.Invoices()[3].ID)
			if got := h.text(`SELECT total_bc::text FROM erp.invoices WHERE id = $1`, id); got != big {
				t.Errorf("total_bc = %s, want %s", got, big)
			}
			wantPayload := big
			if asString {
				wantPayload = `"` + big + `"`
			}
			if got := h.text(`SELECT (payload->'total_bc')::text FROM erp.invoices WHERE id = $1`, id); got != wantPayload {
				t.Errorf("payload total_bc = %s, want %s", got, wantPayload)
			}
			h.wantInvoices(320)
		})
	}
}

func TestUnchangedResyncWritesNoRowVersions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 230})
	for _, s := range []string{"invoices", "currencies", "cashboxes", "cashbox_reconciliations"} {
		h.mustRun(s)
	}
	versions := func() string {
		return h.text(`SELECT string_agg(t || ':' || n, ',' ORDER BY t) FROM (
			SELECT 'inv' t, sum(xmin::text::bigint) n FROM erp.invoices
			UNION ALL SELECT 'cur', sum(xmin::text::bigint) FROM erp.currencies
			UNION ALL SELECT 'rates', sum(xmin::text::bigint) FROM erp.currency_rates
			UNION ALL SELECT 'cb', sum(xmin::text::bigint) FROM erp.cashboxes
			UNION ALL SELECT 'rec', sum(xmin::text::bigint) FROM erp.cashbox_reconciliations) x`)
	}
	before := versions()
	statsBefore := h.writeStats(230)
	// The re-sync runs on its own pool, closed afterwards: a backend
	// flushes its table statistics when it exits.
	pool, err := db.Open(context.Background(), h.url)
	if err != nil {
		t.Fatal(err)
	}
	h.runner = &sync.Runner{Pool: pool}
	for _, s := range []string{"invoices", "currencies", "cashboxes", "cashbox_reconciliations"} {
		res := h.mustRun(s)
		if res.Stats.Inserted != 0 || res.Stats.Updated != 0 || res.Stats.Unchanged != res.Stats.Seen {
			t.Errorf("%s re-sync stats %+v: want everything unchanged", s, res.Stats)
		}
	}
	pool.Close()
	if statsAfter := h.writeStats(0); statsAfter != statsBefore {
		t.Errorf("pg_stat_user_tables n_tup_ins/n_tup_upd moved on an unchanged re-sync:\nbefore %s\nafter  %s", statsBefore, statsAfter)
	}
	if after := versions(); after != before {
		t.Errorf("row versions changed on an unchanged re-sync:\nbefore %s\nafter  %s", before, after)
	}
	// A row whose lock was taken by ON CONFLICT would carry our xmax.
	if n := h.count(`SELECT count(*) FROM erp.invoices WHERE xmax <> 0`); n != 0 {
		t.Errorf("%d invoice rows were locked by the re-sync", n)
	}
}

func TestChangesAndDeletions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 120})
	h.mustRun("invoices")
	inv := h.sim.Invoices()
	changed, gone := fmt.Sprint(inv[0].ID), fmt.Sprint(inv[1].ID)
	h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
		inv[0].TotalBC = decimal.RequireFromString("42.42")
		return append(inv[:1], inv[2:]...)
	})

	// A sweep that fails half-way marks nothing deleted.
	var calls atomic.Int32
	h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/sales/api/invoices/list/" && calls.Add(1) == 2 {
			w.WriteHeader(http.StatusForbidden) // 400 and 404 would mean "cursor refused"
			return true
		}
		return false
	})
	if res := h.run("invoices"); res.Status != model.StatusFailed {
		t.Fatalf("status %s, want failed", res.Status)
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NOT NULL`); n != 0 {
		t.Fatalf("a failed sweep marked %d rows deleted", n)
	}
	h.sim.SetHook(nil)
	res := h.mustRun("invoices")
	if res.Stats.Deleted != 1 {
		t.Errorf("deleted = %d, want 1", res.Stats.Deleted)
	}
	if got := h.text(`SELECT (deleted_at IS NOT NULL)::text FROM erp.invoices WHERE id = $1`, gone); got != "true" {
		t.Errorf("vanished invoice deleted_at set = %s", got)
	}
	if got := h.text(`SELECT total_bc::text FROM erp.invoices WHERE id = $1`, changed); got != "42.42" {
		t.Errorf("changed invoice total = %s", got)
	}
	// It comes back: deleted_at is cleared.
	h.sim.MutateInvoices(func(cur []erpsim.Invoice) []erpsim.Invoice { return append(cur, inv[1]) })
	h.mustRun("invoices")
	if got := h.text(`SELECT (deleted_at IS NULL)::text FROM erp.invoices WHERE id = $1`, gone); got != "true" {
		t.Errorf("reappeared invoice still deleted")
	}
}

func TestResumeFromCheckpointAfterFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 500})
	var calls atomic.Int32
	h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/sales/api/invoices/list/" && calls.Add(1) == 4 {
			w.WriteHeader(http.StatusForbidden)
			return true
		}
		return false
	})
	h.runner.Prefetch = 0
	if res := h.run("invoices"); res.Status != model.StatusFailed || res.Stats.Pages != 3 {
		t.Fatalf("first run: status %s pages %d, want failed after 3 pages (%v)", res.Status, res.Stats.Pages, res.Err)
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices`); n != 150 {
		t.Fatalf("rows after 3 committed pages = %d, want 150", n)
	}
	cursor := h.text(`SELECT cursor FROM erp.sync_checkpoints WHERE stream = 'invoices'`)
	h.sim.SetHook(nil)
	h.sim.ResetRequests()
	res := h.mustRun("invoices")
	if res.Stats.Pages != 7 {
		t.Errorf("resumed run wrote %d pages, want the remaining 7", res.Stats.Pages)
	}
	first := h.sim.Requests()
	for _, r := range first {
		if r.Path == "/sales/api/invoices/list/" {
			q, _ := url.ParseQuery(r.RawQuery)
			if q.Get("cursor") != cursor {
				t.Errorf("resume started at cursor %q, want the checkpoint's %q", q.Get("cursor"), cursor)
			}
			break
		}
	}
	h.wantInvoices(500)
	if got := h.text(`SELECT string_agg(status, ',' ORDER BY id) FROM erp.sync_runs`); got != "failed,succeeded" {
		t.Errorf("runs = %s", got)
	}
}

func TestChaos(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{
		Invoices: 1000, TokenTTL: 2 * time.Second, Latency: 20 * time.Millisecond,
		Faults: erpsim.Faults{RateLimitEvery: 6, RetryAfter: time.Second, ServerErrorEvery: 7, DropEvery: 11},
	})
	setBig(h.sim)
	// Every 9th invoice page, the ERP forgets all tokens (as if they expired).
	var pages atomic.Int32
	h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/sales/api/invoices/list/" && pages.Add(1)%9 == 0 {
			h.sim.ExpireTokens()
		}
		return false
	})
	h.client = h.newClient(erp.Options{MaxAttempts: 10})
	h.mustRun("invoices")
	h.wantInvoices(1000)
	// Every 429 was honoured: the next request came a full Retry-After later.
	reqs := h.sim.Requests()
	var limited, logins, unauthorized int
	for i, r := range reqs {
		switch {
		case r.Status == http.StatusUnauthorized:
			unauthorized++
		case r.Path == "/api/auth/token/":
			logins++
		}
		if r.Status != http.StatusTooManyRequests {
			continue
		}
		limited++
		for _, n := range reqs[i+1:] {
			if n.Path == r.Path && n.RawQuery == r.RawQuery {
				if gap := n.At.Sub(r.At); gap < time.Second {
					t.Errorf("retried %s %v after a 429 with Retry-After 1s", r.Path, gap)
				}
				break
			}
		}
	}
	if limited == 0 || unauthorized == 0 || logins < 2 {
		t.Errorf("chaos did not happen: %d rate limits, %d 401s, %d logins", limited, unauthorized, logins)
	}
}

func TestReadOnlyTowardsERP(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 60})
	for _, s := range catalog.Names() {
		h.mustRun(s)
	}
	if err := h.client.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var posts []string
	for _, r := range h.sim.Requests() {
		if r.Method != http.MethodGet {
			posts = append(posts, r.Method+" "+r.Path)
		}
	}
	for _, p := range posts {
		if p != "POST /api/auth/token/" && p != "POST /api/auth/revoke/" {
			t.Errorf("erpsync sent a write: %s", p)
		}
	}
	if len(posts) < 2 || h.sim.Revocations() != 1 {
		t.Errorf("want a login and a revoke, got %v (revocations %d)", posts, h.sim.Revocations())
	}
}

func TestMalformedPageWritesNothingOfIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 300})
	h.runner.Prefetch = 0
	var calls atomic.Int32
	h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/sales/api/invoices/list/" && calls.Add(1) == 3 {
			w.Write([]byte(`{"ok":true,"data":[{"id":1,"total_bc":1.5},{"id":2,`))
			return true
		}
		return false
	})
	res := h.run("invoices")
	if res.Status != model.StatusFailed || !strings.Contains(res.Err.Error(), "malformed JSON") || !strings.Contains(res.Err.Error(), "page 3") {
		t.Fatalf("status %s err %v: want failed with malformed JSON on page 3", res.Status, res.Err)
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices`); n != 100 {
		t.Errorf("rows = %d, want the 2 good pages (100)", n)
	}
	if n := h.count(`SELECT pages FROM erp.sync_checkpoints WHERE stream = 'invoices' AND sweep_id IS NOT NULL AND cursor IS NOT NULL`); n != 2 {
		t.Errorf("checkpoint pages = %d, want 2", n)
	}
	if got := h.text(`SELECT error FROM erp.sync_runs`); !strings.Contains(got, "malformed JSON") {
		t.Errorf("sync_runs.error = %q", got)
	}
}

func TestUnknownEnvelopeNamesRouteAndKeys(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{})
	h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/accounts/api/cashboxes/" {
			w.Write([]byte(`{"items":[{"id":1}],"total":1}`))
			return true
		}
		return false
	})
	res := h.run("cashboxes")
	if res.Status != model.StatusFailed {
		t.Fatalf("status %s", res.Status)
	}
	msg := res.Err.Error()
	for _, want := range []string{"/accounts/api/cashboxes/", "items, total", "unknown list envelope"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if n := h.count(`SELECT count(*) FROM erp.cashboxes`); n != 0 {
		t.Errorf("%d rows written", n)
	}
}

func TestEnvelopes(t *testing.T) {
	t.Parallel()
	for _, env := range []erpsim.Envelope{erpsim.EnvelopeArray, erpsim.EnvelopeData, erpsim.EnvelopeResults, erpsim.EnvelopeDataTables} {
		t.Run(string(env), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, erpsim.Options{ListEnvelope: env, PageSizeCap: 4})
			h.mustRun("cashbox_reconciliations")
			if n := h.count(`SELECT count(*) FROM erp.cashbox_reconciliations`); n != 6 {
				t.Errorf("rows = %d, want 6", n)
			}
		})
	}
}

func TestRejectedRecords(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 80})
	h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
		inv[10].Raw = []byte(`{"number":"INV-NOID","total_bc":"1.00"}`)
		inv[20].Raw = []byte(`{"id":777777,"number":"INV-BAD","total_bc":"12,50"}`)
		inv[30].Raw = []byte(`{"id":777778,"total_bc":"1e400x"}`)
		return inv
	})
	res := h.mustRun("invoices")
	if res.Stats.Rejected != 3 {
		t.Errorf("rejected = %d, want 3", res.Stats.Rejected)
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices`); n != 77 {
		t.Errorf("rows = %d, want 77", n)
	}
	got := h.text(`SELECT string_agg(coalesce(record_id, '-') || ': ' || reason, ' | ' ORDER BY record_id NULLS FIRST) FROM erp.rejected_records`)
	for _, want := range []string{"-: record has no id", `777777: money field total_bc: "12,50" is not a decimal number`, "777778: money field total_bc"} {
		if !strings.Contains(got, want) {
			t.Errorf("rejected_records %q lacks %q", got, want)
		}
	}
	if got := h.text(`SELECT convert_from(record, 'UTF8') FROM erp.rejected_records WHERE record_id = '777777'`); !strings.Contains(got, `"12,50"`) {
		t.Errorf("raw record not kept: %s", got)
	}
}

func TestRefusedCursorStartsNewSweep(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 400})
	h.runner.Prefetch = 0
	var calls atomic.Int32
	h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/sales/api/invoices/list/" && calls.Add(1) == 3 {
			w.WriteHeader(http.StatusForbidden) // 400 and 404 would mean "cursor refused"
			return true
		}
		return false
	})
	if res := h.run("invoices"); res.Status != model.StatusFailed {
		t.Fatalf("status %s", res.Status)
	}
	h.sim.SetHook(nil)
	h.sim.InvalidateCursors() // the saved cursor is now refused with 400
	h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice { return inv[:390] })
	for i := 0; i < 2; i++ { // and no crash loop: the next run is ordinary
		res := h.mustRun("invoices")
		if i == 0 && res.Stats.Pages != 8 {
			t.Errorf("pages = %d, want a whole new sweep of 8", res.Stats.Pages)
		}
	}
	if got := h.text(`SELECT note FROM erp.sync_runs ORDER BY id LIMIT 1 OFFSET 1`); !strings.Contains(got, "refused the saved cursor") {
		t.Errorf("note = %q", got)
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NULL`); n != 390 {
		t.Errorf("live rows = %d, want 390", n)
	}
	if n := h.count(`SELECT count(*) FROM erp.sweep_seen`); n != 0 {
		t.Errorf("sweep_seen keeps %d ids of finished or abandoned sweeps", n)
	}
}

func TestCurrencyRateHistoryAndDrift(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{})
	h.mustRun("currencies")
	h.mustRun("currencies")
	h.sim.SetCurrencyRate("EUR", "0.930000")
	h.mustRun("currencies")
	h.sim.SetCurrencyRate("GBP", "0.7893") // four digits: stored as sent, recorded as drift
	h.mustRun("currencies")
	h.mustRun("currencies")

	got := h.text(`SELECT string_agg(rate::text || CASE WHEN valid_to IS NULL THEN ' open' ELSE ' closed' END, ', ' ORDER BY valid_from)
		FROM erp.currency_rates WHERE code = 'EUR'`)
	if got != "0.921500 closed, 0.930000 open" {
		t.Errorf("EUR history = %s", got)
	}
	if n := h.count(`SELECT count(*) FROM erp.currency_rates WHERE code = 'GBP'`); n != 1 {
		t.Errorf("GBP periods = %d: 0.789300 and 0.7893 are the same rate", n)
	}
	if got := h.text(`SELECT exchange_rate::text FROM erp.currencies WHERE code = 'GBP'`); got != "0.7893" {
		t.Errorf("GBP stored as %s, want 0.7893 as sent", got)
	}
	if got := h.text(`SELECT detail || ' x' || count FROM erp.schema_drift WHERE field = 'exchange_rate' AND change = 'scale'`); got != "expected 6 fractional digits, got 4 x2" {
		t.Errorf("scale drift = %s", got)
	}
	if n := h.count(`SELECT count(*) FROM erp.schema_drift WHERE change = 'added' AND field = 'is_active'`); n != 1 {
		t.Errorf("fields the reference does not show are not reported as added drift")
	}
}

func TestSecondRunnerIsLockedOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 200, Latency: 30 * time.Millisecond})
	h.runner.Prefetch = 0
	started := make(chan struct{})
	var once atomic.Bool
	h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/sales/api/invoices/list/" && once.CompareAndSwap(false, true) {
			close(started)
		}
		return false
	})
	done := make(chan sync.Result)
	go func() { done <- h.run("invoices") }()
	<-started
	if res := h.run("invoices"); res.Err != sync.ErrBusy {
		t.Errorf("second run: %v, want ErrBusy", res.Err)
	}
	if res := <-done; res.Status != model.StatusSucceeded {
		t.Errorf("first run: %s %v", res.Status, res.Err)
	}
	if n := h.count(`SELECT count(*) FROM erp.sync_runs`); n != 1 {
		t.Errorf("sync_runs rows = %d, want 1 (the locked-out run records nothing)", n)
	}
}

func TestBulkLoadFallsBackWhenARowMovesPages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 120})
	// The ERP lists invoice 0 again on the second page, as it does when a
	// record changes while a sweep pages through the list.
	h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
		moved := inv[0]
		moved.TotalBC = decimal.RequireFromString("7.77")
		out := append([]erpsim.Invoice{}, inv[:70]...)
		out = append(out, moved)
		return append(out, inv[70:]...)
	})
	res := h.mustRun("invoices")
	if res.Stats.Seen != 121 || res.Stats.Inserted != 120 || res.Stats.Updated != 1 {
		t.Errorf("stats %+v: want 121 seen, 120 inserted, 1 updated", res.Stats)
	}
	if got := h.text(`SELECT total_bc::text FROM erp.invoices WHERE id = $1`, fmt.Sprint(h.sim.Invoices()[0].ID)); got != "7.77" {
		t.Errorf("moved invoice total = %s, want its later version 7.77", got)
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NULL`); n != 120 {
		t.Errorf("live rows = %d, want 120", n)
	}
	if got := h.text(`SELECT bulk_load::text FROM erp.sync_checkpoints WHERE stream = 'invoices'`); got != "true" {
		t.Errorf("first sweep bulk_load = %s, want true", got)
	}
	// The next sweep is an ordinary one and still finds nothing deleted.
	res = h.mustRun("invoices")
	// Both listings of the duplicate differ from what the other left.
	if res.Stats.Deleted != 0 || res.Stats.Updated != 2 {
		t.Errorf("second sweep stats %+v: want 2 updated (the duplicate's two versions in turn), 0 deleted", res.Stats)
	}
}

func TestAccountingDocuments(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{PageSizeCap: 7, ListEnvelope: erpsim.EnvelopeResults, MoneyAsString: true})
	h.pages = 7
	for stream, want := range map[string]int64{"journal_entries": 30, "payment_vouchers": 12, "receipt_vouchers": 12} {
		res := h.mustRun(stream)
		if res.Stats.Inserted != want {
			t.Errorf("%s: inserted %d, want %d", stream, res.Stats.Inserted, want)
		}
	}
	// Money arrived as strings and is numeric, digit for digit.
	if n := h.count(`SELECT count(*) FROM erp.journal_entries
		WHERE total_debit IS NULL OR total_debit::text <> payload->>'total_debit'`); n != 0 {
		t.Errorf("%d journal entries whose total_debit differs from the payload", n)
	}
	if n := h.count(`SELECT count(*) FROM erp.payment_vouchers WHERE amount::text <> payload->>'amount'`); n != 0 {
		t.Errorf("%d payment vouchers whose amount differs from the payload", n)
	}
	if n := h.count(`SELECT count(*) FROM erp.schema_drift WHERE stream IN ('journal_entries', 'payment_vouchers', 'receipt_vouchers')`); n != 0 {
		t.Errorf("%d drift rows for documents shaped as expected", n)
	}
}

func TestSnapshotsAndDetails(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{MoneyAsString: true})
	for _, s := range []string{"journal_entries", "payment_vouchers", "receipt_vouchers", "journal_lines",
		"balance_sheet", "cashbox_access", "messaging_stats", "messaging_conversations", "messaging_messages",
		"messaging_templates", "messaging_queue"} {
		h.mustRun(s)
	}
	if n := h.count(`SELECT count(*) FROM erp.balance_sheet_snapshots WHERE as_of = current_date AT TIME ZONE 'UTC'`); n != 12 {
		t.Errorf("balance sheet nodes = %d, want 12", n)
	}
	if got := h.text(`SELECT parent || '/' || depth FROM erp.balance_sheet_snapshots WHERE node = '3'`); got != "2/2" {
		t.Errorf("node 3 parent/depth = %s, want 2/2", got)
	}
	if n := h.count(`SELECT count(*) FROM erp.balance_sheet_snapshots WHERE balance IS NULL OR balance::text <> payload->>'balance'`); n != 0 {
		t.Errorf("%d balance sheet nodes whose balance differs from the payload", n)
	}
	if n := h.count(`SELECT count(*) FROM erp.cashbox_access WHERE deleted_at IS NULL`); n != 10 {
		t.Errorf("cashbox grants = %d, want 10", n)
	}
	if n := h.count(`SELECT count(*) FROM erp.journal_line_documents`); n != 54 {
		t.Errorf("documents with lines = %d, want 30 + 12 + 12", n)
	}
	if n := h.count(`SELECT count(*) FROM (SELECT document_kind, document_id FROM erp.journal_lines
		GROUP BY 1, 2 HAVING sum(debit) <> sum(credit)) x`); n != 0 {
		t.Errorf("%d documents whose lines do not balance", n)
	}
	for _, table := range []string{"messaging_conversations", "messaging_messages", "messaging_templates", "messaging_queue", "messaging_stats"} {
		if n := h.count(`SELECT count(*) FROM erp.` + table); n == 0 {
			t.Errorf("erp.%s is empty", table)
		}
	}

	// Nothing changed at the ERP: nothing is written, no preview fetched again.
	h.sim.ResetRequests()
	for _, s := range []string{"journal_lines", "balance_sheet", "cashbox_access", "messaging_stats"} {
		if res := h.mustRun(s); res.Stats.Inserted+res.Stats.Updated != 0 {
			t.Errorf("%s re-sync wrote: %+v", s, res.Stats)
		}
	}
	for _, r := range h.sim.Requests() {
		if strings.HasSuffix(r.Path, "/journal-preview/") {
			t.Errorf("unchanged document read again: %s", r.Path)
		}
	}
	if n := h.count(`SELECT count(*) FROM erp.messaging_stats`); n != 1 {
		t.Errorf("messaging_stats snapshots = %d, want 1 (unchanged)", n)
	}
}

// The database connection dies mid-sweep (a Postgres restart, a failover):
// the run fails, and the next one resumes with nothing lost or doubled.
func TestDatabaseConnectionLostMidSweep(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 600, Latency: 20 * time.Millisecond})
	setBig(h.sim)
	var pages atomic.Int32
	h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/sales/api/invoices/list/" && pages.Add(1) == 4 {
			if _, err := h.pool.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = 'erpsync'`); err != nil {
				t.Errorf("terminating backends: %v", err)
			}
		}
		return false
	})
	if res := h.run("invoices"); res.Status != model.StatusFailed {
		t.Fatalf("run that lost its connection: %s %v, want failed", res.Status, res.Err)
	}
	h.sim.SetHook(nil)
	h.mustRun("invoices")
	h.wantInvoices(600)
	if got := h.text(`SELECT string_agg(status, ',' ORDER BY id) FROM erp.sync_runs`); got != "failed,succeeded" {
		t.Errorf("runs = %s, want the lost run closed as failed, then a success", got)
	}
}

// Postgres empties UNLOGGED tables after a crash. A sweep that lived
// through one must not mark rows deleted from its partial seen-list.
func TestLostSeenListMarksNothingDeleted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 300})
	h.runner.Prefetch = 0
	h.mustRun("invoices") // bulk load
	gone := fmt.Sprint(h.sim.Invoices()[299].ID)
	h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice { return inv[:299] })
	var calls atomic.Int32
	h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/sales/api/invoices/list/" && calls.Add(1) == 3 {
			w.WriteHeader(http.StatusForbidden)
			return true
		}
		return false
	})
	if res := h.run("invoices"); res.Status != model.StatusFailed {
		t.Fatalf("status %s", res.Status)
	}
	h.sim.SetHook(nil)
	if _, err := h.pool.Exec(context.Background(), `TRUNCATE erp.sweep_seen`); err != nil { // what crash recovery does
		t.Fatal(err)
	}
	res := h.mustRun("invoices")
	if res.Stats.Deleted != 0 {
		t.Errorf("deleted = %d after the seen-list was lost, want 0", res.Stats.Deleted)
	}
	if got := h.text(`SELECT note FROM erp.sync_runs ORDER BY id DESC LIMIT 1`); !strings.Contains(got, "seen-list lost") {
		t.Errorf("note = %q", got)
	}
	// The next whole sweep sees the truth again.
	if res := h.mustRun("invoices"); res.Stats.Deleted != 1 {
		t.Errorf("next sweep deleted = %d, want 1", res.Stats.Deleted)
	}
	if got := h.text(`SELECT (deleted_at IS NOT NULL)::text FROM erp.invoices WHERE id = $1`, gone); got != "true" {
		t.Errorf("vanished invoice deleted_at set = %s", got)
	}
}
