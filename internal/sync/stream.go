// Package sync moves records from an ERP into the warehouse. A Stream
// says what to read and where it goes; this package supplies what every
// stream shares: the run (its lock, bookkeeping and panic guard), sweeps
// of list routes (a page source that fetches ahead, a committer that
// writes pages singly or in groups), and one transaction epilogue
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
//
// Sync reads the ERP through run.Client and writes only through
// run.Commit (a *List does both for a list route), so every write ends
// with the same epilogue. It returns nil only when everything the stream
// had to read was read and committed; the run then records the stream's
// data as fresh. Between commits it should return run.Stopped() when that
// is not nil, so a shutdown does not wait for the whole stream.
type Stream interface {
	Name() string
	Sync(ctx context.Context, run *Run) error
}

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

// Names lists the streams' names, sorted.
func (c *Catalog) Names() []string {
	out := make([]string, 0, len(c.byName))
	for n := range c.byName {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
