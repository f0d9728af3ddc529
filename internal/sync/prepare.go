package sync

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
)

// batch is a page turned into rows to write, rejected records and drift.
type batch struct {
	rows     []db.Row
	rejected []db.Rejected
	drift    []db.Drift
	received int
}

// prepare checks and converts a page's records. It is pure CPU work, done
// on the fetching side of the pipeline while the previous page is written.
// parsed, if not nil, holds the records already split by the page decoder.
func (s *Stream) prepare(records []json.RawMessage, parsed []erp.Record) batch {
	b := batch{received: len(records), rows: make([]db.Row, 0, len(records))}
	index := make(map[string]int, len(records))
	drift := map[[3]string]*db.Drift{}
	// One allocation for the typed values of the whole page.
	n := len(s.Columns)
	values := make([]any, len(records)*n)
	for i, raw := range records {
		var pre *erp.Record
		if parsed != nil && parsed[i].IsObject() {
			pre = &parsed[i]
		}
		row, rec, err := s.convert(raw, pre, values[i*n:(i+1)*n:(i+1)*n])
		if err != nil {
			id, _, _ := rec.Text("id") // a zero Record has no id
			b.rejected = append(b.rejected, db.Rejected{RecordID: id, Reason: err.Error(), Record: raw})
			continue
		}
		s.checkDrift(rec, row, drift)
		// A record listed twice in one page keeps its last version: two
		// rows with one key in one INSERT would fail the whole page.
		if i, dup := index[row.ID]; dup {
			b.rows[i] = row
			continue
		}
		index[row.ID] = len(b.rows)
		b.rows = append(b.rows, row)
	}
	for _, d := range drift {
		b.drift = append(b.drift, *d)
	}
	slices.SortFunc(b.drift, func(x, y db.Drift) int {
		return strings.Compare(x.Field+x.Change+x.Detail, y.Field+y.Change+y.Detail)
	})
	return b
}

func (s *Stream) convert(raw json.RawMessage, pre *erp.Record, values []any) (db.Row, erp.Record, error) {
	// Postgres refuses \u0000 and invalid UTF-8 in jsonb: one such
	// record must not fail its whole page.
	if bytes.Contains(raw, []byte(`\u0000`)) {
		return db.Row{}, erp.Record{}, fmt.Errorf("record contains \\u0000, which Postgres jsonb cannot store")
	}
	if !utf8.Valid(raw) {
		return db.Row{}, erp.Record{}, fmt.Errorf("record is not valid UTF-8")
	}
	var rec erp.Record
	if pre != nil {
		rec = *pre
	} else {
		var err error
		if rec, err = erp.ParseRecord(raw); err != nil {
			return db.Row{}, erp.Record{}, err
		}
	}
	id, ok, err := rec.Text("id")
	if err != nil {
		return db.Row{}, rec, err
	}
	if !ok || id == "" {
		return db.Row{}, rec, fmt.Errorf("record has no id")
	}
	row := db.Row{ID: id, Values: values, Payload: raw, Hash: sha256.Sum256(raw)}
	for i, c := range s.Columns {
		switch c.Type {
		case Money:
			d, ok, err := rec.Money(c.Field)
			if err != nil {
				return db.Row{}, rec, err
			}
			if ok {
				row.Values[i] = db.Numeric(d)
			}
		case Bool:
			v, ok, err := rec.Bool(c.Field)
			if err != nil {
				return db.Row{}, rec, err
			}
			if ok {
				row.Values[i] = v
			}
		default:
			v, ok, err := rec.Text(c.Field)
			if err != nil {
				return db.Row{}, rec, err
			}
			if ok {
				row.Values[i] = v
			}
		}
	}
	return row, rec, nil
}

// checkDrift counts differences between the record and Expect.
func (s *Stream) checkDrift(rec erp.Record, row db.Row, acc map[[3]string]*db.Drift) {
	if s.Expect == nil {
		return
	}
	add := func(field, change, detail, example string) {
		k := [3]string{field, change, detail}
		if d, ok := acc[k]; ok {
			d.Count++
			return
		}
		acc[k] = &db.Drift{Field: field, Change: change, Detail: detail, Example: example, Count: 1}
	}
	for _, e := range s.expect {
		raw, ok := rec.Get(e.field)
		if !ok {
			add(e.field, "missing", "", "record "+row.ID)
			continue
		}
		if kind := erp.Kind(raw); kind != "null" && !slices.Contains(e.kinds, kind) {
			add(e.field, "type", "expected "+e.spec+", got "+kind, erp.Truncate(string(raw), 100))
		}
	}
	for i := range rec.Len() {
		if key, val := rec.Field(i); s.Expect[string(key)] == "" {
			add(string(key), "added", erp.Kind(val), erp.Truncate(string(val), 100))
		}
	}
	for i, c := range s.Columns {
		if c.Type != Money || c.Scale == 0 || row.Values[i] == nil {
			continue
		}
		v, _, _ := rec.Money(c.Field)
		if got := int(-v.Exponent()); got != c.Scale {
			text, _, _ := rec.Text(c.Field)
			add(c.Field, "scale", fmt.Sprintf("expected %d fractional digits, got %d", c.Scale, max(got, 0)), text)
		}
	}
}
