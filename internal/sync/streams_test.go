package sync_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/sync/streams"
)

// TestStreams documents the product's streams that hold rules of their own,
// as the engine runs them: the balance sheet, journal lines, snapshots,
// cashbox grants and currency rates.
func TestStreams(t *testing.T) {
	t.Parallel()

	t.Run("KeepTheBalanceSheetAsOfEveryMonthEnd", func(t *testing.T) {
		// The balance sheet is kept as of today and the last day of each closed
		// month in range, each exactly the ERP's tree as of that date; a closing
		// entry posted late into a past month (and reversed the next day, as
		// accruals are) rewrites that month only, its previous tree kept; and
		// the analysts' function answers a month.
		h := newHarness(t, erpsim.Options{BalanceSheetHistory: true})
		h.settings = map[string]map[string]string{"balance_sheet": {"months": "6", "reread_months": "2"}}
		h.mustRun("balance_sheet")
		now := time.Now().UTC()
		ends := streams.MonthEnds(now, 6)
		dates := append([]string{now.Format(time.DateOnly)}, ends...)
		if got := h.text(`SELECT string_agg(DISTINCT as_of::text, ',' ORDER BY as_of::text DESC) FROM erp.balance_sheet_snapshots`); got != strings.Join(dates, ",") {
			t.Fatalf("snapshots as of %s, want %s", got, strings.Join(dates, ","))
		}
		checkCash := func() {
			t.Helper()
			for _, d := range dates {
				want := h.sim.BalanceSheet(1, d).Balances["1000"]
				got := h.text(`SELECT balance::text FROM erp.balance_sheet_snapshots WHERE as_of = $1 AND code = '1000'`, d)
				if g, _ := decimal.NewFromString(got); !g.Equal(want) || got == "<null>" {
					t.Errorf("cash as of %s: %s, the ERP's %s", d, got, want)
				}
			}
		}
		checkCash()

		// An accrual posted late into the month before last, reversed on the
		// first day of the next month.
		month := ends[1][:8]
		h.sim.PostLateEntry(1, month+"15", "1000", decimal.RequireFromString("1234.56"))
		h.sim.PostLateEntry(1, ends[0][:8]+"01", "1000", decimal.RequireFromString("-1234.56"))
		h.mustRun("balance_sheet")
		checkCash()
		if got := h.text(`SELECT string_agg(DISTINCT as_of::text, ',') FROM erp.balance_sheet_snapshot_history`); got != ends[1] {
			t.Errorf("previous trees kept for %s, want exactly the month ending %s", got, ends[1])
		}
		if got := h.text(`SELECT balance::text FROM erp.balance_sheet_at_month_end($1::date) WHERE code = '1000'`, month+"03"); got != h.sim.BalanceSheet(1, ends[1]).Balances["1000"].String() {
			t.Errorf("erp.balance_sheet_at_month_end(%s03): cash %s", month, got)
		}
	})

	t.Run("NameABalanceSheetThatIgnoresItsDate", func(t *testing.T) {
		// An installation that answers one tree whatever date_to says keeps
		// today's only, and says so.
		h := newHarness(t, erpsim.Options{BalanceSheetHistory: true})
		h.sim.SetBalanceSheetIgnoresDate(true)
		res := h.mustRun("balance_sheet")
		if n := h.count(`SELECT count(DISTINCT as_of) FROM erp.balance_sheet_snapshots`); n != 1 {
			t.Errorf("%d dates kept; want today's only", n)
		}
		const want = "the ERP answers the same balance-sheet tree whatever date_to says (25 dates read): only today's is kept"
		if note := h.text(`SELECT note FROM erp.sync_runs WHERE id = $1`, res.RunID); note != want {
			t.Errorf("run note %q, want %q", note, want)
		}
		if w := h.text(`SELECT warning FROM erp.stream_freshness WHERE stream = 'balance_sheet'`); w != want {
			t.Errorf("stream warning %q", w)
		}
	})

	t.Run("RecordTheDriftOfTheirOwnFields", func(t *testing.T) {
		// A field a journal line, a tree node, a cashbox's grant or the
		// messaging statistics carry that is renamed at the ERP is recorded as
		// drift, never a silent NULL.
		h := newHarness(t, erpsim.Options{})
		h.sim.SetFieldDrift("/accounts/api/journal-entries/{pk}/journal-preview/",
			map[string]json.RawMessage{"debit_amount": json.RawMessage(`"1.00"`)}, []string{"debit"})
		h.sim.SetFieldDrift("/accounts/api/balance-sheet-tree/", map[string]json.RawMessage{"amount": json.RawMessage(`"1.00"`)}, []string{"balance"})
		h.sim.SetFieldDrift("/accounts/api/cashboxes/1/access/", map[string]json.RawMessage{"can_approve": json.RawMessage(`true`)}, []string{"can_post"})
		h.sim.SetFieldDrift("/messaging/api/stats/", map[string]json.RawMessage{"delivered": json.RawMessage(`40`)}, []string{"queued"})
		for _, s := range []string{"journal_entries", "journal_lines", "balance_sheet", "cashbox_access", "messaging_stats"} {
			h.mustRun(s)
		}
		for _, want := range []struct{ stream, field, change string }{
			{"journal_lines", "debit", "missing"}, {"journal_lines", "debit_amount", "added"},
			{"balance_sheet", "balance", "missing"}, {"balance_sheet", "amount", "added"},
			{"cashbox_access", "can_post", "missing"}, {"cashbox_access", "can_approve", "added"},
			{"messaging_stats", "queued", "missing"}, {"messaging_stats", "delivered", "added"},
		} {
			if n := h.count(`SELECT count(*) FROM erp.schema_drift WHERE stream = $1 AND field = $2 AND change = $3 AND count > 0`,
				want.stream, want.field, want.change); n != 1 {
				t.Errorf("no drift: %s %s %s", want.stream, want.field, want.change)
			}
		}
	})

	t.Run("StoreAccountingDocumentsMoneyDigitForDigit", func(t *testing.T) {
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
	})

	t.Run("ReadSnapshotsAndDetailsAndNothingUnchangedAgain", func(t *testing.T) {
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
	})

	t.Run("KeepTheCurrencyRateHistoryAndItsDrift", func(t *testing.T) {
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
	})

	t.Run("NeverStopForHostileDetails", func(t *testing.T) {
		// What real installations send, served from the simulator, and the
		// promises: every good row present with exact sums, the bad ones in
		// erp.rejected_records once, the next run succeeding, nothing live
		// marked deleted.
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
	})
}
