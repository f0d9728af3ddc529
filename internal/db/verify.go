package db

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/model"
)

// Comparison holds what the ERP lists for one table, copied page by page
// into a temporary table of the session, and compares it with the
// warehouse in SQL: the client keeps one page in memory, whatever the
// size of the table. The session is made read-only once its comparisons
// are prepared (see ReadOnly): a temporary table is the only thing it can
// write.
type Comparison struct {
	table *Table
	money []string // the money columns, summed
	month string   // the JSON field whose YYYY-MM groups the sums; "" for none
	temp  string
	cols  []string // COPY columns of the temporary table
	seq   int64
}

// NewComparison prepares the temporary table on conn; money are typed
// columns of the table, month a top-level field of the records.
func (t *Table) NewComparison(ctx context.Context, conn *pgx.Conn, money []string, month string) (*Comparison, error) {
	c := &Comparison{table: t, money: money, month: month, temp: "verify_" + strings.ReplaceAll(t.Name, ".", "_")}
	c.cols = append(append([]string{}, t.copyCols...), "seq", "month_src")
	// seq keeps the last copy of an id listed twice, as a sweep does.
	_, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TEMP TABLE IF NOT EXISTS %s (LIKE %s INCLUDING DEFAULTS, seq bigint, month_src text)`, c.temp, t.Name))
	if err != nil {
		return nil, fmt.Errorf("%s: preparing the comparison: %w", t.Name, Describe(err))
	}
	return c, nil
}

// ReadOnly makes every later transaction of the session read-only:
// verification cannot change the warehouse, even by mistake.
func ReadOnly(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, `SET default_transaction_read_only = on`); err != nil {
		return fmt.Errorf("read-only session: %w", Describe(err))
	}
	return nil
}

// Add copies a page of the ERP's rows; months holds each row's month
// field as received ("" when absent).
func (c *Comparison) Add(ctx context.Context, conn *pgx.Conn, sc model.Scope, rows []Row, months []string) error {
	src := &rowSource{rows: Rows(rows), sc: Scope{Scope: sc}}
	i := -1
	_, err := conn.CopyFrom(ctx, pgx.Identifier{c.temp}, c.cols, pgx.CopyFromFunc(func() ([]any, error) {
		if !src.Next() {
			return nil, nil
		}
		i++
		c.seq++
		v, _ := src.Values()
		return append(v, c.seq, months[i]), nil
	}))
	if err != nil {
		return fmt.Errorf("%s: keeping the ERP's page: %w", c.table.Name, Describe(err))
	}
	return nil
}

// Differences is what a comparison found.
type Differences struct {
	ERPRows, WarehouseRows int64
	// Missing: listed by the ERP, not live in the warehouse. Extra: live
	// in the warehouse (in the scope's company and branch), not listed.
	// Different: both, with other content (payload, typed columns,
	// company or branch).
	Missing, Extra, Different          int64
	MissingIDs, ExtraIDs, DifferentIDs []string // the first few, by id
	Sums                               []SumDifference
}

// SumDifference is the exact sum of one money column over one group, on
// both sides.
type SumDifference struct {
	CompanyID, BranchID, Month, Column string
	ERP, Warehouse                     decimal.Decimal
}

// Agree reports whether the sums are equal.
func (s SumDifference) Agree() bool { return s.ERP.Equal(s.Warehouse) }

// Compare compares what was added with the warehouse's rows of the
// source; sample bounds the ids listed per kind.
func (c *Comparison) Compare(ctx context.Context, conn *pgx.Conn, sc model.Scope, sample int) (Differences, error) {
	var d Differences
	t := c.table.Name
	// The ERP's rows, the last copy of each id.
	erpRows := fmt.Sprintf(`(SELECT DISTINCT ON (id) * FROM %s ORDER BY id, seq DESC)`, c.temp)
	counted := func(what, sql string, n *int64, ids *[]string, args ...any) error {
		q := fmt.Sprintf(`SELECT count(*), coalesce((array_agg(id ORDER BY id COLLATE "C"))[1:%d], '{}') FROM (%s) x`, sample, sql)
		if err := conn.QueryRow(ctx, q, args...).Scan(n, ids); err != nil {
			return fmt.Errorf("%s: %s: %w", t, what, Describe(err))
		}
		return nil
	}
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %s e), (SELECT count(*) FROM %s WHERE source = $1 AND deleted_at IS NULL)`,
		erpRows, t), sc.Source).Scan(&d.ERPRows, &d.WarehouseRows); err != nil {
		return d, fmt.Errorf("%s: counting: %w", t, Describe(err))
	}
	if err := counted("missing rows", fmt.Sprintf(`SELECT e.id FROM %s e
		LEFT JOIN %s w ON w.source = $1 AND w.id = e.id AND w.deleted_at IS NULL WHERE w.id IS NULL`, erpRows, t),
		&d.Missing, &d.MissingIDs, sc.Source); err != nil {
		return d, err
	}
	// EXCEPT hashes both sides: the temporary table has no statistics.
	if err := counted("extra rows", fmt.Sprintf(`SELECT id FROM %s
		WHERE source = $1 AND company_id = $2 AND branch_id = $3 AND deleted_at IS NULL
		EXCEPT SELECT id FROM %s`, t, c.temp), &d.Extra, &d.ExtraIDs, sc.Source, sc.CompanyID, sc.BranchID); err != nil {
		return d, err
	}
	differs := []string{"w.payload IS DISTINCT FROM e.payload", "w.company_id <> $2", "w.branch_id <> $3"}
	for _, col := range c.table.Columns {
		differs = append(differs, fmt.Sprintf("w.%[1]s IS DISTINCT FROM e.%[1]s", col))
	}
	if err := counted("different rows", fmt.Sprintf(`SELECT e.id FROM %s e
		JOIN %s w ON w.source = $1 AND w.id = e.id AND w.deleted_at IS NULL WHERE %s`, erpRows, t, strings.Join(differs, " OR ")),
		&d.Different, &d.DifferentIDs, sc.Source, sc.CompanyID, sc.BranchID); err != nil {
		return d, err
	}
	if len(c.money) == 0 {
		return d, nil
	}
	sums, err := c.sums(ctx, conn, sc, erpRows)
	if err != nil {
		return d, fmt.Errorf("%s: sums: %w", t, err)
	}
	d.Sums = sums
	return d, nil
}

