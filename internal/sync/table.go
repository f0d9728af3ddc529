package sync

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"regexp"
	"slices"
	"strings"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
)

// ColumnType says how a column is read from a record.
type ColumnType int

const (
	Text      ColumnType = iota // a JSON string or number, as text
	Money                       // an exact decimal (number or string), numeric
	Bool                        // a JSON boolean
	Date                        // a YYYY-MM-DD string, date
	Timestamp                   // an RFC 3339 string, timestamptz
)

func (t ColumnType) String() string {
	return [...]string{"text", "money", "bool", "date", "timestamp"}[t]
}

// Column is a warehouse column filled from a field of each record.
//
// A column is strict unless Lenient: a value that does not parse rejects
// the record (its bytes go to erp.rejected_records), as money must. A
// lenient column is for what analysts filter and group by: a value that
// does not parse, or comes in another shape than expected, is NULL and an
// entry in erp.schema_drift, and the record is written all the same.
type Column struct {
	Name string // SQL column
	// Field is the JSON field; a.b is the field b of the object a.
	Field string
	// Alt are fields read instead, in order, when Field is absent: where
	// installations send the same value in another shape (the customer a
	// string on some, an object on others). Lenient columns only.
	Alt     []string
	Type    ColumnType
	Lenient bool
	// Kinds are the JSON kinds expected of the field ("number|string"),
	// for drift; "" is what Type reads ("number|string" for Money,
	// "string" for Text, Date and Timestamp, "boolean" for Bool), or
	// "object" for a field read inside an object (a.b expects a).
	Kinds string
	// Scale, for Money, is the number of fractional digits expected; a
	// value with another scale is stored as received and counted as drift.
	// 0 means no expectation.
	Scale int
}

// Table is a stream's warehouse table, erp.<Name>. Most are entity tables
// as streams fill them: keyed by (source, id), with the shared columns
// (company_id, branch_id, payload, payload_hash, listed_by,
// first_listed_by, first_seen_at, synced_at, deleted_at) and Columns,
// read from each record. A List has
// one; a stream of its own declares one to write rows the way lists do
// (Row, then Run.Upsert: unchanged rows skipped, labels, history), and to
// verify and probe them. A table of a shape of its own (Own) is written
// by its stream; it declares only its money columns (Name and Type), for
// the sums `erpsync verify` reports.
type Table struct {
	// Name is the table's name in schema erp ("": the stream's).
	Name    string
	Own     bool
	Columns []Column
	// Also are the top-level fields expected besides those the columns
	// read ("id" is expected as "number|string" unless Also says
	// otherwise), with their JSON kinds ("number|string"; null matches any
	// kind). Differences from the fields expected are recorded as drift.
	// A table with neither columns nor Also expects nothing: the fields
	// of its records are not known.
	Also map[string]string
	// Indexes are the table's indexes besides its primary key: what its
	// readers' questions need (docs/performance.md measures them). Every
	// write of a row maintains each of them, and a column an index reads
	// (key, INCLUDE or predicate) keeps an update that changes it from
	// being a HOT update, so each earns its place by a reader's question.
	Indexes []Index

	db     *db.Table
	expect Expectation // the fields expected, made once by Validate
}

// Expectation is what a stream expects of a record's top-level fields,
// with their JSON kinds ("number|string"; null matches any kind). Check
// counts in drift the fields missing, of another kind, or not expected:
// a renamed or retyped field is never a silent NULL.
type Expectation struct {
	fields []expectedField // sorted
	known  map[string]string
}

type expectedField struct {
	field, spec string
	kinds       []string
}

// NewExpectation parses the fields expected (nil: none, nothing checked).
func NewExpectation(fields map[string]string) Expectation {
	e := Expectation{known: fields}
	for field, spec := range fields {
		e.fields = append(e.fields, expectedField{field: field, spec: spec, kinds: strings.Split(spec, "|")})
	}
	slices.SortFunc(e.fields, func(a, b expectedField) int { return strings.Compare(a.field, b.field) })
	return e
}

// Fields are the fields expected, with their kinds (for probe).
func (e Expectation) Fields() map[string]string { return e.known }

