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

// Comparison compares what the ERP lists for one table with the
// warehouse, page by page: each page is copied into a small temporary
// table and compared with the warehouse's rows of the same ids (found by
// primary key); only its ids, months and money values are kept, in a
// second temporary table, for the rows the warehouse has that the ERP no
// longer lists and for the sums. The client holds one page in memory,
// whatever the size of the table. The session is made read-only once
// its comparisons are prepared (see ReadOnly): temporary tables are all
// it can write.
type Comparison struct {
	table  *Table
	money  []string // the money columns, summed
	month  string   // the JSON field whose YYYY-MM groups the sums; "" for none
	sample int      // ids kept per kind of difference

	page, seen string   // the temporary tables
	pageCols   []string // COPY columns of the page table
	compareSQL string
	keepSQL    string
	pages      int64
	found      Differences
	// The source's logins and their contexts (SetLogins).
	logins, companies, branches []string
}

// SetLogins gives the comparison the context (company, branch) of each
// login of the source, by login: a record without labels of its own is
// expected with its first lister's.
func (c *Comparison) SetLogins(contexts map[string][2]string) {
	c.logins, c.companies, c.branches = nil, nil, nil
	for login, cb := range contexts {
		c.logins, c.companies, c.branches = append(c.logins, login), append(c.companies, cb[0]), append(c.branches, cb[1])
	}
}

// NewComparison prepares the temporary tables on conn; money are typed
// columns of the table, month a top-level field of the records, sample
// how many ids to name per kind of difference.
func (t *Table) NewComparison(ctx context.Context, conn *pgx.Conn, money []string, month string, sample int) (*Comparison, error) {
	base := strings.ReplaceAll(t.Name, ".", "_")
	c := &Comparison{table: t, money: money, month: month, sample: sample, page: "verify_page_" + base, seen: "verify_seen_" + base}
	c.pageCols = append(slices.Clone(t.stageCols), "month_src")
	moneyCols, eMoney := "", ""
	for _, m := range money {
		moneyCols += ", " + m
		eMoney += ", e." + m
	}
	for _, ddl := range []string{
		// Emptied by each page's commit: deleting would leave dead rows
		// that nothing vacuums in a temporary table.
		fmt.Sprintf(`CREATE TEMP TABLE IF NOT EXISTS %s (LIKE %s INCLUDING DEFAULTS, own_labels boolean, month_src text) ON COMMIT DELETE ROWS`, c.page, t.Name),
		// seq is the page: an id listed twice (by two pages, or by two
		// logins) counts once, its last copy.
		fmt.Sprintf(`CREATE TEMP TABLE IF NOT EXISTS %s AS SELECT 0::bigint AS seq, id, company_id, branch_id, ''::text AS month_src%s FROM %s WITH NO DATA`,
			c.seen, moneyCols, t.Name),
	} {
		if _, err := conn.Exec(ctx, ddl); err != nil {
			return nil, fmt.Errorf("%s: preparing the comparison: %w", t.Name, Describe(err))
		}
	}
	// A record's labels are its own, else the context of the login that
	// first listed it ($3 to $5: the source's logins and their contexts;
	// a row first listed by a login the source no longer has is not
	// compared by its labels).
	firsts := fmt.Sprintf(`LEFT JOIN unnest($3::text[], $4::text[], $5::text[]) AS f(login, company_id, branch_id) ON f.login = %s`, firstLister("w"))
	differs := []string{"w.id IS NULL", "w.payload IS DISTINCT FROM e.payload",
		"(e.own_labels AND (w.company_id <> e.company_id OR w.branch_id <> e.branch_id))",
		"(NOT e.own_labels AND (w.company_id, w.branch_id) IS DISTINCT FROM (f.company_id, f.branch_id) AND f.login IS NOT NULL)"}
	for _, col := range t.Columns {
		differs = append(differs, fmt.Sprintf("w.%[1]s IS DISTINCT FROM e.%[1]s", col))
	}
	// The page's rows are named by id: the page table has no statistics
	// (see Table.upsertSQL).
	c.compareSQL = fmt.Sprintf(`SELECT e.id, w.id IS NULL FROM %s e
		LEFT JOIN (SELECT * FROM %s WHERE source = $1 AND id = ANY($2::text[]) AND deleted_at IS NULL) w ON w.id = e.id
		%s
		WHERE %s`, c.page, t.Name, firsts, strings.Join(differs, " OR "))
	// A record's labels for the sums: its own, else its first lister's
	// context, else the warehouse's, else the context of the login
	// listing it now.
	label := func(col string) string {
		return fmt.Sprintf("CASE WHEN e.own_labels THEN e.%[1]s WHEN f.login IS NOT NULL THEN f.%[1]s WHEN w.id IS NOT NULL THEN w.%[1]s ELSE e.%[1]s END", col)
	}
	c.keepSQL = fmt.Sprintf(`INSERT INTO %[2]s
		SELECT $6, e.id, %[5]s, %[6]s, e.month_src%[3]s
		FROM %[1]s e LEFT JOIN (SELECT id, company_id, branch_id, listed_by, first_listed_by FROM %[4]s WHERE source = $1 AND id = ANY($2::text[])) w ON w.id = e.id
		%[7]s`,
		c.page, c.seen, eMoney, t.Name, label("company_id"), label("branch_id"), firsts)
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

// Add compares a page of the ERP's rows (ids unique within it) with the
// warehouse; months holds each row's month field as received ("" when
// absent).
func (c *Comparison) Add(ctx context.Context, conn *pgx.Conn, sc model.Scope, rows []Row, months []string) error {
	c.pages++
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	// One transaction per page: its commit empties the page table.
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", c.table.Name, Describe(err))
	}
	defer tx.Rollback(ctx)
	src := &rowSource{rows: rowsOf(rows), sc: sc, stage: true}
	i := -1
	_, err = tx.CopyFrom(ctx, pgx.Identifier{c.page}, c.pageCols, pgx.CopyFromFunc(func() ([]any, error) {
		if !src.Next() {
			return nil, nil
		}
		i++
		v, _ := src.Values()
		return append(v, months[i]), nil
	}))
	if err != nil {
		return fmt.Errorf("%s: copying the ERP's page: %w", c.table.Name, Describe(err))
	}
	b := &pgx.Batch{}
	b.Queue(c.compareSQL, sc.Source, ids, c.logins, c.companies, c.branches)
	b.Queue(c.keepSQL, sc.Source, ids, c.logins, c.companies, c.branches, c.pages)
	br := tx.SendBatch(ctx, b)
	found, err := br.Query()
	if err == nil {
		var id string
		var missing bool
		_, err = pgx.ForEachRow(found, []any{&id, &missing}, func() error {
			if missing {
				c.found.Missing++
				c.found.MissingIDs = keepSmallest(c.found.MissingIDs, id, c.sample)
			} else {
				c.found.Different++
				c.found.DifferentIDs = keepSmallest(c.found.DifferentIDs, id, c.sample)
			}
			return nil
		})
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return fmt.Errorf("%s: comparing a page: %w", c.table.Name, Describe(err))
	}
	return nil
}

