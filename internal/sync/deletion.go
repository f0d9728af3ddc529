package sync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// Deciding what is deleted. A read that saw everything a login lists (a
// complete sweep of a list, the access lists of every cashbox) ends, in
// its last transaction, by deciding which rows it found gone. It reads
// the evidence once (deletionEvidence), decides with one pure function
// (decideDeletions), and applies the decision. The function holds every
// rule: a read that may have missed records marks nothing, a record that
// may have moved between two pages is held for the next read, and the
// deletion guard holds a deletion too large to take on one read's word.

// idRange is the ids a read covered: a whole list, or the part of it from
// the lowest id a read of its newest pages read to its newest end, which
// the range leaves open (a deleted newest record is judged).
type idRange struct {
	whole bool
	from  string      // the lowest id read (not whole)
	order model.Order // the list's order (not whole)
}

// wholeList is the range of a read of the whole list.
var wholeList = idRange{whole: true}

// holds reports whether id lies in the range: at or above its lowest id
// (new records have the highest ids, whichever end of a list they are
// listed at). A part of a list that is not in a strict order holds
// nothing: only its order says where it ends.
func (r idRange) holds(id string) bool {
	switch {
	case r.whole:
		return true
	case r.order.Strict():
		return compareIDs(id, r.from) >= 0
	}
	return false
}

// deletionEvidence is everything a deletion is decided on.
type deletionEvidence struct {
	stream string  // the stream, for messages
	read   string  // what read, for messages: "sweep 12"
	within idRange // the ids the read covered
	// bulkLoad: the read began on a table without rows of the source, so
	// every row there now is one it wrote.
	bulkLoad bool
	// seenList: the read kept a seen-list (lists do), which holds seen
	// ids, distinct of them, one per row of the rows it committed.
	seenList             bool
	rows, seen, distinct int64
	pages                int64
	// stated is the list's length as the ERP said it (-1: not said).
	stated int64
	// cut is how many records the read's one answer held when it gave no
	// paging signal and may be a list cut at a default page size (0:
	// not cut; see mayBeCut).
	cut int
	// order and bounds: the order the read's ids came in, and the first
	// and last id of each of its pages (lists in a strict order).
	order  model.Order
	bounds []db.Bound
	// gone are the live rows the login decides, stored before the read
	// began, that it did not list; live counts the live rows it decides,
	// gone included.
	gone []string
	live int64
	// candidates are the rows the login's last read held for this one to
	// confirm; held is the deletion the guard holds.
	candidates map[string]bool
	held       db.Held
	// confirmed: an operator confirmed the deletions (sync
	// --confirm-deletions).
	confirmed bool
	now       time.Time
}

// deletionDecision is what a read decided: db.Deletions to apply, how
// many rows the guard holds, and what the run says of it.
type deletionDecision struct {
	db.Deletions
	heldRows int64
	said     []saying
}

