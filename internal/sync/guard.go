package sync

import (
	"bytes"
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
)

// Deletions are rows a complete read of a stream found gone, not yet
// marked: the deletion guard decides whether to mark them now.
type Deletions struct {
	Rows   int64                  // how many rows are gone
	Live   int64                  // the stream's live rows before marking, these included
	Digest func() ([]byte, error) // names which rows (asked only when holding)
	Mark   func() (int64, error)  // marks them deleted, returning how many
}

// The deletion guard: a read that would leave a stream with no live rows,
// whatever its size, or that finds more than half of them gone (and more
// than guardMinRows), is more likely an ERP answering wrong (an empty
// list, a broken filter, a permission withdrawn) than the books deleted:
// a small list such as the cashboxes is emptied by one empty answer.
// Such a deletion is held until guardConfirmations further complete reads
// find the very same rows gone, or an operator confirms it.
const (
	guardMinRows       = 10
	guardConfirmations = 2
)

// guardHolds is the guard's one rule: whether d is too much to mark on
// one read's word.
func guardHolds(d Deletions) bool {
	return d.Rows > 0 && (d.Rows == d.Live || d.Rows > guardMinRows && d.Rows*2 > d.Live)
}

// MarkGone marks d's rows deleted, or holds them by the deletion guard's
// rule, and returns how many it marked. It runs in the transaction that
// completes the read: a stream of its own calls it in its last Commit.
func (r *Run) MarkGone(ctx context.Context, tx pgx.Tx, d Deletions) (int64, error) {
	cp, err := db.LoadCheckpoint(ctx, tx, r.scope.Key)
	if err != nil {
		return 0, err
	}
	mark := func() (int64, error) {
		if cp.Held.Rows > 0 { // what was held is marked, or gone no more
			if err := db.SetHeld(ctx, tx, r.scope.Key, db.Held{}); err != nil {
				return 0, err
			}
		}
		if d.Rows == 0 {
			return 0, nil
		}
		return d.Mark()
	}
	if !guardHolds(d) {
		return mark()
	}
	if r.runner.ConfirmDeletions {
		r.Note("%d of %d live rows gone: marked deleted, as the operator confirmed", d.Rows, d.Live)
		return mark()
	}
	digest, err := d.Digest()
	if err != nil {
		return 0, err
	}
	held := cp.Held
	if held.Rows == d.Rows && bytes.Equal(held.Digest, digest) {
		held.Sweeps++
	} else {
		held = db.Held{Rows: d.Rows, Digest: digest, Sweeps: 1, Since: time.Now()}
	}
	if held.Sweeps > guardConfirmations {
		r.log.Warn("held deletion confirmed by consecutive complete sweeps; marking", "rows", d.Rows, "sweeps", held.Sweeps)
		r.Note("%d of %d live rows gone in %d complete sweeps in a row since %s: marked deleted", d.Rows, d.Live,
			held.Sweeps, held.Since.UTC().Format(time.RFC3339))
		return mark()
	}
	if err := db.SetHeld(ctx, tx, r.scope.Key, held); err != nil {
		return 0, err
	}
	r.held = held.Rows
	r.log.Warn("deletion held: too many live rows gone at once", "rows", d.Rows, "live", d.Live,
		"sweeps_agreeing", held.Sweeps, "applied_after", guardConfirmations+1)
	r.Note("deletion held: %d of %d live rows gone (sweep %d of %d that must agree; or confirm with erpsync sync --confirm-deletions %s)",
		d.Rows, d.Live, held.Sweeps, guardConfirmations+1, r.scope.Stream)
	return 0, nil
}
