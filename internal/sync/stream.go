// Package sync moves records from the ERP into the warehouse: stream
// definitions, sweeps with checkpoints, one-list runs and the run
// bookkeeping shared by all of them.
package sync

import (
	"context"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
)

// Paging is how a stream walks its route.
type Paging int

const (
	// CursorPages: page_size, then cursor=next_cursor while has_next; one
	// transaction and checkpoint per page.
	CursorPages Paging = iota
	// OneList: the whole list in one answer (DRF next links followed), one
	// transaction per run.
	OneList
	// DataTablesList: start/length/draw pages, written as one list.
	DataTablesList
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

// Stream is one kind of record pulled from a source. Adding a stream is a
// value of this type plus the migration of its table.
type Stream struct {
	Name    string
	Path    string
	Query   url.Values
	Paging  Paging
	Table   *db.Table
	Columns []Column
	// Expect lists the top-level fields the stream expects with their JSON
	// kinds ("number|string"); differences are recorded as drift. null
	// matches any kind.
	Expect map[string]string
	// AfterUpsert runs in the write transaction after rows were inserted
	// or updated, while the staging table holds exactly those rows (the
	// currency rate history).
	AfterUpsert func(ctx context.Context, tx pgx.Tx, source string) error
	// Custom, when set, replaces the list machinery: snapshots and
	// streams that fan out into one request per document or cashbox.
	// Such a stream has no Table.
	Custom func(ctx context.Context, x *streamRun) error

	expect []expectedField // Expect, parsed once at Register, sorted
}

type expectedField struct {
	field, spec string
	kinds       []string
}

var registry = map[string]*Stream{}

// Register adds a stream; called from init of the file that defines it.
func Register(s *Stream) {
	cols := make([]string, len(s.Columns))
	for i, c := range s.Columns {
		cols[i] = c.Name
	}
	if s.Custom == nil {
		s.Table = db.NewTable("erp."+s.Name, cols...)
	}
	for field, spec := range s.Expect {
		s.expect = append(s.expect, expectedField{field: field, spec: spec, kinds: strings.Split(spec, "|")})
	}
	slices.SortFunc(s.expect, func(a, b expectedField) int { return strings.Compare(a.field, b.field) })
	registry[s.Name] = s
}

// Lookup returns a registered stream.
func Lookup(name string) (*Stream, bool) {
	s, ok := registry[name]
	return s, ok
}

// Names lists the registered streams, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