// monthOf is the one rule that puts a record in a month, applied to the
// ERP's rows and the warehouse's alike: the field's YYYY-MM, or "".
func monthOf(field string) string {
	if field == "" {
		return "''"
	}
	return fmt.Sprintf(`CASE WHEN %[1]s ~ '^[0-9]{4}-[0-9]{2}' THEN left(%[1]s, 7) ELSE '' END`, field)
}

// sums compares the money columns' exact sums per company, branch and
// month.
func (c *Comparison) sums(ctx context.Context, conn *pgx.Conn, sc model.Scope, erpRows string) ([]SumDifference, error) {
	var sumCols []string
	for _, m := range c.money {
		sumCols = append(sumCols, fmt.Sprintf("coalesce(sum(%s), 0)::text", m))
	}
	field := ""
	if c.month != "" {
		field = "payload->>" + quoteLiteral(c.month)
	}
	side := func(sql string, args ...any) (map[[3]string][]decimal.Decimal, error) {
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			return nil, Describe(err)
		}
		defer rows.Close()
		out := map[[3]string][]decimal.Decimal{}
		for rows.Next() {
			var key [3]string
			vals := make([]decimal.Decimal, len(c.money))
			dest := []any{&key[0], &key[1], &key[2]}
			for i := range vals {
				dest = append(dest, &vals[i])
			}
			if err := rows.Scan(dest...); err != nil {
				return nil, err
			}
			out[key] = vals
		}
		return out, rows.Err()
	}
	erpSide, err := side(fmt.Sprintf(`SELECT $1::text, $2::text, %s AS month, %s FROM %s e GROUP BY 3`,
		monthOf("month_src"), strings.Join(sumCols, ", "), erpRows), sc.CompanyID, sc.BranchID)
	if err != nil {
		return nil, err
	}
	whSide, err := side(fmt.Sprintf(`SELECT company_id, branch_id, %s AS month, %s FROM %s
		WHERE source = $1 AND deleted_at IS NULL GROUP BY 1, 2, 3`, monthOf(field), strings.Join(sumCols, ", "), c.table.Name), sc.Source)
	if err != nil {
		return nil, err
	}
	keys := map[[3]string]bool{}
	for k := range erpSide {
		keys[k] = true
	}
	for k := range whSide {
		keys[k] = true
	}
	var out []SumDifference
	for k := range keys {
		for i, col := range c.money {
			s := SumDifference{CompanyID: k[0], BranchID: k[1], Month: k[2], Column: col}
			if v := erpSide[k]; v != nil {
				s.ERP = v[i]
			}
			if v := whSide[k]; v != nil {
				s.Warehouse = v[i]
			}
			out = append(out, s)
		}
	}
	sortSums(out)
	return out, nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// sortSums orders sums by company, branch, month and column.
func sortSums(s []SumDifference) {
	slices.SortFunc(s, func(a, b SumDifference) int {
		return cmp.Or(strings.Compare(a.CompanyID, b.CompanyID), strings.Compare(a.BranchID, b.BranchID),
			strings.Compare(a.Month, b.Month), strings.Compare(a.Column, b.Column))
	})
}
