package sync

import (
	"errors"
	"fmt"
	"slices"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
)

// CheckRecord refuses a record Postgres could not store as it came: a
// string with \u0000, a lone surrogate or invalid UTF-8; a number beyond
// numeric; nesting too deep. Such a record is rejected with its bytes
// kept, never stored altered, and the rest of its page goes on.
func CheckRecord(rec erp.Record) error {
	st := rec.Stats()
	switch {
	case st.InvalidUTF8:
		return errors.New("record is not valid UTF-8, which Postgres cannot store")
	case st.NULEscape:
		return errors.New(`record contains \u0000, which Postgres jsonb cannot store`)
	case st.LoneSurrogate:
		return errors.New("record contains a lone UTF-16 surrogate escape, which Postgres jsonb cannot store")
	}
	return db.CheckJSON(st.IntDigits, st.FracDigits, st.Depth)
}

// KeyField returns a string or number field used as (part of) a key:
// present, and storable and indexable by Postgres.
func KeyField(rec erp.Record, field string) (string, error) {
	v, ok, err := rec.Text(field)
	switch {
	case err != nil:
		return "", err
	case !ok || v == "":
		return "", fmt.Errorf("record has no %s", field)
	}
	return v, db.CheckKey(field, v)
}

// Field readers for streams that are not a List: each reads one top-level
// field of a record the way List columns are read, and returns nil when
// the field is absent or null.

// TextField returns a string or number field as text.
func TextField(rec erp.Record, field string) (*string, error) {
	v, ok, err := rec.Text(field)
	if err != nil || !ok {
		return nil, err
	}
	return &v, nil
}

// MoneyField returns a decimal field (a JSON number or string) as an
// exact numeric for pgx, refusing one Postgres numeric cannot hold.
func MoneyField(rec erp.Record, field string) (any, error) {
	d, ok, err := rec.Money(field)
	if err != nil || !ok {
		return nil, err
	}
	if err := db.CheckNumeric(d); err != nil {
		return nil, fmt.Errorf("money field %s: %w", field, err)
	}
	return db.Numeric(d), nil
}

// RecordLabels reads the company and branch a record carries itself:
// company_id and branch_id, or company and branch objects with an id. A
// record without both (a null branch included) carries none: its row is
// labelled with the context of the login that listed it.
func RecordLabels(rec erp.Record) db.Labels {
	company, ok := labelField(rec, "company_id", "company")
	if !ok {
		return db.Labels{}
	}
	branch, ok := labelField(rec, "branch_id", "branch")
	if !ok {
		return db.Labels{}
	}
	return db.Labels{CompanyID: company, BranchID: branch, Own: true}
}

// labelField reads a label: the scalar field flat, else the id of the
// object field nested.
func labelField(rec erp.Record, flat, nested string) (string, bool) {
	if v, ok, err := rec.Text(flat); err == nil && ok && v != "" && db.CheckKey(flat, v) == nil {
		return v, true
	}
	raw, ok := rec.Get(nested)
	if !ok || erp.Kind(raw) != "object" {
		return "", false
	}
	obj, err := erp.ParseRecord(raw)
	if err != nil {
		return "", false
	}
	if v, ok, err := obj.Text("id"); err == nil && ok && v != "" && db.CheckKey(nested+".id", v) == nil {
		return v, true
	}
	return "", false
}

// usualPageSizes are the page sizes ERPs apply by default when asked for
// none.
var usualPageSizes = []int{10, 20, 25, 50, 100, 200, 250, 500, 1000}

// mayBeCut is the one rule for an answer that may be a list cut short: it
// gives no paging signal at all, and holds exactly the page size asked
// for (asked, 0 when none was) or a usual default. An ERP that silently
// applies a default page size answers just so; the rest of the list is
// then never read, and must not be taken for deleted.
func mayBeCut(p *erp.Page, asked int) bool {
	n := len(p.Records)
	if p.Pagination || p.Next != "" || p.Count >= 0 || p.RecordsTotal >= 0 || n == 0 {
		return false
	}
	return n == asked || slices.Contains(usualPageSizes, n)
}

// cutWarning says what mayBeCut saw.
func cutWarning(n int) string {
	return fmt.Sprintf("the answer holds exactly %d records and no paging signal: the ERP may cut the list at a default page size", n)
}