// Check compares a record (known in messages by id) with the expectation.
// Records almost always share one shape (the same fields with the same
// kinds): the fields are compared once per shape counted in drift, and
// the other records of that shape add to the counts found.
func (e Expectation) Check(rec erp.Record, id string, drift *Drift) {
	if e.known == nil {
		return
	}
	drift.init()
	shape := shapeOf(rec)
	if found, seen := drift.shapes[shape]; seen {
		for _, d := range found {
			d.Count++
		}
		return
	}
	found := []*db.Drift{}
	for _, f := range e.fields {
		raw, ok := rec.Get(f.field)
		if !ok {
			found = append(found, drift.add(f.field, "missing", "", "record "+id))
			continue
		}
		if kind := erp.Kind(raw); kind != "null" && !slices.Contains(f.kinds, kind) {
			found = append(found, drift.add(f.field, "type", "expected "+f.spec+", got "+kind, erp.Truncate(string(raw), 100)))
		}
	}
	for i := range rec.Len() {
		if key, val := rec.Field(i); e.known[string(key)] == "" {
			found = append(found, drift.add(string(key), driftAdded, erp.Kind(val), erp.Truncate(string(val), 100)))
		}
	}
	drift.shapes[shape] = found
}

// Index is an index of an entity table: a btree on Key, with Include's
// columns stored in it so that a question reading only those (and the
// columns row-level security reads: source, company_id, branch_id) is
// answered from the index alone, and Where, if not "", its predicate.
type Index struct {
	Name    string
	Key     []string
	Include []string
	Where   string
}

// SQL is the statement that builds x on table: on a new table, in the
// migration that makes it. On a table that holds rows, a migration builds
// it CONCURRENTLY instead, which blocks no writer.
func (x Index) SQL(table string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE INDEX %s ON %s (%s)", x.Name, table, strings.Join(x.Key, ", "))
	if len(x.Include) > 0 {
		fmt.Fprintf(&b, " INCLUDE (%s)", strings.Join(x.Include, ", "))
	}
	if x.Where != "" {
		fmt.Fprintf(&b, " WHERE %s", x.Where)
	}
	return b.String()
}

// Columns are the columns x reads: its key, its included columns and, if
// known, those of its predicate.
func (x Index) Columns() []string {
	out := slices.Concat(x.Key, x.Include)
	for _, w := range predicateColumn.FindAllString(x.Where, -1) {
		if !slices.Contains(out, w) && !sqlWords[strings.ToUpper(w)] {
			out = append(out, w)
		}
	}
	return out
}

var (
	predicateColumn = regexp.MustCompile(`[a-z_][a-z0-9_]*`)
	sqlWords        = map[string]bool{"IS": true, "NOT": true, "NULL": true, "AND": true, "OR": true, "TRUE": true, "FALSE": true}
)

// Validate checks the definition and prepares its SQL.
func (t *Table) Validate() error {
	if !streamName.MatchString(t.Name) {
		return fmt.Errorf("table name %q: want lower-case letters, digits and '_'", t.Name)
	}
	if t.Own {
		for _, c := range t.Columns {
			if c.Name == "" || c.Type != Money {
				return fmt.Errorf("table %s: a table of its own declares only its money columns, by name", t.Name)
			}
		}
		return nil
	}
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		switch {
		case c.Name == "" || c.Field == "":
			return errors.New("a column needs a Name and a Field")
		case c.Type == Money && c.Lenient:
			return fmt.Errorf("column %s: money is never lenient: a value that does not parse rejects its record", c.Name)
		case len(c.Alt) > 0 && !c.Lenient:
			return fmt.Errorf("column %s: only a lenient column reads alternative fields", c.Name)
		case !c.Lenient && (c.Type == Date || c.Type == Timestamp || strings.Contains(c.Field, ".")):
			return fmt.Errorf("column %s: a %s column or one read from a nested field must be lenient", c.Name, c.Type)
		}
		cols[i] = c.Name
	}
	known := slices.Concat(cols, sharedColumnNames())
	for _, x := range t.Indexes {
		if !streamName.MatchString(x.Name) || len(x.Key) == 0 {
			return fmt.Errorf("table %s: an index needs a name and a key", t.Name)
		}
		for _, c := range x.Columns() {
			if !slices.Contains(known, c) {
				return fmt.Errorf("table %s: index %s reads %s, which is not a column of the table", t.Name, x.Name, c)
			}
		}
	}
	t.db = db.NewTable("erp."+t.Name, cols...)
	t.expect = NewExpectation(t.expected())
	return nil
}

