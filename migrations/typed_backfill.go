package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
)

// Go are the migrations written in Go, registered beside the SQL files.
var Go = []*goose.Migration{
	goose.NewGoMigration(13, &goose.GoFunc{RunDB: fillTypedColumns}, nil),
}

// TypedColumns are, by table, the typed columns migration 12 added and
// how each is read from the payload (by erp.typed_*, the sync's rules).
// Migration 13 fills them in rows written before; it must not change
// once released.
var TypedColumns = map[string]string{
	"invoices": `invoice_date = erp.typed_date(payload->'date'), number = erp.typed_text(payload->'number'),
		status = erp.typed_text(payload->'status'), currency_code = erp.typed_text(payload->'currency_code'),
		customer_id = erp.typed_text(coalesce(payload #> '{customer,id}', payload->'customer_id')),
		customer_name = erp.typed_text(coalesce(payload #> '{customer,name}', payload->'customer'))`,
	"currencies":              `currency_code = erp.typed_text(payload->'currency_code'), currency_name = erp.typed_text(payload->'currency_name')`,
	"cashboxes":               `currency_code = erp.typed_text(payload->'currency_code'), type = erp.typed_text(payload->'type'), is_active = erp.typed_bool(payload->'is_active')`,
	"cashbox_reconciliations": `reconciled_at = erp.typed_timestamp(payload->'reconciled_at')`,
	"journal_entries":         `entry_date = erp.typed_date(payload->'date'), reference = erp.typed_text(payload->'reference')`,
	"payment_vouchers": `voucher_date = erp.typed_date(payload->'date'), number = erp.typed_text(payload->'number'),
		party = erp.typed_text(payload->'party'), currency_code = erp.typed_text(payload->'currency_code')`,
	"receipt_vouchers": `voucher_date = erp.typed_date(payload->'date'), number = erp.typed_text(payload->'number'),
		party = erp.typed_text(payload->'party'), currency_code = erp.typed_text(payload->'currency_code')`,
}

// typedTables is the order tables are filled in.
var typedTables = []string{"invoices", "currencies", "cashboxes", "cashbox_reconciliations", "journal_entries",
	"payment_vouchers", "receipt_vouchers"}

// fillBatch is how many rows one statement fills: small enough that each
// commits in well under a second at any table size, so the migration
// fits `erpsync migrate`'s statement timeout however large the warehouse.
const fillBatch = 5000

// fillTypedColumns fills the typed columns of the rows written before
// migration 12, in entity and history tables, batch by batch in key
// order, each batch its own transaction: it can be stopped and run again
// (goose records the migration only at its end), and it holds no lock for
// long. Then the rows written meanwhile are filled once more: a replica of
// the release before, still running while this one migrates, writes rows
// without them. Last, the index the dashboards' date filters use is built
// without blocking writes.
func fillTypedColumns(ctx context.Context, db *sql.DB) error {
	var start time.Time
	if err := db.QueryRowContext(ctx, `SELECT now()`).Scan(&start); err != nil {
		return err
	}
	for _, t := range typedTables {
		if err := fill(ctx, db, "erp."+t, entityKey, TypedColumns[t], ""); err != nil {
			return err
		}
		if err := fill(ctx, db, "erp."+t+"_history", historyKey, TypedColumns[t], ""); err != nil {
			return err
		}
	}
	for _, t := range typedTables {
		if err := fill(ctx, db, "erp."+t, entityKey, TypedColumns[t], "synced_at >= '"+start.Format(time.RFC3339Nano)+"'"); err != nil {
			return err
		}
	}
	return buildIndex(ctx, db, "invoices_source_date",
		`CREATE INDEX CONCURRENTLY invoices_source_date ON erp.invoices (source, invoice_date) WHERE deleted_at IS NULL`)
}

// keyColumn is a column of a primary key, with its type.
type keyColumn struct{ name, typ string }

var (
	entityKey  = []keyColumn{{"source", "text"}, {"id", "text"}}
	historyKey = []keyColumn{{"source", "text"}, {"id", "text"}, {"valid_from", "timestamptz"}}
)

// fill runs set on the rows of table (where, if not "", holds), in batches
// in the order of its primary key.
func fill(ctx context.Context, db *sql.DB, table string, keyCols []keyColumn, set, where string) error {
	key := make([]string, len(keyCols))
	ph := make([]string, len(keyCols))
	for i, c := range keyCols {
		key[i] = c.name
		ph[i] = fmt.Sprintf("$%d::%s", i+1, c.typ)
	}
	k := strings.Join(key, ", ")
	cond := ""
	if where != "" {
		cond = " AND " + where
	}
	// The last key filled, as text: the next batch starts after it.
	var last []any
	for {
		after := "true"
		if last != nil {
			after = fmt.Sprintf("(%s) > (%s)", k, strings.Join(ph, ", "))
		}
		// The batch's keys come from the primary key in order; the last
		// of them is where the next batch starts.
		q := fmt.Sprintf(`WITH b AS (SELECT %[1]s FROM %[2]s WHERE %[3]s%[4]s ORDER BY %[1]s LIMIT %[5]d),
u AS (UPDATE %[2]s t SET %[6]s FROM b WHERE %[7]s)
SELECT %[8]s FROM b ORDER BY %[9]s LIMIT 1`, k, table, after, cond, fillBatch, set,
			joinEq(key), "b."+strings.Join(key, "::text, b.")+"::text", desc(key))
		next := make([]any, len(key))
		ptrs := make([]any, len(key))
		for i := range next {
			var s string
			next[i] = &s
			ptrs[i] = &s
		}
		err := db.QueryRowContext(ctx, q, last...).Scan(ptrs...)
		if err == sql.ErrNoRows {
			return nil
		}
		if err != nil {
			return fmt.Errorf("filling the typed columns of %s: %w", table, err)
		}
		last = make([]any, len(key))
		for i := range next {
			last[i] = *(next[i].(*string))
		}
	}
}

func joinEq(key []string) string {
	parts := make([]string, len(key))
	for i, c := range key {
		parts[i] = fmt.Sprintf("t.%[1]s = b.%[1]s", c)
	}
	return strings.Join(parts, " AND ")
}

func desc(key []string) string {
	return strings.Join(key, " DESC, ") + " DESC"
}

// buildIndex builds an index without blocking writes. An interrupted
// CREATE INDEX CONCURRENTLY leaves an invalid index behind: it is dropped
// and built again.
func buildIndex(ctx context.Context, db *sql.DB, name, create string) error {
	var valid sql.NullBool
	err := db.QueryRowContext(ctx, `SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'erp' AND c.relname = $1`, name).Scan(&valid)
	switch {
	case err == sql.ErrNoRows:
	case err != nil:
		return err
	case valid.Bool:
		return nil
	default:
		if _, err := db.ExecContext(ctx, "DROP INDEX CONCURRENTLY erp."+name); err != nil {
			return fmt.Errorf("dropping the invalid index %s: %w", name, err)
		}
	}
	if _, err := db.ExecContext(ctx, create); err != nil {
		return fmt.Errorf("building index %s: %w", name, err)
	}
	_, err = db.ExecContext(ctx, `ANALYZE erp.invoices`)
	return err
}
