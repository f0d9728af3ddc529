package sync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
)

// TestList documents how a list stream reads a list: its paging signals
// and envelopes, a page that cannot be read, the records it rejects, the
// money and typed columns it writes.
func TestList(t *testing.T) {
	t.Parallel()

	t.Run("FollowsEveryPagingSignalOfAOneListRoute", func(t *testing.T) {
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
	})

	t.Run("FailsOnPagingItCannotFollowMarkingNothing", func(t *testing.T) {
		// A route that says more exists without a way to ask for it fails the run
		// and marks nothing deleted.
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
	})

	t.Run("ReadsEveryEnvelope", func(t *testing.T) {
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
	})

	t.Run("FailsOnAnUnknownEnvelopeNamingTheRouteAndKeys", func(t *testing.T) {
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
	})

	t.Run("WritesNothingOfAMalformedPage", func(t *testing.T) {
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
	})

	t.Run("RejectsRecordsItCannotStoreKeepingThemAsReceived", func(t *testing.T) {
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
	})

	t.Run("NeverStopsForHostileInvoices", func(t *testing.T) {
		// What real installations send, served from the simulator, and the
		// promises: every good row present with exact sums, the bad ones in
		// erp.rejected_records once, the next run succeeding, nothing live
		// marked deleted.
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
	})

	t.Run("KeepsMoneyExactAsSent", func(t *testing.T) {
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
	})

	t.Run("TypesItsColumnsFromThePayloadAndNullsWhatDoesNotParse", func(t *testing.T) {
		// The typed columns of a synced invoice are its payload's values, typed;
		// a value that does not parse, or comes in another shape (a customer
		// that is a plain name), is NULL and a drift entry, and the invoice is
		// written all the same.
		h := newHarness(t, erpsim.Options{Invoices: 120, PageSizeCap: 50})
		odd := []erpsim.Invoice{
			{ID: 990001, Raw: json.RawMessage(`{"id":990001,"number":"ODD-1","date":"2026-02-30","customer":"Acme Trading","currency_code":"EUR","total_bc":"10.00","status":"posted"}`)},
			{ID: 990002, Raw: json.RawMessage(`{"id":990002,"number":77,"date":20260105,"customer":{"id":5,"name":["not","text"]},"currency_code":null,"total_bc":"5.50","status":"posted"}`)},
		}
		h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice { return append(inv, odd...) })
		h.mustRun("invoices")

		// Every typed column equals its payload field, typed, for the
		// ordinary invoices.
		if n := h.count(`SELECT count(*) FROM erp.invoices WHERE id NOT IN ('990001', '990002') AND NOT (
		invoice_date::text IS NOT DISTINCT FROM payload->>'date' AND number IS NOT DISTINCT FROM payload->>'number'
		AND status IS NOT DISTINCT FROM payload->>'status' AND currency_code IS NOT DISTINCT FROM payload->>'currency_code'
		AND customer_id IS NOT DISTINCT FROM payload->'customer'->>'id' AND customer_name IS NOT DISTINCT FROM payload->'customer'->>'name')`); n != 0 {
			t.Errorf("%d invoices whose typed columns differ from their payload", n)
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices WHERE invoice_date IS NULL OR customer_id IS NULL OR customer_name IS NULL`); n != 2 {
			t.Errorf("%d invoices with a NULL date or customer, want the two odd ones", n)
		}
		// The odd ones: written, their unusable values NULL.
		got := h.text(`SELECT concat_ws('|', coalesce(invoice_date::text, 'NULL'), number, coalesce(customer_id, 'NULL'), customer_name, total_bc)
		FROM erp.invoices WHERE id = '990001'`)
		if got != "NULL|ODD-1|NULL|Acme Trading|10.00" {
			t.Errorf("invoice 990001: %s", got)
		}
		got = h.text(`SELECT concat_ws('|', coalesce(invoice_date::text, 'NULL'), number, customer_id, coalesce(customer_name, 'NULL'),
		coalesce(currency_code, 'NULL')) FROM erp.invoices WHERE id = '990002'`)
		if got != "NULL|77|5|NULL|NULL" {
			t.Errorf("invoice 990002: %s", got)
		}
		if n := h.count(`SELECT count(*) FROM erp.rejected_records`); n != 0 {
			t.Errorf("%d records rejected; an unusable typed value rejects nothing", n)
		}
		for _, want := range []struct{ field, detail string }{
			{"date", "invoice_date is NULL: not a YYYY-MM-DD date"},
			{"date", "invoice_date is NULL: a JSON number, not a string"},
			{"customer.id", "customer_id is NULL: the field is absent"},
			{"customer.name", "customer_name is NULL: a JSON array, not text"},
		} {
			if n := h.count(`SELECT count(*) FROM erp.schema_drift WHERE stream = 'invoices' AND field = $1 AND change = 'unusable' AND detail = $2`,
				want.field, want.detail); n != 1 {
				t.Errorf("no drift entry %s: %s", want.field, want.detail)
			}
		}
	})

	t.Run("KeepsTheRatePeriodsOfThePagesThatWriteRates", func(t *testing.T) {
		// The currency rate history holds a new rate from the run that wrote
		// it, a bulk load's rates included: Postgres keeps the periods in the
		// transaction of the page that writes a currency.
		t.Parallel()
		h := newHarness(t, erpsim.Options{})
		h.mustRun("currencies")
		open := h.count(`SELECT count(*) FROM erp.currency_rates WHERE valid_to IS NULL`)
		if want := h.count(`SELECT count(*) FROM erp.currencies WHERE exchange_rate IS NOT NULL`); open == 0 || open != want {
			t.Errorf("after the first sweep %d open rates, want one per currency with a rate (%d)", open, want)
		}
		h.sim.SetCurrencyRate("EUR", "0.930000")
		h.mustRun("currencies")
		if got := h.text(`SELECT coalesce(string_agg(rate::text, ','), '') FROM erp.currency_rates WHERE code = 'EUR' AND valid_to IS NULL`); got != "0.930000" {
			t.Errorf("after the sweep that wrote EUR's new rate, its open rate is %q, want 0.930000", got)
		}
	})
}
