// Package sync moves records from an ERP into the warehouse. A Stream
// says what to read and where it goes; this package supplies what every
// stream shares: the run (its lock, bookkeeping and panic guard), the walk
// of a list route (a page source that fetches ahead, a committer that
// writes pages singly or in groups) under one of two policies, a complete
// sweep or a follow run of what is new, the steps of every other stream,
// and one transaction bookkeeping (checkpoint, deletions, rejected
// records, drift, counters) that every write ends with.
//
// The package keeps the name sync although the standard library has one:
// it is what the product calls the work (erpsync sync, a sync run), and
// what operators read in traces and logs. Where both meet, the standard
// library's is imported as gosync.
package sync

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// Stream is one kind of record pulled from a source into the warehouse.
// It is its catalog entry: its Info declares everything erpsync needs to
// know of it, once, and it may also be a Prober and a Verifier. A stream
// is a *List (a list route mirrored into a table, walked by the engine),
// a *Fanout (one child per parent, which the engine pages and commits),
// or another Stepper (anything else, which yields steps the engine
// commits).
type Stream interface {
	Declared() Info
}

// Stepper is a stream that is not a list (one request per record, a
// snapshot, a report): it hands its work to the engine as steps, each what
// it read and how to write it. The stream reads the ERP through the Run's
// View (whose reads stop once a stop is asked for), reports unusable
// records with Run.Reject and drift with Run.Drift, and writes only in a
// step's Write. commit commits the step in a transaction of its own, ended
// by the bookkeeping every write shares (rejected records and drift
// stored, counters, progress, metrics), releases what the step held, and
// returns an error when the step failed or a stop was asked for: Steps
// returns that error as it is.
//
// Steps returns nil when everything the stream had to read was read and
// committed; the run then records the stream's data as fresh.
type Stepper interface {
	Stream
	Steps(ctx context.Context, r *Run, commit func(Step) error) error
}

// Step is one unit of a stream's work.
type Step struct {
	// Write writes the step's rows in its transaction and says what it
	// did; nil for a step that writes only its bookkeeping (records
	// rejected, drift).
	Write func(ctx context.Context, tx db.Tx) (model.RunStats, error)
	// Read counts what the step read, added to what Write says.
	Read model.RunStats
	// Hold is what the step's rows point into (View.ReadList); it is
	// released once the step is committed.
	Hold *Listed
}

// Info is what a stream declares of itself, besides how it syncs: each
// fact once. A zero field is its default.
type Info struct {
	// Name is the stream's name: in ERPSYNC_STREAMS, the configuration,
	// logs, metrics and erp.sync_runs.
	Name string
	// Route is what it reads at the ERP, as the documentation shows it (a
	// List writes its own from its path).
	Route string
	// Permission is what reading it needs, as the API reference names
	// it; "" when the reference lists none.
	Permission string
	// Contract says whether the API reference reviews the route's
	// contract.
	Contract Contract
	// Schedule is its default schedule (robfig/cron syntax); "" is
	// DefaultSchedule.
	Schedule string
	// Follows: the stream is a paged list, read in follow runs between
	// its complete sweeps (Runner.Follow), new records on Schedule and the
	// whole list on SweepSchedule (a List says so itself).
	Follows bool
	// SweepSchedule is the default schedule of its complete sweeps when it
	// Follows; "" is ScheduleDefault.
	SweepSchedule string
	// WindowSchedule is the default schedule of its window runs (a
	// re-read of its newest pages, Runner.Window) when it Follows; "" is
	// none.
	WindowSchedule string
	// Core streams are enabled when the configuration names no streams.
	Core bool
	// History is whether its table has a history (versions Postgres
	// writes on every change).
	History History
	// Table is the warehouse table it writes: an entity table whose rows
	// it writes as lists do (Table.Row, Run.Upsert), from which its money
	// columns and expected fields are taken and which `erpsync verify`
	// compares; or a table of a shape of its own (Table.Own), declared by
	// its name and money columns.
	Table *Table
	// Access is the rule by which scoped logins read its table (and its
	// history); the zero value is by company. Its migration puts the same
	// rule on the table (erp.apply_access), which a catalog test checks.
	Access Access
	// Month is the record field whose YYYY-MM groups the money sums
	// `erpsync verify` compares ("": one total per column).
	Month string
	// Settings are settings of its own, under streams.<name> in the file.
	Settings []Setting
}

// validateTable checks the stream's table, named as the stream when it
// does not say otherwise.
func (i *Info) validateTable() error {
	if i.Table == nil {
		return nil
	}
	if i.Table.Name == "" {
		i.Table.Name = i.Name
	}
	return i.Table.Validate()
}

