package sync

import (
	"context"
	"iter"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// Fanout is a stream of its own that reads one unit of work per parent: a
// record of a list at the ERP (the access list of each cashbox listed), a
// row of a warehouse table (the journal preview of each document), or a
// value the stream computes (the balance sheet of each month end). The
// stream says where its parents come from and how one child is read; the
// engine pages the parents, reads each child, commits it in a
// transaction of its own, stops between children when asked to and
// releases what each held. When its children are rows keyed by their
// parent (Children), the engine ends the read by marking deleted, through
// the one deletion decision, the children of the login's rows that it no
// longer listed.
type Fanout[P any] struct {
	Info
	// Parents yields the parents, a batch at a time (ListedParents,
	// StoredParents).
	Parents func(ctx context.Context, r *Run) iter.Seq2[[]P, error]
	// Child reads the child of one parent.
	Child func(ctx context.Context, r *Run, p P) (Child, error)
	// Before, when set, sees every child read before any is committed,
	// and returns those to commit: for a stream that must see them all to
	// know what to keep (they are held in memory until then).
	Before func(r *Run, children []Child) []Child
	// Children is the table of the children, keyed by their parent, whose
	// rows no longer listed are marked deleted (nil: none).
	Children *db.ChildTable
}

// Child is what reading one parent's child gave: the step that writes it
// (nil: nothing to write), and, for a stream with Children, the parent's
// key with the keys of the children it listed, or Kept when its children
// could not be read and are kept as they are.
type Child struct {
	Step   *Step
	Parent string
	Keys   []string
	Kept   bool
	// Value is what Before looks at of the child (the stream's own).
	Value any
}

// Validate checks the declaration's table; the catalog calls it.
func (f *Fanout[P]) Validate() error { return f.validateTable() }

// Steps pages the parents and commits each one's child, then, for a
// stream with Children, the deletions.
func (f *Fanout[P]) Steps(ctx context.Context, r *Run, commit func(Step) error) error {
	var listed db.ChildrenListed
	var held []Child
	for batch, err := range f.Parents(ctx, r) {
		if err != nil {
			return err
		}
		for _, p := range batch {
			if err := r.Stopped(); err != nil {
				return err
			}
			c, err := f.Child(ctx, r, p)
			if err != nil {
				return err
			}
			listed.Add(c.Parent, c.Keys, c.Kept)
			switch {
			case f.Before != nil:
				held = append(held, c)
			case c.Step != nil:
				if err := commit(*c.Step); err != nil {
					return err
				}
			}
		}
	}
	if f.Before != nil {
		for _, c := range f.Before(r, held) {
			if c.Step == nil {
				continue
			}
			if err := commit(*c.Step); err != nil {
				return err
			}
		}
	}
	if f.Children == nil {
		return nil
	}
	return commit(Step{Write: func(ctx context.Context, tx db.Tx) (model.RunStats, error) {
		n, err := f.markGone(ctx, r, tx, listed)
		return model.RunStats{Deleted: n}, err
	}})
}

// markGone decides and marks, in the read's last transaction, the
// children of the login's rows that the read no longer listed.
func (f *Fanout[P]) markGone(ctx context.Context, r *Run, tx db.Tx, listed db.ChildrenListed) (int64, error) {
	ev, err := f.Children.DeletionEvidence(ctx, tx, r.scope, listed)
	if err != nil {
		return 0, err
	}
	return r.settleDeletions(ctx, deletionEvidence{read: "the read", within: wholeList, stated: -1, gone: ev.Gone, live: ev.Live, held: ev.Held},
		func(ctx context.Context, d db.Deletions) (int64, error) {
			return f.Children.ApplyDeletions(ctx, tx, r.scope, d)
		})
}

// ListedParents are parents read from a list route of the ERP, a page at
// a time: pick makes a parent of each record (false: skipped).
func ListedParents[P any](req erp.ListRequest, pick func(Item) (P, bool)) func(ctx context.Context, r *Run) iter.Seq2[[]P, error] {
	return func(ctx context.Context, r *Run) iter.Seq2[[]P, error] {
		return func(yield func([]P, error) bool) {
			var batch []P
			for it, err := range r.Records(ctx, req) {
				if err != nil {
					yield(nil, err)
					return
				}
				if p, ok := pick(it); ok {
					batch = append(batch, p)
				}
			}
			yield(batch, nil)
		}
	}
}

// StoredParents are parents read from the warehouse a batch at a time, in
// a read-only transaction each: page reads the batch after the last
// parent of the one before (after nil: the first), at most limit.
func StoredParents[P any](limit int, page func(ctx context.Context, q db.Reader, sc model.Scope, after *P, limit int) ([]P, error)) func(ctx context.Context, r *Run) iter.Seq2[[]P, error] {
	return func(ctx context.Context, r *Run) iter.Seq2[[]P, error] {
		return func(yield func([]P, error) bool) {
			var after *P
			for {
				var batch []P
				err := r.Read(ctx, func(ctx context.Context, q db.Reader) (err error) {
					batch, err = page(ctx, q, r.scope, after, limit)
					return err
				})
				if !yield(batch, err) || err != nil || len(batch) < limit {
					return
				}
				after = &batch[len(batch)-1]
			}
		}
	}
}
