package sync

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// Follow runs read only what is new in a paged list since the last read,
// between complete sweeps, and write it; they never mark a row deleted.
// Neither the API reference nor a read-only client can tell what a cursor
// encodes (a position in the list, or the last key seen), so a follow
// proves, with what it reads, that it missed nothing, whichever it is:
//
//   - A list whose complete sweeps listed ids strictly ascending takes new
//     records last. A follow asks again for the last non-empty page read
//     (an anchor: its cursor or start, kept by the login's ledger) and
//     reads on while the list says there is more. Continuity is proved
//     only when that page begins with an id the warehouse holds and no
//     higher than the highest the login has read; else an older anchor is
//     tried (the records of the last page may be gone).
//   - A list whose sweeps listed ids strictly descending takes new records
//     first. A follow reads from the first page and stops at a page whose
//     records were all stored, unchanged, before the run began.
//   - Every page must keep the list's order. After a follow of several
//     pages, each page but the last is asked for again (a second look): a
//     record not in the warehouse within the ids read means the list
//     shifted under the reader (a deletion inside a page read moves a
//     record across a page boundary when cursors are positions), and the
//     follow is repeated a few times.
//
// A follow that cannot prove continuity says why (its verdict); the run
// then reads the whole list instead (see List.followRun).
type follow struct {
	run    *Run
	list   *List
	ledger *ledger
	order  model.Order
	at     db.Anchor // where the walk starts: an anchor, or the first page
	high   string    // sort key of the highest id the login had read
	// read is when the login's last complete read of the list (a follow
	// run or a sweep) ended: what was stored by then holds everything
	// below it. A row stored since, by a run that was stopped before it
	// read on, or by this run, proves nothing.
	read time.Time
	// first: the next page admitted is the walk's first; trail follows
	// the order of the ids admitted.
	first bool
	trail orderTrail
	state followState // as committed
}

// followState is what a follow's walk committed: the login's anchors
// (newest first), the pages it walked, in order, and the number of the
// last.
type followState struct {
	anchors, walked []db.Anchor
	last            int64
}

// followRepeats bounds how many times a follow whose second look differed
// is made again before the run reads the whole list.
const followRepeats = 3

// followAnchors is how many of the login's anchors, newest first, a follow
// tries: the records of the last page or two read may be gone; past that,
// reading on from far back costs as much as the complete sweep it would
// replace, which also decides deletions.
const followAnchors = 3

// follow follows the list in order, repeating a follow whose second look
// differs; it returns why the run must read the whole list instead (""
// when it need not).
func (l *List) follow(ctx context.Context, r *Run, lg *ledger, cp db.Checkpoint, order model.Order) (string, error) {
	read := lg.kept.LastFollow
	if cp.LastCompleted.After(read) {
		read = cp.LastCompleted
	}
	for attempt := 0; ; attempt++ {
		// Each attempt starts where the run started: a repeat reads again
		// what the second look found changed.
		p := &follow{run: r, list: l, ledger: lg, order: order, high: lg.kept.MaxKey, read: read,
			state: followState{anchors: lg.kept.Anchors}}
		why, err := l.followOnce(ctx, p)
		if err != nil || why != "" {
			return why, err
		}
		differ, err := l.secondLook(ctx, r, p.state.walked)
		if err == nil && differ == "" {
			err = placeChanges(ctx, r.conn, r.scope.Key, model.KindFollow, r.runID, order, p.state.last)
		}
		if err != nil || differ == "" {
			return "", err
		}
		if attempt == followRepeats {
			return fmt.Sprintf("the list changed under every second look (%d follows): %s", attempt+1, differ), nil
		}
		r.Note("follow: a second look differed (%s); following again", differ)
		r.log.Info("follow: a second look differed; following again", "why", differ)
	}
}

// followOnce walks once: a list in descending order from its first page,
// one in ascending order from its newest anchor that proves continuity.
func (l *List) followOnce(ctx context.Context, p *follow) (string, error) {
	if p.order == model.OrderDescending {
		p.first = true
		v, err := l.walk(ctx, p.run, p)
		return v.why, err
	}
	if len(p.state.anchors) == 0 {
		return "no anchor is kept to follow from", nil
	}
	why := ""
	for _, a := range slices.Clone(p.state.anchors[:min(len(p.state.anchors), followAnchors)]) {
		p.at, p.first, p.trail = a, true, orderTrail{}
		v, err := l.walk(ctx, p.run, p)
		switch refused := anchorRefused(err); {
		case refused != "":
			why = refused
		case err != nil:
			return "", err
		case v.why == "":
			return "", nil
		case !v.elsewhere:
			return v.why, nil
		default:
			why = v.why
		}
		p.run.log.Debug("follow: anchor not proved; trying an older one", "why", why)
	}
	return why, nil
}

