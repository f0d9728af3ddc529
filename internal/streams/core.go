package streams

import (
	"context"
	"net/url"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/ingest"
	"github.com/erpsync/erpsync/internal/model"
)

// The four core streams. Expectations follow the API reference where it
// shows fields, and the installation's observed shape where it does not.

// Invoices is the sales invoice list, walked by cursor in sweeps.
func Invoices() *ingest.List {
	return &ingest.List{
		Stream:  "invoices",
		History: ingest.HistoryOn,
		Path:    "/sales/api/invoices/list/",
		Month:   "date",
		Paging:  erp.CursorPaged,
		Columns: []ingest.Column{{Name: "total_bc", Field: "total_bc", Type: ingest.Money}},
		Expect: map[string]string{
			"id": "number|string", "number": "string", "date": "string", "customer": "object|string",
			"currency_code": "string", "total_bc": "number|string", "status": "string", "updated_at": "string",
		},
	}
}

// Currencies is every active currency, with the history of its rate kept
// in erp.currency_rates.
func Currencies() *ingest.List {
	return &ingest.List{
		Stream:  "currencies",
		History: ingest.HistoryOn,
		Path:    "/accounts/api/currencies/",
		Query:   url.Values{"scope": {"all"}},
		Columns: []ingest.Column{
			{Name: "code", Field: "code", Type: ingest.Text},
			{Name: "name", Field: "name", Type: ingest.Text},
			{Name: "exchange_rate", Field: "exchange_rate", Type: ingest.Money, Scale: 6},
			{Name: "has_exchange_rate", Field: "has_exchange_rate", Type: ingest.Bool},
			{Name: "requires_exchange_rate", Field: "requires_exchange_rate", Type: ingest.Bool},
			{Name: "is_base_currency", Field: "is_base_currency", Type: ingest.Bool},
			{Name: "is_system_enabled", Field: "is_system_enabled", Type: ingest.Bool},
		},
		// The reviewed contract; fields after is_system_enabled are not
		// shown by the reference, so they are reported as added drift.
		Expect: map[string]string{
			"id": "number", "code": "string", "currency_code": "string", "name": "string", "currency_name": "string",
			"exchange_rate": "string", "has_exchange_rate": "boolean", "requires_exchange_rate": "boolean",
			"is_base_currency": "boolean", "is_system_enabled": "boolean",
		},
		AfterWrite: func(ctx context.Context, tx pgx.Tx, scope model.Scope, ids []string) error {
			_, err := db.RecordCurrencyRates(ctx, tx, scope.Source, ids)
			return err
		},
	}
}

// Cashboxes is the list of cash and bank boxes with their balances.
func Cashboxes() *ingest.List {
	return &ingest.List{
		Stream:  "cashboxes",
		History: ingest.HistoryOn,
		Path:    "/accounts/api/cashboxes/",
		Columns: []ingest.Column{
			{Name: "name", Field: "name", Type: ingest.Text},
			{Name: "balance", Field: "balance", Type: ingest.Money},
		},
		Expect: map[string]string{
			"id": "number|string", "name": "string", "type": "string", "currency_code": "string",
			"balance": "number|string", "is_active": "boolean", "branch_id": "number|string",
		},
	}
}

// CashboxReconciliations is the list of cash counts against expected
// balances.
func CashboxReconciliations() *ingest.List {
	return &ingest.List{
		Stream:  "cashbox_reconciliations",
		History: ingest.HistoryOn,
		Path:    "/accounts/api/cashbox-reconciliations/",
		Month:   "reconciled_at",
		Columns: []ingest.Column{
			{Name: "cashbox_id", Field: "cashbox_id", Type: ingest.Text},
			{Name: "status", Field: "status", Type: ingest.Text},
			{Name: "expected_balance", Field: "expected_balance", Type: ingest.Money},
			{Name: "counted_balance", Field: "counted_balance", Type: ingest.Money},
			{Name: "difference", Field: "difference", Type: ingest.Money},
		},
		Expect: map[string]string{
			"id": "number|string", "cashbox_id": "number|string", "status": "string",
			"expected_balance": "number|string", "counted_balance": "number|string",
			"difference": "number|string", "reconciled_at": "string",
		},
	}
}
