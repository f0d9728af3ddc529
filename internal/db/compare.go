package db

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/erpsync/erpsync/internal/model"
)

// A page is first compared with the warehouse without its payloads: each
// row's labels, typed columns, hash and lister as the page brings them,
// and the digest of its payload's jsonb text (ContentDigest), which the
// query sets against the same digest of the stored payload, computed by
// Postgres from the row. A row whose content is the warehouse's is so
// decided in one round trip and ships no payload; only the rows that
// differ (or whose digest or typed values could not be written here) are
// staged whole and upserted, where they are compared exactly again.

// changedQuery is that comparison's statement: $1 the source, $2 the
// ids, $3 and $4 the labels, $5 whether the records carry them, $6 the
// hashes, $7 the digests, $8 the login, then an array per typed column,
// of the column's type, which it reads from the table on first use (see
// typedArray).
func (t *Table) changedQuery(ctx context.Context, q Querier) (string, error) {
	t.changedMu.Lock()
	defer t.changedMu.Unlock()
	if t.changedSQL != "" {
		return t.changedSQL, nil
	}
	rows, err := q.Query(ctx, `SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute a
WHERE a.attrelid = $1::regclass AND a.attname = ANY($2) AND NOT a.attisdropped`, t.Name, t.Columns)
	if err != nil {
		return "", fmt.Errorf("%s: the types of its columns: %w", t.Name, Describe(err))
	}
	types := map[string]string{}
	var name, typ string
	if _, err := pgx.ForEachRow(rows, []any{&name, &typ}, func() error {
		types[name] = typ
		return nil
	}); err != nil {
		return "", fmt.Errorf("%s: the types of its columns: %w", t.Name, Describe(err))
	}
	arrays := []string{"$2::text[]", "$3::text[]", "$4::text[]", "$5::boolean[]", "$6::bytea[]", "$7::bytea[]"}
	names := []string{"id", "company_id", "branch_id", "own_labels", "payload_hash", "digest"}
	typed := map[string]string{}
	t.columnTypes = make([]string, len(t.Columns))
	for i, c := range t.Columns {
		if types[c] == "" {
			return "", fmt.Errorf("%s has no column %s", t.Name, c)
		}
		t.columnTypes[i] = types[c]
		arrays = append(arrays, fmt.Sprintf("$%d::%s[]", 9+i, arrayType(types[c])))
		names = append(names, fmt.Sprintf("v%d", i))
		typed[c] = fmt.Sprintf("s.v%d::%s", i, types[c])
	}
	from := func(c string) string {
		if e, ok := typed[c]; ok {
			return e
		}
		return t.fromStage(c)
	}
	t.changedSQL = fmt.Sprintf(`
SELECT s.id FROM (SELECT u.*, $8::text AS listed_by FROM unnest(%[2]s) AS u(%[3]s)) s
LEFT JOIN (SELECT * FROM %[1]s WHERE source = $1 AND id = ANY($2::text[])) cur ON cur.id = s.id
WHERE cur.id IS NULL OR %[4]s`, t.Name, strings.Join(arrays, ", "), strings.Join(names, ", "),
		t.differs("cur", from, "s.digest IS NULL OR sha256(convert_to(cur.payload::text, 'UTF8')) IS DISTINCT FROM s.digest"))
	return t.changedSQL, nil
}

// changedArgs are changedQuery's arguments for rows.
func (t *Table) changedArgs(sc model.Scope, rows []Row) []any {
	n := len(rows)
	ids, companies, branches := make([]string, n), make([]string, n), make([]string, n)
	own, hashes, digests := make([]bool, n), make([][]byte, n), make([][]byte, n)
	values := make([]typedArray, len(t.Columns))
	for c := range values {
		values[c] = newTypedArray(t.columnTypes[c], n)
	}
	for i := range rows {
		r := &rows[i]
		ids[i], hashes[i], own[i] = r.ID, r.Hash[:], r.Labels.Own
		companies[i], branches[i] = labelsOf(sc, r.Labels)
		whole := true
		for c, v := range r.Values {
			if !values[c].set(i, v) {
				whole = false
			}
		}
		if d, ok := ContentDigest(r.Payload); ok && whole {
			digests[i] = d[:]
		}
	}
	args := []any{sc.Source, ids, companies, branches, own, hashes, digests, listedBy(sc)}
	for _, v := range values {
		args = append(args, v.values())
	}
	return args
}

