package sync

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestParseTyped documents parseTyped: how a typed column reads a
// payload's value.
func TestParseTyped(t *testing.T) {
	t.Run("AgreesWithTheSQLThatFillsRowsWrittenBefore", func(t *testing.T) {
		// A typed column reads a value the same at sync time (parseTyped) and in
		// the SQL that fills the rows written before it existed (erp.typed_*,
		// migration 12): same value, or NULL on both.
		pool, _ := testdb.Pool(t)
		ctx := context.Background()
		values := map[ColumnType][]string{
			Date: {`"2026-01-31"`, `"2024-02-29"`, `"2026-02-29"`, `"2026-04-31"`, `"2026-13-01"`, `"2026-00-10"`, `"2026-01-00"`,
				`"0000-01-01"`, `"0001-01-01"`, `"9999-12-31"`, `"2026-1-01"`, `"2026-01-01T00:00:00Z"`, `""`, `"20260101"`,
				`20260101`, `null`, `true`, `{"a":1}`, `["2026-01-01"]`, `" 2026-01-01"`, `"2026-01-01 "`, `"２０２６-01-01"`,
				`"2026\u002d01-01"`, `"1900-02-29"`, `"2000-02-29"`, `"2026-06-31"`, `"2026-12-31"`, `"2026-0a-01"`, `"+026-01-01"`},
			Timestamp: {`"2026-01-31T10:00:00Z"`, `"2026-01-31T10:00:00.123456Z"`, `"2026-01-31T10:00:00.1234567Z"`,
				`"2026-01-31T10:00:00+03:00"`, `"2026-01-31T10:00:00-00:30"`, `"2026-01-31T24:00:00Z"`, `"2026-01-31T23:60:00Z"`,
				`"2026-01-31T23:59:60Z"`, `"2026-02-30T10:00:00Z"`, `"2026-01-31t10:00:00z"`, `"2026-01-31T10:00:00+24:00"`,
				`"2026-01-31T10:00:00+23:59"`, `"2026-01-31T10:00:00"`, `"2026-01-31 10:00:00Z"`, `"0001-01-01T00:00:00Z"`,
				`1769853600`, `null`, `{}`},
			Text: {`"abc"`, `"a\u00e9\"b"`, `"\ud83d\ude00"`, `42`, `1.50`, `1e2`, `1.5e1`, `-0.0`, `1E-7`, `-12345678901234567890.123`,
				`7`, `-7`, `-0`, `123456789012345678901234567890`, `0`, `true`, `null`, `{}`, `[]`, `""`},
			Bool: {`true`, `false`, `"true"`, `1`, `null`, `[]`},
		}
		fn := map[ColumnType]string{Date: "erp.typed_date($1::jsonb) IS NOT DISTINCT FROM $2::date",
			Timestamp: "erp.typed_timestamp($1::jsonb) IS NOT DISTINCT FROM $2::timestamptz",
			Text:      "erp.typed_text($1::jsonb) IS NOT DISTINCT FROM $2::text",
			Bool:      "erp.typed_bool($1::jsonb) IS NOT DISTINCT FROM $2::boolean"}
		for typ, vals := range values {
			for _, v := range vals {
				raw := json.RawMessage(v)
				var got any
				if kind := erp.Kind(raw); kind != "null" {
					got, _ = parseTyped(typ, raw, kind)
				}
				var same bool
				if err := pool.QueryRow(ctx, `SELECT `+fn[typ], v, got).Scan(&same); err != nil {
					t.Fatalf("%s %s: %v", typ, v, err)
				}
				if !same {
					var sql *string
					pool.QueryRow(ctx, `SELECT `+map[ColumnType]string{Date: "erp.typed_date($1::jsonb)::text", Timestamp: "erp.typed_timestamp($1::jsonb)::text",
						Text: "erp.typed_text($1::jsonb)", Bool: "erp.typed_bool($1::jsonb)::text"}[typ], v).Scan(&sql)
					t.Errorf("%s of %s: sync reads %v, SQL reads %v", typ, v, got, deref(sql))
				}
			}
		}
	})
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}
