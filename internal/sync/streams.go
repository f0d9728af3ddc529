package sync

import (
	"context"
	"net/url"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
)

// The four core streams. Expectations follow the API reference where it
// shows fields, and the installation's observed shape where it does not.
func init() {
	Register(&Stream{
		Name:    "invoices",
		Path:    "/sales/api/invoices/list/",
		Paging:  CursorPages,
		Columns: []Column{{Name: "total_bc", Field: "total_bc", Type: Money}},
		Expect: map[string]string{
			"id": "number|string", "number": "string", "date": "string", "customer": "object|string",
			"currency_code": "string", "total_bc": "number|string", "status": "string", "updated_at": "string",
		},
	})

	currencies := &Stream{
		Name:   "currencies",
		Path:   "/accounts/api/currencies/",
		Query:  url.Values{"scope": {"all"}},
		Paging: OneList,
		Columns: []Column{
			{Name: "code", Field: "code", Type: Text},
			{Name: "name", Field: "name", Type: Text},
			{Name: "exchange_rate", Field: "exchange_rate", Type: Money, Scale: 6},
			{Name: "has_exchange_rate", Field: "has_exchange_rate", Type: Bool},
			{Name: "requires_exchange_rate", Field: "requires_exchange_rate", Type: Bool},
			{Name: "is_base_currency", Field: "is_base_currency", Type: Bool},
			{Name: "is_system_enabled", Field: "is_system_enabled", Type: Bool},
		},
		// The reference's reviewed contract; fields after is_system_enabled
		// are "not shown", so they are reported as added drift.
		Expect: map[string]string{
			"id": "number", "code": "string", "currency_code": "string", "name": "string", "currency_name": "string",
			"exchange_rate": "string", "has_exchange_rate": "boolean", "requires_exchange_rate": "boolean",
			"is_base_currency": "boolean", "is_system_enabled": "boolean",
		},
	}
	currencies.AfterUpsert = func(ctx context.Context, tx pgx.Tx, source string) error {
		_, err := db.RecordCurrencyRates(ctx, tx, currencies.Table, source)
		return err
	}
	Register(currencies)

	Register(&Stream{
		Name:   "cashboxes",
		Path:   "/accounts/api/cashboxes/",
		Paging: OneList,
		Columns: []Column{
			{Name: "name", Field: "name", Type: Text},
			{Name: "balance", Field: "balance", Type: Money},
		},
		Expect: map[string]string{
			"id": "number|string", "name": "string", "type": "string", "currency_code": "string",
			"balance": "number|string", "is_active": "boolean", "branch_id": "number|string",
		},
	})

	Register(&Stream{
		Name:   "cashbox_reconciliations",
		Path:   "/accounts/api/cashbox-reconciliations/",
		Paging: OneList,
		Columns: []Column{
			{Name: "cashbox_id", Field: "cashbox_id", Type: Text},
			{Name: "status", Field: "status", Type: Text},
			{Name: "expected_balance", Field: "expected_balance", Type: Money},
			{Name: "counted_balance", Field: "counted_balance", Type: Money},
			{Name: "difference", Field: "difference", Type: Money},
		},
		Expect: map[string]string{
			"id": "number|string", "cashbox_id": "number|string", "status": "string",
			"expected_balance": "number|string", "counted_balance": "number|string",
			"difference": "number|string", "reconciled_at": "string",
		},
	})
}
