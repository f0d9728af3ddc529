// Package sync moves records from an ERP into the warehouse. A Stream
// says what to read and where it goes; this package supplies what every
// stream shares: the run (its lock, bookkeeping and panic guard), sweeps
// of list routes (a page source that fetches ahead, a committer that
// writes pages singly or in groups), and one transaction bookkeeping
// (checkpoint, deletions, rejected records, drift, counters) that every
// write ends with.
package sync

import (
	"context"
	"fmt"
	"regexp"
	"slices"
)

// Stream is one kind of record pulled from a source into the warehouse.
// It is its catalog entry: Info declares everything else erpsync needs to
// know of it, and it may also be a Prober and a Verifier.
//
// Sync reads the ERP through run.Client and writes only through
// run.Commit (a *List does both for a list route), so every write ends
// with the same bookkeeping. It returns nil only when everything the
// stream had to read was read and committed; the run then records the
// stream's data as fresh. Between commits it should return run.Stopped()
// when that is not nil, so a shutdown does not wait for the whole stream.
type Stream interface {
	Name() string
	Info() Info
	Sync(ctx context.Context, run *Run) error
}

// Info is what a stream declares of itself, besides how it syncs.
type Info struct {
	// Route is what it reads at the ERP, as the documentation shows it.
	Route string
	// Permission is what reading it needs, as the API reference names
	// it; "" when the reference lists none.
	Permission string
	// Contract says whether the API reference reviews the route's
	// contract.
	Contract Contract
	// Schedule is its default schedule (robfig/cron syntax).
	Schedule string
	// Follows says the stream can follow its list, reading only what is
	// new on Schedule and its whole list on SweepSchedule.
	Follows bool
	// SweepSchedule is the default schedule of its complete sweeps when it
	// Follows.
	SweepSchedule string
	// Core streams are enabled when the configuration names no streams.
	Core bool
	// History is whether its table has a history (versions Postgres
	// writes on every change).
	History History
	// Table is its warehouse table.
	Table string
	// Access is the rule by which scoped logins read Table (and its
	// history); the zero value is by company. Its migration puts the same
	// rule on the table (erp.apply_access), which a catalog test checks.
	Access Access
	// Money are its money columns (exact numeric), Typed its other typed
	// columns.
	Money, Typed []string
	// Settings are settings of its own, under streams.<name> in the file.
	Settings []Setting
}

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
// a value saying why (nil accepts any).
type Setting struct {
	Key, Default string
	Check        func(string) error
}

// History is whether a stream's table has a history table. Postgres
// writes its versions, on every change whoever makes it; the configuration
// (history, ERPSYNC_HISTORY) no longer turns them off, and only the
// schema's owner can (ALTER TABLE ... DISABLE TRIGGER guard_rows).
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
	name := s.Name()
	if !streamName.MatchString(name) {
		return fmt.Errorf("stream name %q: want lower-case letters, digits and '_', starting with a letter", name)
	}
	if _, dup := c.byName[name]; dup {
		return fmt.Errorf("stream %s is defined twice", name)
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
		if c.byName[n].Info().Core {
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