// expected lists the fields the table expects, with their kinds: those
// its columns read, then Also.
func (t *Table) expected() map[string]string {
	if len(t.Columns) == 0 && len(t.Also) == 0 {
		return nil
	}
	out := map[string]string{"id": "number|string"}
	for _, c := range t.Columns {
		field, _, nested := strings.Cut(c.Field, ".")
		kinds := c.Kinds
		switch {
		case kinds != "":
		case nested:
			kinds = "object"
		case c.Type == Money:
			kinds = "number|string"
		case c.Type == Bool:
			kinds = "boolean"
		default:
			kinds = "string"
		}
		if had, ok := out[field]; ok && had != kinds && field != "id" {
			kinds = unionKinds(had, kinds)
		}
		out[field] = kinds
	}
	for field, kinds := range t.Also {
		out[field] = kinds
	}
	return out
}

// unionKinds joins two lists of kinds ("object", "object|string").
func unionKinds(a, b string) string {
	kinds := strings.Split(a, "|")
	for _, k := range strings.Split(b, "|") {
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	return strings.Join(kinds, "|")
}

// Expected lists the fields the table expects, with their JSON kinds
// (for probe).
func (t *Table) Expected() map[string]string { return t.expect.Fields() }

// columnsOf lists the money columns (money), or the others.
func (t *Table) columnsOf(money bool) []string {
	var out []string
	for _, c := range t.Columns {
		if (c.Type == Money) == money {
			out = append(out, c.Name)
		}
	}
	return out
}

// driftUnusable is the drift of a typed column that could not read its
// field (absent, or in a shape it does not read): the column is NULL.
const driftUnusable = "unusable"

// Drift counts the differences between what a table expects of records
// and what came, over a page (or any batch of records): Row adds to it,
// Entries lists it for Run.Drift.
type Drift struct {
	acc    map[[3]string]*db.Drift
	shapes map[uint64][]*db.Drift
}

func (d *Drift) init() {
	if d.acc == nil {
		d.acc, d.shapes = map[[3]string]*db.Drift{}, map[uint64][]*db.Drift{}
	}
}

// add counts one difference and returns its entry.
func (d *Drift) add(field, change, detail, example string) *db.Drift {
	d.init()
	k := [3]string{field, change, detail}
	if e, ok := d.acc[k]; ok {
		e.Count++
		return e
	}
	e := &db.Drift{Field: field, Change: change, Detail: detail, Example: example, Count: 1}
	d.acc[k] = e
	return e
}

// Entries lists the differences counted, sorted.
func (d *Drift) Entries() []db.Drift {
	out := make([]db.Drift, 0, len(d.acc))
	for _, e := range d.acc {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(x, y db.Drift) int {
		return strings.Compare(x.Field+x.Change+x.Detail, y.Field+y.Change+y.Detail)
	})
	return out
}

// Row checks a record (rec, parsed from raw) and makes its row, with its
// column values in values (len(Columns) of them; nil allocates). What it
// finds different from the table's expectations is counted in drift
// (nil: not counted). A record that cannot be written is an error.
func (t *Table) Row(rec erp.Record, raw json.RawMessage, values []any, drift *Drift) (db.Row, error) {
	if err := CheckRecord(rec); err != nil {
		return db.Row{}, err
	}
	id, ok, err := rec.Text("id")
	if err != nil {
		return db.Row{}, err
	}
	if !ok || id == "" {
		return db.Row{}, fmt.Errorf("record has no id")
	}
	if err := db.CheckKey("id", id); err != nil {
		return db.Row{}, err
	}
	if values == nil {
		values = make([]any, len(t.Columns))
	}
	if drift == nil {
		drift = &Drift{}
	}
	row := db.Row{ID: id, Values: values, Payload: raw, Hash: db.PayloadHash(raw), Labels: RecordLabels(rec)}
	nested := nestedCaches.Get().(*nestedCache)
	defer nestedCaches.Put(nested)
	nested.field = ""
	for i, c := range t.Columns {
		if c.Lenient {
			row.Values[i] = c.lenient(rec, nested, drift, id)
			continue
		}
		v, err := c.strict(rec)
		if err != nil {
			return db.Row{}, err
		}
		row.Values[i] = v
	}
	t.checkDrift(rec, row, drift)
	return row, nil
}

// knownRow is a row of a known page (answered byte for byte as in the
// last complete sweep, so the warehouse has it as it is): its id, and the
// money columns whose scale is watched, for drift; nothing is written.
func (t *Table) knownRow(rec erp.Record, values []any, drift *Drift) (db.Row, error) {
	id, ok, err := rec.Text("id")
	if err != nil || !ok {
		// Cannot be: the same bytes were usable in the last sweep.
		return db.Row{}, fmt.Errorf("record has no id")
	}
	for i, c := range t.Columns {
		if c.Type == Money && c.Scale != 0 {
			if values[i], err = MoneyField(rec, c.Field); err != nil {
				return db.Row{}, err
			}
		}
	}
	row := db.Row{ID: id, Values: values}
	t.checkDrift(rec, row, drift)
	return row, nil
}

// strict reads a strict column: a value that does not parse is an error.
func (c Column) strict(rec erp.Record) (any, error) {
	switch c.Type {
	case Money:
		return MoneyField(rec, c.Field)
	case Bool:
		v, ok, err := rec.Bool(c.Field)
		if err != nil || !ok {
			return nil, err
		}
		return v, nil
	default:
		v, ok, err := rec.Text(c.Field)
		if err != nil || !ok {
			return nil, err
		}
		return v, nil
	}
}

// lenient reads a lenient column: the value of the first of Field and Alt
// that the record has, parsed by the column's type; anything that does
// not parse is nil and a drift entry naming the column.
func (c Column) lenient(rec erp.Record, nested *nestedCache, drift *Drift, id string) any {
	raw, path, found := lookup(rec, c.Field, c.Alt, nested)
	if !found {
		drift.add(c.Field, driftUnusable, c.Name+" is NULL: the field is absent", "record "+id)
		return nil
	}
	kind := erp.Kind(raw)
	if kind == "null" {
		return nil
	}
	v, why := parseTyped(c.Type, raw, kind)
	if why != "" {
		drift.add(path, driftUnusable, c.Name+" is NULL: "+why, erp.Truncate(string(raw), 100))
		return nil
	}
	return v
}

// lookup finds the first of field and alts that rec has (an a.b path
// reads b of the object a): its raw value and which it was.
func lookup(rec erp.Record, field string, alts []string, nested *nestedCache) (json.RawMessage, string, bool) {
	for i := -1; i < len(alts); i++ {
		path := field
		if i >= 0 {
			path = alts[i]
		}
		outer, inner, isNested := strings.Cut(path, ".")
		if !isNested {
			if raw, ok := rec.Get(path); ok {
				return raw, path, true
			}
			continue
		}
		obj, ok := nested.object(rec, outer)
		if !ok {
			continue
		}
		if raw, ok := obj.Get(inner); ok {
			return raw, path, true
		}
	}
	return nil, "", false
}

// nestedCache keeps the object of a record's field parsed once for the
// record's columns that read inside it (the customer's id and name). Its
// list of fields is reused from record to record: the values read from
// the object are copies.
type nestedCache struct {
	field string
	obj   erp.Record
	ok    bool
}

var nestedCaches = gosync.Pool{New: func() any { return new(nestedCache) }}

func (n *nestedCache) object(rec erp.Record, field string) (erp.Record, bool) {
	if n.field == field && n.field != "" {
		return n.obj, n.ok
	}
	n.field, n.ok = field, false
	raw, present := rec.Get(field)
	if present && erp.Kind(raw) == "object" {
		obj, err := erp.ParseRecordReusing(raw, n.obj)
		n.obj, n.ok = obj, err == nil
	}
	return n.obj, n.ok
}

// parseISODate reads the one shape of a date value, YYYY-MM-DD, a day
// that exists in year 1 or later: the SQL backfill of typed columns
// (erp.typed_date) reads dates by the same rule. By hand, not a regular
// expression and time.Parse: it runs for every record's date.
func parseISODate(s string) (time.Time, bool) {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' {
		return time.Time{}, false
	}
	num := func(b string) (int, bool) {
		n := 0
		for i := range len(b) {
			if b[i] < '0' || b[i] > '9' {
				return 0, false
			}
			n = n*10 + int(b[i]-'0')
		}
		return n, true
	}
	y, okY := num(s[:4])
	m, okM := num(s[5:7])
	d, okD := num(s[8:])
	if !okY || !okM || !okD || y < 1 || m < 1 || m > 12 || d < 1 {
		return time.Time{}, false
	}
	t := time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC)
	if t.Day() != d { // the 31st of a 30-day month, February the 29th of a common year
		return time.Time{}, false
	}
	return t, true
}