// arrayType is the type of the array a typed column's values are sent
// in: their own for the types a sync writes, else text, cast.
func arrayType(column string) string {
	switch column {
	case "numeric", "date", "boolean", "timestamp with time zone":
		return column
	}
	return "text"
}

// typedArray holds a page's values of one typed column, in the array
// type arrayType names, for changedQuery.
type typedArray struct {
	numerics []pgtype.Numeric
	dates    []pgtype.Date
	bools    []pgtype.Bool
	times    []pgtype.Timestamptz
	texts    []*string
}

func newTypedArray(column string, n int) typedArray {
	switch arrayType(column) {
	case "numeric":
		return typedArray{numerics: make([]pgtype.Numeric, n)}
	case "date":
		return typedArray{dates: make([]pgtype.Date, n)}
	case "boolean":
		return typedArray{bools: make([]pgtype.Bool, n)}
	case "timestamp with time zone":
		return typedArray{times: make([]pgtype.Timestamptz, n)}
	}
	return typedArray{texts: make([]*string, n)}
}

// set puts row i's value v; ok is false when v is not of the column's
// kind (the row is then compared whole).
func (a typedArray) set(i int, v any) bool {
	if v == nil {
		return true // NULL: the zero of each element type
	}
	switch {
	case a.numerics != nil:
		n, ok := v.(pgtype.Numeric)
		a.numerics[i] = n
		return ok
	case a.dates != nil:
		d, ok := v.(pgtype.Date)
		a.dates[i] = d
		return ok
	case a.bools != nil:
		b, ok := v.(bool)
		a.bools[i] = pgtype.Bool{Bool: b, Valid: ok}
		return ok
	case a.times != nil:
		t, ok := v.(time.Time)
		a.times[i] = pgtype.Timestamptz{Time: t, Valid: ok}
		return ok
	}
	s, ok := typedText(v)
	a.texts[i] = s
	return ok
}

func (a typedArray) values() any {
	switch {
	case a.numerics != nil:
		return pgtype.FlatArray[pgtype.Numeric](a.numerics)
	case a.dates != nil:
		return pgtype.FlatArray[pgtype.Date](a.dates)
	case a.bools != nil:
		return pgtype.FlatArray[pgtype.Bool](a.bools)
	case a.times != nil:
		return pgtype.FlatArray[pgtype.Timestamptz](a.times)
	}
	return pgtype.FlatArray[*string](a.texts)
}

// typedText is a typed column's value as text that casts back to it
// exactly (nil for NULL); ok is false for a value it cannot write so.
func typedText(v any) (*string, bool) {
	var s string
	switch x := v.(type) {
	case nil:
		return nil, true
	case string:
		s = x
	case bool:
		s = strconv.FormatBool(x)
	case pgtype.Numeric:
		if !x.Valid {
			return nil, true
		}
		if x.NaN || x.InfinityModifier != pgtype.Finite || x.Int == nil {
			return nil, false
		}
		s = numericText(x)
	case pgtype.Date:
		if !x.Valid {
			return nil, true
		}
		if x.InfinityModifier != pgtype.Finite || x.Time.Year() < 1 {
			return nil, false
		}
		s = x.Time.Format("2006-01-02")
	case time.Time:
		s = x.Format(time.RFC3339Nano)
	default:
		return nil, false
	}
	return &s, true
}

// numericText writes n's digits with its point, as numeric reads them.
func numericText(n pgtype.Numeric) string {
	digits := n.Int.String()
	sign := ""
	if strings.HasPrefix(digits, "-") {
		sign, digits = "-", digits[1:]
	}
	if n.Exp >= 0 {
		return sign + digits + strings.Repeat("0", int(n.Exp))
	}
	frac := int(-n.Exp)
	if len(digits) <= frac {
		digits = strings.Repeat("0", frac-len(digits)+1) + digits
	}
	return sign + digits[:len(digits)-frac] + "." + digits[len(digits)-frac:]
}