func (p *follow) plan() walkPlan {
	// A follow of a list in descending order ends at a page the warehouse
	// had: a page fetched ahead of it would be asked for nothing.
	return walkPlan{request: p.list.requestAt(p.run.target, p.at), ahead: p.order != model.OrderDescending}
}

// admit checks that the page keeps the list's order and, for the first
// page read from an anchor, that it overlaps what the warehouse holds. A
// follow of a list in descending order ends at a page whose last record
// was stored, unchanged, by the end of the login's last complete read:
// every record after it in the list is older still (the order of every
// page is checked), so it was read then too, and the records before it on
// the page are written now. One request is then enough when at most a
// page is new. (The end of the last complete read, not the start of this
// run: a follow stopped after its first page stored records whose next
// page it never read.)
func (p *follow) admit(ctx context.Context, page *preparedPage) (admission, error) {
	first := p.first
	p.first = false
	if v := keepsOrder(&p.trail, page, p.order); v.why != "" {
		return admission{refused: v}, nil
	}
	switch {
	case first && p.order == model.OrderAscending:
		v, err := overlaps(ctx, p.run, p.list.Table, page, p.high, "the anchor")
		return admission{refused: v}, err
	case len(page.ids) == 0:
		return admission{}, nil
	case p.order == model.OrderDescending:
		last := page.ids[len(page.ids)-1]
		i := slices.IndexFunc(page.rows, func(r db.Row) bool { return r.ID == last })
		if i < 0 {
			return admission{}, nil
		}
		same, err := p.list.Table.db.SameBy(ctx, p.run.conn, p.run.scope.Source, []string{last}, [][]byte{page.rows[i].Hash[:]}, p.read)
		return admission{last: same == 1}, err
	}
	return admission{}, nil
}

// stage queues, with each page, the anchors after it and the highest id
// read. A follow ends no sweep.
func (p *follow) stage(statements *pgx.Batch, bk *book) staged {
	next := p.state
	next.walked = slices.Clone(next.walked)
	for _, page := range bk.pages {
		if len(page.ids) == 0 {
			continue
		}
		next.walked = append(next.walked, anchorOf(page))
		if p.order == model.OrderAscending {
			next.anchors = pushAnchor(next.anchors, anchorOf(page))
		}
	}
	next.last = bk.pages[len(bk.pages)-1].number
	p.ledger.followedPages(statements, next.anchors, p.trail.max)
	db.QueueChangePositions(statements, p.run.scope.Key, changedPage(model.KindFollow, p.run.runID, p.order, bk))
	return staged{adopt: func(context.Context, ended) { p.state = next }}
}

// secondLook asks again for each page of a follow but the last, and says
// what differs ("": nothing): a record the warehouse does not hold whose
// id lies within the ids the follow read was not read.
func (l *List) secondLook(ctx context.Context, r *Run, walked []db.Anchor) (string, error) {
	if len(walked) < 2 {
		return "", nil
	}
	var keys []string
	for _, w := range walked {
		for _, id := range w.IDs {
			keys = append(keys, idKey(id))
		}
	}
	if len(keys) == 0 {
		return "", nil
	}
	low, high := slices.Min(keys), slices.Max(keys)
	for _, w := range walked[:len(walked)-1] {
		v, err := l.walk(ctx, r, &look{run: r, list: l, at: w, low: low, high: high})
		if err != nil {
			return "", fmt.Errorf("%s: asking again for a page followed: %w", l.Name, err)
		}
		if v.why != "" {
			return v.why, nil
		}
	}
	return "", nil
}

// look is the reading of a second look at one page a follow read: it
// writes nothing, and refuses the page when it lists a record, within the
// ids the follow read (keys low to high), that the warehouse does not
// hold.
type look struct {
	run       *Run
	list      *List
	at        db.Anchor
	low, high string
}

func (k *look) plan() walkPlan {
	return walkPlan{request: k.list.requestAt(k.run.target, k.at), look: true}
}

func (k *look) admit(ctx context.Context, page *preparedPage) (admission, error) {
	var within []string
	for _, id := range page.ids {
		if key := idKey(id); key >= k.low && key <= k.high {
			within = append(within, id)
		}
	}
	stored, err := k.list.Table.db.Stored(ctx, k.run.conn, k.run.scope.Source, within)
	if err != nil {
		return admission{}, err
	}
	for _, id := range within {
		if !stored[id] {
			return admission{refused: verdict{why: fmt.Sprintf("record %s is listed among the ids read but was not read", id)}}, nil
		}
	}
	return admission{last: true}, nil
}

func (k *look) stage(*pgx.Batch, *book) staged { return staged{} }
