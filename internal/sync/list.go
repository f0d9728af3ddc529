package sync

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/maphash"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// ColumnType says how a typed column is read from a record.
type ColumnType int

const (
	Text ColumnType = iota
	Money
	Bool
)

// Column is a typed warehouse column filled from a top-level field.
type Column struct {
	Name  string // SQL column
	Field string // JSON field
	Type  ColumnType
	// Scale, for Money, is the number of fractional digits expected; a
	// value with another scale is stored as received and counted as drift.
	// 0 means no expectation.
	Scale int
}

// List is a stream read from one list route into one entity table:
// erp.<Stream>, keyed by (source, id), with the shared columns (payload,
// payload_hash, company_id, branch_id, first_seen_at, synced_at,
// deleted_at) and the typed Columns. Most streams are a List; adding one
// is a value of this type plus the migration of its table.
type List struct {
	Stream string     // the stream's name; its table is erp.<Stream>
	Path   string     // the list route; it may start with a {prefix} (see Target.Prefixes)
	Query  url.Values // filters sent with every page
	Paging erp.Paging // how the first page is asked for; answers' own paging is followed anyway
	// Permission is the ERP permission the route needs, as the API
	// reference names it ("" when it lists none).
	Permission string
	// Contract is what the reference says of the route's contract.
	Contract Contract
	// Schedule is the default schedule; "" is DefaultSchedule.
	Schedule string
	// Core lists are enabled when the configuration names no streams.
	Core    bool
	Columns []Column
	// Expect lists the top-level fields the stream expects with their JSON
	// kinds ("number|string"); differences are recorded as drift. null
	// matches any kind.
	Expect map[string]string
	// Month is the field whose YYYY-MM puts a record in a month for the
	// sums `erpsync verify` compares ("" : one total).
	Month string
	// History says whether the stream keeps the versions its rows replace
	// in erp.<Stream>_history (which its migration creates with CALL
	// erp.add_history('<Stream>')).
	History History
	// AfterWrite runs in a page's transaction when it inserted or updated
	// rows, with the ids of the page's rows (the currency rate history).
	AfterWrite func(ctx context.Context, tx pgx.Tx, scope model.Scope, ids []string) error

	table  *db.Table
	expect []expectedField // Expect, parsed once by Validate, sorted
}

type expectedField struct {
	field, spec string
	kinds       []string
}

// keepsHistory is whether a stream keeps history for the target: as
// configured, else its default.
func keepsHistory(t Target, name string, h History) bool {
	if h == NoHistory {
		return false
	}
	if on, ok := t.History[name]; ok {
		return on
	}
	return h == HistoryOn
}

// DefaultSchedule is the schedule of a stream that declares none.
const DefaultSchedule = "@every 30m"

// Name is the stream's name.
func (l *List) Name() string { return l.Stream }

// Info declares the list's route, table and columns.
func (l *List) Info() Info {
	info := Info{Route: "GET " + l.Path, Permission: l.Permission, Contract: l.Contract, Schedule: cmp.Or(l.Schedule, DefaultSchedule),
		Core: l.Core, History: l.History, Table: "erp." + l.Stream}
	for _, c := range l.Columns {
		if c.Type == Money {
			info.Money = append(info.Money, c.Name)
		} else {
			info.Typed = append(info.Typed, c.Name)
		}
	}
	return info
}

// Validate checks the definition and prepares its SQL; Catalog.Add calls it.
func (l *List) Validate() error {
	if !strings.HasPrefix(l.Path, "/") && !strings.HasPrefix(l.Path, "{") {
		return fmt.Errorf("path %q must start with / (or a {prefix})", l.Path)
	}
	cols := make([]string, len(l.Columns))
	for i, c := range l.Columns {
		if c.Name == "" || c.Field == "" {
			return errors.New("a column needs a Name and a Field")
		}
		cols[i] = c.Name
	}
	l.table = db.NewTable("erp."+l.Stream, cols...)
	l.expect = l.expect[:0]
	for field, spec := range l.Expect {
		l.expect = append(l.expect, expectedField{field: field, spec: spec, kinds: strings.Split(spec, "|")})
	}
	slices.SortFunc(l.expect, func(a, b expectedField) int { return strings.Compare(a.field, b.field) })
	return nil
}