// digitsOnly: raw is a non-empty run of ASCII digits.
func digitsOnly[T ~string | ~[]byte](raw T) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] < '0' || raw[i] > '9' {
			return false
		}
	}
	return len(raw) > 0
}

// rfc3339 is the one shape of a timestamp value (erp.typed_timestamp).
var rfc3339 = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})$`)

// pgOffset: the zone offset of an RFC 3339 time is one Postgres stores
// (at most 15:59 either way).
func pgOffset(s string) bool {
	if strings.HasSuffix(s, "Z") {
		return true
	}
	off := s[len(s)-5:]
	return off[:2] <= "15" && off[3:] <= "59"
}

// parseTyped parses a non-null value of a lenient column, exactly: it
// returns the value for pgx, or why it cannot. The SQL functions of
// migration 11 (erp.typed_*), which fill the typed columns of rows
// written before, follow the same rules; a test holds the two equal.
func parseTyped(t ColumnType, raw json.RawMessage, kind string) (any, string) {
	switch t {
	case Bool:
		switch kind {
		case "boolean":
			return string(raw) == "true", ""
		}
		return nil, "a JSON " + kind + ", not a boolean"
	case Date, Timestamp:
		if kind != "string" {
			return nil, "a JSON " + kind + ", not a string"
		}
		s, _ := erp.ScalarText(raw)
		if t == Date {
			d, ok := parseISODate(s)
			if !ok {
				return nil, "not a YYYY-MM-DD date"
			}
			return pgtype.Date{Time: d, Valid: true}, ""
		}
		ts, err := time.Parse(time.RFC3339Nano, s)
		if !rfc3339.MatchString(s) || err != nil || ts.Year() < 1 || !pgOffset(s) {
			return nil, "not an RFC 3339 time"
		}
		return ts, ""
	default:
		switch kind {
		case "string":
			s, _ := erp.ScalarText(raw)
			return s, ""
		case "number":
			// As Postgres prints the number (its scale, no exponent), so
			// a number reads the same here and in SQL. A JSON integer
			// without a sign (an id, mostly) prints as it is written: JSON
			// allows no leading zero.
			if digitsOnly(raw) {
				return string(raw), ""
			}
			d, err := decimal.NewFromString(string(raw))
			if err != nil {
				return nil, "a number that does not parse"
			}
			return d.StringFixed(max(-d.Exponent(), 0)), ""
		}
		return nil, "a JSON " + kind + ", not text"
	}
}

// checkDrift counts differences between the record and Expect, and
// money of another scale than expected.
func (t *Table) checkDrift(rec erp.Record, row db.Row, drift *Drift) {
	t.expect.Check(rec, row.ID, drift)
	// The scale is a property of each value, not of the shape.
	for i, c := range t.Columns {
		n, ok := row.Values[i].(pgtype.Numeric)
		if c.Type != Money || c.Scale == 0 || !ok {
			continue
		}
		if got := int(-n.Exp); got != c.Scale {
			text, _, _ := rec.Text(c.Field)
			drift.add(c.Field, "scale", fmt.Sprintf("expected %d fractional digits, got %d", c.Scale, max(got, 0)), text)
		}
	}
}

// shapeSeed makes shape hashes unpredictable from outside input.
var shapeSeed = maphash.MakeSeed()

// shapeOf hashes a record's field names with each value's JSON kind, in
// order: two records of one shape drift alike.
func shapeOf(rec erp.Record) uint64 {
	var h maphash.Hash
	h.SetSeed(shapeSeed)
	for i := range rec.Len() {
		key, val := rec.Field(i)
		h.Write(key)
		h.WriteByte(0)
		if len(val) > 0 {
			h.WriteByte(val[0]) // '{', '[', '"', 't', 'f', 'n', or a number's first byte
		}
	}
	return h.Sum64()
}
