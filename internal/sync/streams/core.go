package streams

import (
	"net/url"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/sync"
)

// The schedules of a list that is followed, where records change most
// while they are young: new records every 30 s (a follow run is one
// request when none is new); the newest pages, where recent records are
// edited and deleted, every 10 minutes; the whole list, for changes to
// old records and the deletions outside the window, daily: at a million
// invoices a sweep is thousands of requests, a window tens
// (docs/performance.md measures them).
const (
	followEvery = "@every 30s"
	windowEvery = "@every 10m"
	sweepEvery  = "@every 24h"
)

// The four core streams. Expectations follow the API reference where it
// shows fields, and the installation's observed shape where it does not.

// Invoices is the sales invoice list, walked by cursor in sweeps.
func Invoices() *sync.List {
	return &sync.List{
		Info: sync.Info{
			Name:           "invoices",
			Core:           true,
			Schedule:       followEvery,
			WindowSchedule: windowEvery,
			SweepSchedule:  sweepEvery,
			History:        sync.HistoryOn,
			Month:          "date",
			Table: &sync.Table{
				Columns: []sync.Column{
					{Name: "total_bc", Field: "total_bc", Type: sync.Money},
					{Name: "invoice_date", Field: "date", Type: sync.Date, Lenient: true},
					{Name: "number", Field: "number", Type: sync.Text, Lenient: true},
					{Name: "status", Field: "status", Type: sync.Text, Lenient: true},
					{Name: "currency_code", Field: "currency_code", Type: sync.Text, Lenient: true},
					// The customer is an object on some installations, its
					// name a plain string on others.
					{Name: "customer_id", Field: "customer.id", Alt: []string{"customer_id"}, Type: sync.Text, Lenient: true, Kinds: "object|string"},
					{Name: "customer_name", Field: "customer.name", Alt: []string{"customer"}, Type: sync.Text, Lenient: true, Kinds: "object|string"},
				},
				Also: map[string]string{"updated_at": "string"},
				// The questions of the finance dashboard and of as-of
				// answers, answered from an index: the heap's rows carry
				// the payload, about 60% of their bytes, which a question
				// answered from the heap reads too. Each index holds the
				// columns row-level security reads (source, company_id,
				// branch_id), so a scoped login's question is answered
				// from it as the superuser's is.
				Indexes: []sync.Index{
					// Revenue and customers over a range of invoice dates,
					// of the live invoices (erp.invoices_current).
					{Name: "invoices_source_date", Key: []string{"source", "invoice_date"},
						Include: []string{"status", "currency_code", "total_bc", "customer_name", "company_id", "branch_id"},
						Where:   "deleted_at IS NULL"},
					// What changed since a time (synced_at is stamped by
					// every change), and the totals as of a time
					// (erp.invoices_as_of reads synced_at and deleted_at).
					{Name: "invoices_synced", Key: []string{"source", "synced_at"},
						Include: []string{"deleted_at", "total_bc", "company_id", "branch_id"}},
					// What was deleted since a time: few rows.
					{Name: "invoices_deleted", Key: []string{"source", "deleted_at"}, Where: "deleted_at IS NOT NULL"},
				},
			},
		},
		Path:   "/sales/api/invoices/list/",
		Paging: erp.CursorPaged,
	}
}

// Currencies is every active currency, with the history of its rate kept
// in erp.currency_rates by Postgres (a trigger of the schema's owner on
// erp.currencies opens and closes the periods, whoever writes a rate).
func Currencies() *sync.List {
	return &sync.List{
		Info: sync.Info{
			Name:     "currencies",
			Core:     true,
			Contract: sync.ContractReviewed,
			History:  sync.HistoryOn,
			// A source's companies share its currencies.
			Access: sync.BySource,
			Table: &sync.Table{
				Columns: []sync.Column{
					{Name: "code", Field: "code", Type: sync.Text},
					{Name: "name", Field: "name", Type: sync.Text},
					{Name: "exchange_rate", Field: "exchange_rate", Type: sync.Money, Scale: 6, Kinds: "string"},
					{Name: "has_exchange_rate", Field: "has_exchange_rate", Type: sync.Bool},
					{Name: "requires_exchange_rate", Field: "requires_exchange_rate", Type: sync.Bool},
					{Name: "is_base_currency", Field: "is_base_currency", Type: sync.Bool},
					{Name: "is_system_enabled", Field: "is_system_enabled", Type: sync.Bool},
					{Name: "currency_code", Field: "currency_code", Type: sync.Text, Lenient: true},
					{Name: "currency_name", Field: "currency_name", Type: sync.Text, Lenient: true},
				},
				// The reviewed contract: its columns, and an integer id;
				// fields the reference does not show are reported as added
				// drift.
				Also: map[string]string{"id": "number"},
			},
		},
		Path:  "/accounts/api/currencies/",
		Query: url.Values{"scope": {"all"}},
	}
}

// Cashboxes is the list of cash and bank boxes with their balances.
func Cashboxes() *sync.List {
	return &sync.List{
		Info: sync.Info{
			Name:    "cashboxes",
			Core:    true,
			History: sync.HistoryOn,
			Table: &sync.Table{
				Columns: []sync.Column{
					{Name: "name", Field: "name", Type: sync.Text},
					{Name: "balance", Field: "balance", Type: sync.Money},
					{Name: "currency_code", Field: "currency_code", Type: sync.Text, Lenient: true},
					{Name: "type", Field: "type", Type: sync.Text, Lenient: true},
					{Name: "is_active", Field: "is_active", Type: sync.Bool, Lenient: true},
				},
				Also: map[string]string{"branch_id": "number|string"},
			},
		},
		Path: "/accounts/api/cashboxes/",
	}
}

// CashboxReconciliations is the list of cash counts against expected
// balances.
func CashboxReconciliations() *sync.List {
	return &sync.List{
		Info: sync.Info{
			Name:     "cashbox_reconciliations",
			Core:     true,
			Contract: sync.ContractUnreviewed,
			History:  sync.HistoryOn,
			Month:    "reconciled_at",
			Table: &sync.Table{
				Columns: []sync.Column{
					{Name: "cashbox_id", Field: "cashbox_id", Type: sync.Text, Kinds: "number|string"},
					{Name: "status", Field: "status", Type: sync.Text},
					{Name: "expected_balance", Field: "expected_balance", Type: sync.Money},
					{Name: "counted_balance", Field: "counted_balance", Type: sync.Money},
					{Name: "difference", Field: "difference", Type: sync.Money},
					{Name: "reconciled_at", Field: "reconciled_at", Type: sync.Timestamp, Lenient: true},
				},
			},
		},
		Path: "/accounts/api/cashbox-reconciliations/",
	}
}
