package sync

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// SharedColumns are the columns every entity table has besides its typed
// columns, with their SQL types: the key and labels first, the record and
// its bookkeeping after the typed columns.
var SharedColumns = struct{ Before, After [][2]string }{
	Before: [][2]string{{"source", "text NOT NULL"}, {"id", "text NOT NULL"}, {"company_id", "text NOT NULL"}, {"branch_id", "text NOT NULL"}},
	After: [][2]string{{"payload", "jsonb NOT NULL"}, {"payload_hash", "bytea NOT NULL"}, {"listed_by", "text"},
		{"first_listed_by", "text"}, {"first_seen_at", "timestamptz NOT NULL DEFAULT now()"}, {"synced_at", "timestamptz NOT NULL DEFAULT now()"}, {"deleted_at", "timestamptz"}},
}

// sharedColumnNames are the names of SharedColumns, in order.
func sharedColumnNames() []string {
	var out []string
	for _, c := range append(slices.Clone(SharedColumns.Before), SharedColumns.After...) {
		out = append(out, c[0])
	}
	return out
}

// SQLType is the Postgres type of a column of type t.
func (t ColumnType) SQLType() string {
	return [...]string{"text", "numeric", "boolean", "date", "timestamptz"}[t]
}

// Migration is the goose migration that makes a stream's entity table as
// the stream declares it (see Info): the shared columns and its typed
// columns, its indexes, the rule by which scoped logins read it and its
// readers, and its history (erp.add_history) or, without one, the guard
// every entity table has (erp.guard_rows). A new stream's migration is this text, so
// that each fact of the stream is written once, in its declaration; a
// test writes it (docs/adding-a-stream.md says how) and keeps the tables
// equal to their declarations.
func Migration(s Stream) (string, error) {
	info := s.Declared()
	if info.Table == nil || info.Table.Own {
		return "", fmt.Errorf("stream %s: only an entity table is made from its declaration", info.Name)
	}
	t := *info.Table
	t.Name = cmp.Or(t.Name, info.Name)
	var cols [][2]string
	cols = append(cols, SharedColumns.Before...)
	for _, c := range t.Columns {
		cols = append(cols, [2]string{c.Name, c.Type.SQLType()})
	}
	cols = append(cols, SharedColumns.After...)
	width := 0
	for _, c := range cols {
		width = max(width, len(c[0]))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- +goose Up\n-- The table of the stream %s, as it declares it: written by its declaration (docs/adding-a-stream.md).\n", info.Name)
	fmt.Fprintf(&b, "CREATE TABLE erp.%s (\n", t.Name)
	for _, c := range cols {
		fmt.Fprintf(&b, "    %-*s %s,\n", width, c[0], c[1])
	}
	b.WriteString("    PRIMARY KEY (source, id)\n);\n")
	// The table is new and empty: its indexes are built in this
	// transaction, blocking nobody.
	for _, x := range t.Indexes {
		fmt.Fprintf(&b, "%s;\n", x.SQL("erp."+t.Name))
	}
	fmt.Fprintf(&b, "CALL erp.apply_access('%s', '%s');\n", t.Name, info.Access)
	fmt.Fprintf(&b, "GRANT SELECT ON erp.%s TO erpsync_analyst, erpsync_scoped;\n", t.Name)
	if info.History == HistoryOn {
		fmt.Fprintf(&b, "CALL erp.add_history('%s');\n", t.Name)
	} else {
		fmt.Fprintf(&b, "CALL erp.guard_rows('%s');\n", t.Name)
	}
	b.WriteString("\n-- +goose Down\n")
	if info.History == HistoryOn {
		fmt.Fprintf(&b, "DROP FUNCTION erp.%s_as_of(timestamptz);\nDROP TABLE erp.%s_history;\n", t.Name, t.Name)
	}
	fmt.Fprintf(&b, "DROP TABLE erp.%s;\nDROP FUNCTION erp.%s_guard();\n", t.Name, t.Name)
	return b.String(), nil
}
