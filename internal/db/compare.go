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
// hashes, $7 the digests, $8 the login, then a text array per typed
// column, cast to the column's type, which it reads from the table on
// first use.
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
	for i, c := range t.Columns {
		if types[c] == "" {
			return "", fmt.Errorf("%s has no column %s", t.Name, c)
		}
		arrays = append(arrays, fmt.Sprintf("$%d::text[]", 9+i))
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
	values := make([][]*string, len(t.Columns))
	for c := range values {
		values[c] = make([]*string, n)
	}
	for i := range rows {
		r := &rows[i]
		ids[i], hashes[i], own[i] = r.ID, r.Hash[:], r.Labels.Own
		companies[i], branches[i] = labelsOf(sc, r.Labels)
		whole := true
		for c, v := range r.Values {
			var ok bool
			if values[c][i], ok = typedText(v); !ok {
				whole = false
			}
		}
		if d, ok := ContentDigest(r.Payload); ok && whole {
			digests[i] = d[:]
		}
	}
	args := []any{sc.Source, ids, companies, branches, own, hashes, digests, listedBy(sc)}
	for _, v := range values {
		args = append(args, v)
	}
	return args
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
