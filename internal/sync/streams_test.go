package sync_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync/streams"
)

// TestBalanceSheetAtEveryMonthEnd: the balance sheet is kept as of today
// and the last day of each closed month in range, each exactly the ERP's
// tree as of that date; a closing entry posted late into a past month
// (and reversed the next day, as accruals are) rewrites that month only,
// its previous tree kept; and the analysts' function answers a month.
func TestBalanceSheetAtEveryMonthEnd(t *testing.T) {
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
}

// TestBalanceSheetIgnoringDateIsNamed: an installation that answers one
// tree whatever date_to says keeps today's only, and says so.
func TestBalanceSheetIgnoringDateIsNamed(t *testing.T) {
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
}

// TestDriftOfStreamsOfTheirOwn: a field a journal line, a tree node, a
// cashbox's grant or the messaging statistics carry that is renamed at
// the ERP is recorded as drift, never a silent NULL.
func TestDriftOfStreamsOfTheirOwn(t *testing.T) {
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
}

// TestRefusedRunNamesTheCauses: a run the ERP refuses (403) fails with
// every cause the reference gives, in its error and in erp.sync_runs, as
// probe says it.
func TestRefusedRunNamesTheCauses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 10})
	h.sim.SetRouteStatus("/accounts/api/journal-entries/", http.StatusForbidden)
	res := h.run("journal_entries")
	want := "lacks accounts.journal.view, or the ERP's licence does not cover the route, or the login's company or branch context cannot reach it"
	if res.Status != model.StatusFailed || res.Err == nil || !strings.Contains(res.Err.Error(), want) {
		t.Fatalf("a refused run: %s %v, want it failed naming %q", res.Status, res.Err, want)
	}
	if got := h.text(`SELECT error FROM erp.sync_runs WHERE stream = 'journal_entries'`); !strings.Contains(got, want) {
		t.Errorf("erp.sync_runs.error = %q, want it to name the causes", got)
	}
}