// Table is the stream's warehouse table (after Validate).
func (l *List) Table() *db.Table { return l.table }

// resumable: only a cursor says where an interrupted sweep stopped.
func (l *List) resumable() bool { return l.Paging == erp.CursorPaged }

// request is the walk of the route for a source, from cursor ("" for the
// first page).
func (l *List) request(t Target, cursor string) erp.ListRequest {
	return erp.ListRequest{Path: t.Path(l.Path), Query: l.Query, Paging: l.Paging, PageSize: t.PageSize, Cursor: cursor}
}

// prepare checks and converts a page's records. It is pure CPU work, done
// on the fetching side of the pipeline while the previous page is written.
// A page known (answered byte for byte as in the last complete sweep, see
// knownPages) holds rows the warehouse has as they are: only their ids
// (for the seen-list) and drift are taken.
func (l *List) prepare(p *erp.Page, known knownPages) *batch {
	records, parsed := p.Records, p.Parsed
	b := &batch{received: len(records), rows: make([]db.Row, 0, len(records))}
	request := known.request(p)
	b.known = known.holds(request, p.Digest)
	index := make(map[string]int, len(records))
	drift := map[[3]string]*db.Drift{}
	shapes := map[uint64][]*db.Drift{}
	// One allocation for the typed values of the whole page.
	n := len(l.Columns)
	values := make([]any, len(records)*n)
	for i, raw := range records {
		var row db.Row
		var rec erp.Record
		var err error
		if b.known {
			rec = parsed[i]
			row, err = l.knownRow(rec, values[i*n:(i+1)*n:(i+1)*n])
		} else {
			row, rec, err = l.convert(p, i, values[i*n:(i+1)*n:(i+1)*n])
		}
		if err != nil {
			id, _, _ := rec.Text("id") // a zero Record has no id
			b.rejected = append(b.rejected, db.Rejected{RecordID: id, Reason: err.Error(), Record: raw})
			continue
		}
		l.checkDrift(rec, row, drift, shapes)
		// A record listed twice in one page keeps its last version: two
		// rows with one key in one INSERT would fail the whole page.
		if i, dup := index[row.ID]; dup {
			b.rows[i] = row
			addDrift(drift, "id", "duplicate", "listed twice on one page; the last copy kept", row.ID)
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
	// A page with rejected records is read in full every time, so that
	// each of them is counted and its last_seen kept current.
	if len(b.rejected) == 0 && known.on {
		b.digest = &db.PageDigest{Request: request, Answer: p.Digest}
	}
	return b
}

// reprepare turns a known page's batch into a full one, to be written.
func (l *List) reprepare(b *batch) {
	full := l.prepare(b.page, knownPages{})
	b.known, b.rows, b.rejected, b.drift = false, full.rows, full.rejected, full.drift
}

// knownRow is a row of a known page: its id, and the money columns whose
// scale is watched (for drift); nothing else is written.
func (l *List) knownRow(rec erp.Record, values []any) (db.Row, error) {
	id, ok, err := rec.Text("id")
	if err != nil || !ok {
		// Cannot be: the same bytes were usable in the last sweep.
		return db.Row{}, fmt.Errorf("record has no id")
	}
	for i, c := range l.Columns {
		if c.Type == Money && c.Scale != 0 {
			if values[i], err = MoneyField(rec, c.Field); err != nil {
				return db.Row{}, err
			}
		}
	}
	return db.Row{ID: id, Values: values}, nil
}

// knownPages are the pages of a stream's last complete sweep, by a digest
// of their request, with the digest of what the ERP answered then. The
// request's digest also covers the stream's definition and the run's
// scope, so a changed definition or scope knows no page.
type knownPages struct {
	on      bool   // the sweep records its pages (all but bulk loads' pages are looked up)
	context []byte // what the request digest covers besides the request
	answers map[[sha256.Size]byte][sha256.Size]byte
}

// digestVersion changes whenever the way records become rows changes: the
// pages a previous version recorded are then known no more.
const digestVersion = "2"

func (l *List) knownPages(sc model.Scope, answers map[[sha256.Size]byte][sha256.Size]byte) knownPages {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00", digestVersion, l.Stream, sc.Source, sc.Login, sc.CompanyID, sc.BranchID)
	for _, c := range l.Columns {
		fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00", c.Name, c.Field, c.Type, c.Scale)
	}
	return knownPages{on: true, context: h.Sum(nil), answers: answers}
}

func (k knownPages) request(p *erp.Page) [sha256.Size]byte {
	if !k.on {
		return [sha256.Size]byte{}
	}
	h := sha256.New()
	h.Write(k.context)
	h.Write([]byte(p.Request))
	return [sha256.Size]byte(h.Sum(nil))
}

func (k knownPages) holds(request, answer [sha256.Size]byte) bool {
	a, ok := k.answers[request]
	return ok && a == answer
}

// convert checks the page's record i and makes its row, typed values in
// values. The scanner's parse is used when it made one of the record.
func (l *List) convert(p *erp.Page, i int, values []any) (db.Row, erp.Record, error) {
	raw := p.Records[i]
	var rec erp.Record
	if p.Parsed != nil && p.Parsed[i].IsObject() {
		rec = p.Parsed[i]
	} else {
		var err error
		if rec, err = erp.ParseRecord(raw); err != nil {
			return db.Row{}, erp.Record{}, err
		}
	}
	if err := CheckRecord(rec); err != nil {
		return db.Row{}, rec, err
	}
	id, ok, err := rec.Text("id")
	if err != nil {
		return db.Row{}, rec, err
	}
	if !ok || id == "" {
		return db.Row{}, rec, fmt.Errorf("record has no id")
	}
	if err := db.CheckKey("id", id); err != nil {
		return db.Row{}, rec, err
	}
	row := db.Row{ID: id, Values: values, Payload: raw, Hash: sha256.Sum256(raw), Labels: RecordLabels(rec)}
	for i, c := range l.Columns {
		switch c.Type {
		case Money:
			v, err := MoneyField(rec, c.Field)
			if err != nil {
				return db.Row{}, rec, err
			}
			row.Values[i] = v
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

// checkDrift counts differences between the record and Expect. Records
// of a page almost always share one shape (the same fields with the same
// kinds): the fields are compared once per shape, and the other records
// of that shape add to the counts found.
func (l *List) checkDrift(rec erp.Record, row db.Row, acc map[[3]string]*db.Drift, shapes map[uint64][]*db.Drift) {
	if l.Expect == nil {
		return
	}
	shape := shapeOf(rec)
	if found, seen := shapes[shape]; seen {
		for _, d := range found {
			d.Count++
		}
	} else {
		var found []*db.Drift
		add := func(field, change, detail, example string) {
			found = append(found, addDrift(acc, field, change, detail, example))
		}
		for _, e := range l.expect {
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
			if key, val := rec.Field(i); l.Expect[string(key)] == "" {
				add(string(key), "added", erp.Kind(val), erp.Truncate(string(val), 100))
			}
		}
		shapes[shape] = found
	}
	// The scale is a property of each value, not of the shape.
	for i, c := range l.Columns {
		n, ok := row.Values[i].(pgtype.Numeric)
		if c.Type != Money || c.Scale == 0 || !ok {
			continue
		}
		if got := int(-n.Exp); got != c.Scale {
			text, _, _ := rec.Text(c.Field)
			addDrift(acc, c.Field, "scale", fmt.Sprintf("expected %d fractional digits, got %d", c.Scale, max(got, 0)), text)
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

// addDrift counts one difference in a page's drift and returns its entry.
func addDrift(acc map[[3]string]*db.Drift, field, change, detail, example string) *db.Drift {
	k := [3]string{field, change, detail}
	if d, ok := acc[k]; ok {
		d.Count++
		return d
	}
	d := &db.Drift{Field: field, Change: change, Detail: detail, Example: example, Count: 1}
	acc[k] = d
	return d
}
