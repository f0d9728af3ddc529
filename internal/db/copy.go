package db

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// copyInto COPYs rows into a table of the warehouse. Postgres refuses
// COPY FROM into a table whose row-level security applies to the session's
// role (a runtime role without BYPASSRLS, see erp.restrict_to_companies):
// the rows then go through a temporary table and one statement that moves
// them, which the write policies allow. Whether the policies apply is
// asked once per connection and table.
func copyInto(ctx context.Context, tx Tx, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	name := table.Sanitize()
	policed, err := rowSecurityActive(ctx, tx, name)
	if err != nil {
		return 0, err
	}
	if !policed {
		return tx.CopyFrom(ctx, table, columns, src)
	}
	temp := "copy_" + strings.Join(table, "_")
	// ON COMMIT DELETE ROWS keeps one per connection; the move empties it
	// for the next COPY of the same transaction.
	if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TEMP TABLE IF NOT EXISTS %s (LIKE %s INCLUDING DEFAULTS) ON COMMIT DELETE ROWS`,
		pgx.Identifier{temp}.Sanitize(), name)); err != nil {
		return 0, err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{temp}, columns, src); err != nil {
		return 0, err
	}
	cols := make([]string, len(columns))
	for i, c := range columns {
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	list := strings.Join(cols, ", ")
	tag, err := tx.Exec(ctx, fmt.Sprintf(`WITH moved AS (DELETE FROM %s RETURNING %s) INSERT INTO %s (%s) SELECT %s FROM moved`,
		pgx.Identifier{temp}.Sanitize(), list, name, list, list))
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// rowSecurityActive reports whether row-level security applies to the
// session's role on the table, remembered on the connection.
func rowSecurityActive(ctx context.Context, tx Tx, table string) (bool, error) {
	data := tx.tx.Conn().PgConn().CustomData()
	key := "row_security_active " + table
	if v, ok := data[key].(bool); ok {
		return v, nil
	}
	var active bool
	if err := tx.QueryRow(ctx, `SELECT row_security_active($1::regclass)`, table).Scan(&active); err != nil {
		return false, fmt.Errorf("%s: row security: %w", table, Describe(err))
	}
	data[key] = active
	return active, nil
}
