package ingest

import (
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
)

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
// exact numeric for pgx.
func MoneyField(rec erp.Record, field string) (any, error) {
	d, ok, err := rec.Money(field)
	if err != nil || !ok {
		return nil, err
	}
	return db.Numeric(d), nil
}