// saying is something a decision says: a note in the run's record, with
// log attributes when it is also logged at WARN, or a warning (also shown
// by erpsync status until the next run that does not warn).
type saying struct {
	warning bool
	note    string
	log     string // logged at WARN with attrs ("": not logged apart)
	attrs   []any
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

// guardHolds is the guard's one rule: whether rows gone of live is too
// much to mark on one read's word.
func guardHolds(rows, live int64) bool {
	return rows > 0 && (rows == live || rows > guardMinRows && rows*2 > live)
}

// decideDeletions is the one deletion decision.
func decideDeletions(ev deletionEvidence) (d deletionDecision) {
	if ev.bulkLoad {
		return d
	}
	if ev.seenList && ev.seen != ev.rows {
		// Postgres restarted during the read and emptied the UNLOGGED
		// seen-list: skipping is safe, guessing is not.
		return d.say(saying{note: ev.read + ": deletions not marked (seen-list lost in a database restart)",
			log: "sweep's seen-list was lost in a database restart; not marking deletions this time", attrs: []any{"read", ev.read}})
	}
	if ev.stated >= 0 && ev.distinct < ev.stated {
		// Pages read by offset can skip a record when the list shifts
		// between two of them: a read that saw fewer records than stated
		// marks nothing.
		return d.say(saying{note: fmt.Sprintf("%s: deletions not marked (the ERP stated %d records, the sweep saw %d)", ev.read, ev.stated, ev.distinct),
			log: "sweep saw fewer records than the ERP said the list holds; not marking deletions", attrs: []any{"seen", ev.distinct, "stated", ev.stated}})
	}
	var gone []string
	for _, id := range ev.gone {
		if ev.within.holds(id) {
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 && ev.cut > 0 {
		// The whole list was one answer without a paging signal, exactly
		// as long as a page: the rest may never have been read.
		return d.say(saying{warning: true, note: fmt.Sprintf("%s, so the %d rows it no longer lists were not marked deleted", cutWarning(ev.cut), len(gone))})
	}
	mark, hold := moved(ev, gone)
	d.SetHold, d.Hold = ev.seenList, hold
	if len(hold) > 0 {
		d.say(saying{note: fmt.Sprintf("%s: %d rows not listed where two of its pages meet (a record moves there when the list shifts while it is read) are marked deleted only if the next complete sweep misses them too",
			ev.read, len(hold))})
	}
	return d.guard(ev, mark)
}

// moved splits the rows a read did not see into those it may mark now
// and those it holds for the next read. A record moves between the pages
// of a list that shifts while it is read (a record deleted ahead of a
// position cursor pulls the next one back onto a page already read), and
// a read then misses it without its being gone. Where the read's pages
// listed ids in one strict order, a row whose id lies inside a page's
// range, or beyond the first or last page, was not where its neighbours
// were listed: it is gone. One whose id lies between two pages may have
// moved across that boundary: it is marked only if the last read held it
// too. Without a strict order, every row of a read of several pages is
// such a one. A read of one page cannot miss a record that moved.
func moved(ev deletionEvidence, gone []string) (mark, hold []string) {
	if ev.pages <= 1 {
		return gone, nil
	}
	for _, id := range gone {
		if ev.order.Strict() && !betweenPages(id, ev.bounds, ev.order) || ev.candidates[id] {
			mark = append(mark, id)
		} else {
			hold = append(hold, id)
		}
	}
	return mark, hold
}

// betweenPages reports whether an id lies between two consecutive pages of
// a read whose ids came in order (strictly between the last id of one and
// the first of the next).
func betweenPages(id string, bounds []db.Bound, order model.Order) bool {
	for i := 1; i < len(bounds); i++ {
		low, high := bounds[i-1].Last, bounds[i].First
		if order == model.OrderDescending {
			low, high = high, low
		}
		if compareIDs(low, id) < 0 && compareIDs(id, high) < 0 {
			return true
		}
	}
	return false
}

// guard marks mark, or holds it by the deletion guard's rule.
func (d deletionDecision) guard(ev deletionEvidence, mark []string) deletionDecision {
	rows := int64(len(mark))
	take := func() deletionDecision {
		d.Mark = mark
		if ev.held.Rows > 0 { // what was held is marked, or gone no more
			d.SetHeld, d.Held = true, db.Held{}
		}
		return d
	}
	switch {
	case !guardHolds(rows, ev.live):
		return take()
	case ev.confirmed:
		d.say(saying{note: fmt.Sprintf("%d of %d live rows gone: marked deleted, as the operator confirmed", rows, ev.live)})
		return take()
	}
	digest := idsDigest(mark)
	held := ev.held
	if held.Rows == rows && bytes.Equal(held.Digest, digest) {
		held.Sweeps++
	} else {
		held = db.Held{Rows: rows, Digest: digest, Sweeps: 1, Since: ev.now}
	}
	if held.Sweeps > guardConfirmations {
		d.say(saying{note: fmt.Sprintf("%d of %d live rows gone in %d complete sweeps in a row since %s: marked deleted", rows, ev.live,
			held.Sweeps, held.Since.UTC().Format(time.RFC3339)),
			log: "held deletion confirmed by consecutive complete sweeps; marking", attrs: []any{"rows", rows, "sweeps", held.Sweeps}})
		return take()
	}
	d.SetHeld, d.Held, d.heldRows = true, held, held.Rows
	return d.say(saying{note: fmt.Sprintf("deletion held: %d of %d live rows gone (sweep %d of %d that must agree; or confirm with erpsync sync --confirm-deletions %s)",
		rows, ev.live, held.Sweeps, guardConfirmations+1, ev.stream),
		log: "deletion held: too many live rows gone at once", attrs: []any{"rows", rows, "live", ev.live,
			"sweeps_agreeing", held.Sweeps, "applied_after", guardConfirmations + 1}})
}

func (d *deletionDecision) say(s saying) deletionDecision {
	d.said = append(d.said, s)
	return *d
}

// idsDigest names a set of ids (for the deletion guard): the sha256 of
// the ids sorted by their bytes, one per line.
func idsDigest(ids []string) []byte {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sum := sha256.Sum256([]byte(strings.Join(sorted, "\n")))
	return sum[:]
}

// settleDeletions decides on ev and applies the decision with apply (in
// the read's last transaction), telling the run what it said; it returns
// how many rows were marked deleted.
func (r *Run) settleDeletions(ctx context.Context, ev deletionEvidence, apply func(context.Context, db.Deletions) (int64, error)) (int64, error) {
	ev.stream, ev.confirmed, ev.now = r.scope.Stream, r.runner.ConfirmDeletions, time.Now()
	d := decideDeletions(ev)
	for _, s := range d.said {
		switch {
		case s.warning:
			r.Warn("%s", s.note)
		default:
			if s.log != "" {
				r.log.Warn(s.log, s.attrs...)
			}
			r.Note("%s", s.note)
		}
	}
	r.result.held = d.heldRows
	return apply(ctx, d.Deletions)
}