// keepSmallest adds id to the sorted ids, keeping the n smallest (in
// byte order, as Postgres's C collation sorts).
func keepSmallest(ids []string, id string, n int) []string {
	i, _ := slices.BinarySearch(ids, id)
	if i >= n {
		return ids
	}
	ids = slices.Insert(ids, i, id)
	return ids[:min(len(ids), n)]
}

// Differences is what a comparison found.
type Differences struct {
	ERPRows, WarehouseRows int64
	// Missing: listed by the ERP, not live in the warehouse. Extra: live
	// in the warehouse, listed by none of the source's logins.
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

// Compare ends the comparison once every page of every login of the
// source was added: the rows the ERP no longer lists, and the sums.
func (c *Comparison) Compare(ctx context.Context, conn *pgx.Conn, source string) (Differences, error) {
	d := c.found
	t := c.table.Name
	// Statistics first: the plans below join a million rows.
	if _, err := conn.Exec(ctx, "ANALYZE "+c.seen); err != nil {
		return d, fmt.Errorf("%s: %w", t, Describe(err))
	}
	// The last copy of an id listed on several pages.
	if _, err := conn.Exec(ctx, fmt.Sprintf(`DELETE FROM %[1]s s WHERE EXISTS (SELECT 1 FROM %[1]s l WHERE l.id = s.id AND l.seq > s.seq)`, c.seen)); err != nil {
		return d, fmt.Errorf("%s: ids listed twice: %w", t, Describe(err))
	}
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %s), (SELECT count(*) FROM %s WHERE source = $1 AND deleted_at IS NULL)`,
		c.seen, t), source).Scan(&d.ERPRows, &d.WarehouseRows); err != nil {
		return d, fmt.Errorf("%s: counting: %w", t, Describe(err))
	}
	// EXCEPT hashes both sides, as the sweep's deletion check does.
	q := fmt.Sprintf(`SELECT count(*), coalesce((array_agg(id ORDER BY id COLLATE "C"))[1:%d], '{}') FROM (
		SELECT id FROM %s WHERE source = $1 AND deleted_at IS NULL
		EXCEPT SELECT id FROM %s) x`, c.sample, t, c.seen)
	if err := conn.QueryRow(ctx, q, source).Scan(&d.Extra, &d.ExtraIDs); err != nil {
		return d, fmt.Errorf("%s: extra rows: %w", t, Describe(err))
	}
	if len(c.money) == 0 {
		return d, nil
	}
	sums, err := c.sums(ctx, conn, source)
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
func (c *Comparison) sums(ctx context.Context, conn *pgx.Conn, source string) ([]SumDifference, error) {
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
	erpSide, err := side(fmt.Sprintf(`SELECT company_id, branch_id, %s AS month, %s FROM %s e GROUP BY 1, 2, 3`,
		monthOf("month_src"), strings.Join(sumCols, ", "), c.seen))
	if err != nil {
		return nil, err
	}
	whSide, err := side(fmt.Sprintf(`SELECT company_id, branch_id, %s AS month, %s FROM %s
		WHERE source = $1 AND deleted_at IS NULL GROUP BY 1, 2, 3`, monthOf(field), strings.Join(sumCols, ", "), c.table.Name), source)
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
