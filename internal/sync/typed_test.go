package sync_test

import (
	"encoding/json"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

// TestTypedColumnsAreThePayloads: the typed columns of a synced invoice
// are its payload's values, typed; a value that does not parse, or comes
// in another shape (a customer that is a plain name), is NULL and a drift
// entry, and the invoice is written all the same.
func TestTypedColumnsAreThePayloads(t *testing.T) {
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
}