// Declared is the Info itself: a stream that embeds its Info (a Fanout)
// declares it so.
func (i Info) Declared() Info { return i }

// TableName is the stream's warehouse table, schema-qualified ("" when it
// declares none).
func (i Info) TableName() string {
	if i.Table == nil {
		return ""
	}
	return "erp." + i.Table.Name
}

// MoneyColumns are the stream's money columns (exact numeric).
func (i Info) MoneyColumns() []string {
	if i.Table == nil {
		return nil
	}
	return i.Table.columnsOf(true)
}

// ScheduleDefault is the schedule of the stream where the configuration
// gives none.
func (i Info) ScheduleDefault() string { return cmp.Or(i.Schedule, DefaultSchedule) }

// SweepScheduleDefault is the schedule of the stream's complete sweeps
// where the configuration gives none.
func (i Info) SweepScheduleDefault() string { return cmp.Or(i.SweepSchedule, i.ScheduleDefault()) }

// DefaultSchedule is the schedule of a stream that declares none.
const DefaultSchedule = "@every 30m"

// Contract is what the API reference says of a route's contract (its
// flag x-erp-contract-reviewed): an unreviewed one may differ on the
// installation in use, so probe and status show which streams rest on
// one.
type Contract int

const (
	ContractNotStated  Contract = iota // the reference does not say
	ContractReviewed                   // reviewed
	ContractUnreviewed                 // unreviewed, or "preliminary"
)

func (c Contract) String() string {
	switch c {
	case ContractReviewed:
		return "reviewed"
	case ContractUnreviewed:
		return "unreviewed"
	}
	return "not stated"
}

// MarshalText writes the contract as its words, for --json.
func (c Contract) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// Setting is a setting of a stream's own, with its default; Check refuses
// a value saying why (nil accepts any). The configuration checks every
// value at start-up.
type Setting struct {
	Key, Default string
	Check        func(string) error
}

// IntSetting is a whole-number setting from min to max; a run reads it
// with Run.Int.
func IntSetting(key string, def, min, max int) Setting {
	return Setting{Key: key, Default: strconv.Itoa(def), Check: func(v string) error {
		_, err := parseInt(v, min, max)
		return err
	}}
}

func parseInt(v string, min, max int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		return 0, fmt.Errorf("not a whole number from %d to %d", min, max)
	}
	return n, nil
}

// History is whether a stream's table has a history table. Postgres
// writes its versions, on every change whoever makes it; only the
// schema's owner can stop that for a table (ALTER TABLE ... DISABLE
// TRIGGER guard_rows).
type History int

const (
	NoHistory History = iota // no history table
	HistoryOn                // a history table
)

// Validator is a Stream that can check its own definition; Catalog.Add
// calls it, so a mistake shows at start-up rather than in the first run.
type Validator interface {
	Validate() error
}

// Catalog is the set of streams a process knows, by name. It is built in
// one place (see package streams) and passed to whatever runs streams.
type Catalog struct {
	byName map[string]Stream
}

// NewCatalog returns a catalog holding streams.
func NewCatalog(streams ...Stream) (*Catalog, error) {
	c := &Catalog{byName: map[string]Stream{}}
	for _, s := range streams {
		if err := c.Add(s); err != nil {
			return nil, err
		}
	}
	return c, nil
}

var streamName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// Add adds a stream; its name must be new and valid, its definition valid.
func (c *Catalog) Add(s Stream) error {
	name := s.Declared().Name
	if !streamName.MatchString(name) {
		return fmt.Errorf("stream name %q: want lower-case letters, digits and '_', starting with a letter", name)
	}
	if _, dup := c.byName[name]; dup {
		return fmt.Errorf("stream %s is defined twice", name)
	}
	if _, list := s.(*List); !list {
		if _, steps := s.(Stepper); !steps {
			return fmt.Errorf("stream %s: a stream is a *sync.List or a sync.Stepper, not %T", name, s)
		}
	}
	if v, ok := s.(Validator); ok {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
	}
	c.byName[name] = s
	return nil
}

// Lookup returns the stream of that name.
func (c *Catalog) Lookup(name string) (Stream, bool) {
	s, ok := c.byName[name]
	return s, ok
}

// Core lists the core streams' names (Info.Core), sorted: the streams a
// source enables when its configuration names none.
func (c *Catalog) Core() []string {
	var out []string
	for _, n := range c.Names() {
		if c.byName[n].Declared().Core {
			out = append(out, n)
		}
	}
	return out
}

// Names lists the streams' names, sorted.
func (c *Catalog) Names() []string {
	out := make([]string, 0, len(c.byName))
	for n := range c.byName {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
