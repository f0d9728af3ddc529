package sync

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
)

// sweepList walks the list route in a complete sweep: from the first page
// (or, for a cursor-paged route, from the page after the last one
// committed) to the last, each page (or group of pages during a bulk
// load) committed in one transaction with the checkpoint. When the sweep
// completes, the rows it did not see are marked deleted.
func (l *List) sweepList(ctx context.Context, r *Run) error {
	cp, err := db.LoadCheckpoint(ctx, r.conn, r.scope.Key)
	if err != nil {
		return err
	}
	// Only a cursor says where a sweep stopped; any other paging starts
	// over, and the unfinished sweep marks nothing.
	if cp.SweepID != 0 && l.resumable() {
		r.log.Info("resuming sweep", "sweep_id", cp.SweepID, "pages_done", cp.Pages, "rows_done", cp.Rows)
	} else if cp, err = l.startSweep(ctx, r, cp); err != nil {
		return err
	}
	restarted := false
	for {
		s, err := l.newSweep(ctx, r, cp)
		if err == nil {
			err = l.walk(ctx, r, s)
		}
		var refused *erp.CursorRefusedError
		if errors.As(err, &refused) && !restarted {
			// A cursor the ERP no longer accepts (expired, or the ERP was
			// upgraded) cannot be repaired: start over once, and record it.
			cp = s.cp
			r.log.Warn("saved cursor refused; starting a new sweep", "sweep_id", cp.SweepID, "pages_done", cp.Pages, "err", refused.Err)
			r.Note("sweep %d: the ERP refused the saved cursor after page %d (%v); started a new sweep", cp.SweepID, cp.Pages, refused.Err)
			if cp, err = l.startSweep(ctx, r, cp); err != nil {
				return err
			}
			restarted = true
			continue
		}
		return err
	}
}

// startSweep begins a sweep from the first page in place of the one was
// has in progress, if any; on a table without rows of the source it is a
// bulk load.
func (l *List) startSweep(ctx context.Context, r *Run, was db.Checkpoint) (db.Checkpoint, error) {
	cp, err := db.StartSweep(ctx, r.conn, was, l.table.db)
	if err != nil {
		return db.Checkpoint{}, err
	}
	r.log.Debug("sweep started", "sweep_id", cp.SweepID, "bulk_load", cp.BulkLoad)
	return cp, nil
}

// sweep is the policy of a complete sweep: it starts where its checkpoint
// stands, records in every transaction the checkpoint past its pages,
// what their requests were answered with and what it learnt of the
// list's order, and ends, in the transaction of the last page, by marking
// deleted what it did not see.
type sweep struct {
	run   *Run
	list  *List
	cp    db.Checkpoint // where the sweep stands, as committed
	next  db.Checkpoint // where it stands once the transaction in flight commits
	pages knownPages
	lists listScope
	// trail follows the order of the ids listed; anchors are the last
	// non-empty pages read (newest first), for the follow runs after it;
	// missed counts the ids it inserted at or below the highest id a
	// follow had read when it began (records the follows missed).
	trail, nextTrail     orderTrail
	anchors, nextAnchors []db.Anchor
	missed, nextMissed   int64
}

// keptAnchors is how many anchors a login keeps: enough that the deletion
// of the records of the last page or two read leaves one to ask from.
const keptAnchors = 3

// newSweep is the policy of the sweep at cp, knowing the pages of the
// login's last complete sweep.
func (l *List) newSweep(ctx context.Context, r *Run, cp db.Checkpoint) (*sweep, error) {
	var answers db.Answers
	var changed []string
	if !cp.BulkLoad && cp.LastSweepID != 0 {
		var err error
		if answers, changed, err = l.table.db.KnownPages(ctx, r.conn, r.scope.Key, cp.LastSweepID); err != nil {
			return &sweep{cp: cp}, err
		}
	}
	r.sweepID = cp.SweepID
	s := &sweep{run: r, list: l, cp: cp, pages: l.knownPages(r.scope, answers, changed),
		trail: orderTrail{order: cp.Order, last: cp.LastID, max: cp.MaxKey}}
	if cp.Pages > 0 && cp.Order == "" && cp.LastID == "" {
		// A sweep begun by a release that did not follow the order of
		// ids: what its first pages listed is not known.
		s.trail.order = unordered
	}
	return s, nil
}

func (s *sweep) start() (erp.ListRequest, int64) {
	return s.list.request(s.run.target, s.cp.Cursor), s.cp.Pages
}

func (s *sweep) known() knownPages { return s.pages }

func (s *sweep) seenBy() int64 {
	if s.cp.BulkLoad {
		return 0
	}
	return s.cp.SweepID
}

func (s *sweep) bulk() bool { return s.cp.BulkLoad }

func (s *sweep) ahead() bool { return true }

func (s *sweep) admit(context.Context, *preparedPage) error { return nil }

func (s *sweep) done(context.Context, *preparedPage) (bool, error) { return false, nil }

// queue queues the ids seen of pages not written, the checkpoint past the
// pages (next moves on when the statements run), what their requests
// were answered with, and their bounds.
func (s *sweep) queue(statements *pgx.Batch, bk *book) bool {
	s.next, s.nextTrail, s.nextAnchors, s.nextMissed = s.cp, s.trail, s.anchors, s.missed
	progress := db.SweepProgress{Pages: int64(len(bk.pages)), Seen: bk.seen}
	for _, page := range bk.pages {
		s.lists.observe(page, bk.othersListed)
		progress.Rows += int64(len(page.rows))
		if page.digest != nil {
			progress.Digests = append(progress.Digests, *page.digest)
		}
		s.nextTrail.extend(page.ids)
		if len(page.ids) > 0 {
			if !s.cp.BulkLoad {
				progress.Bounds = append(progress.Bounds, db.Bound{Page: page.number, First: page.ids[0], Last: page.ids[len(page.ids)-1]})
			}
			at := page.at
			at.IDs = page.ids
			s.nextAnchors = pushAnchor(s.nextAnchors, at)
		}
	}
	if s.cp.FollowedKey != "" {
		for _, id := range bk.newIDs {
			if idKey(id) <= s.cp.FollowedKey {
				s.nextMissed++
			}
		}
	}
	end := bk.pages[len(bk.pages)-1]
	s.next.Cursor, s.next.Order, s.next.LastID, s.next.MaxKey = end.cursor, s.nextTrail.order, s.nextTrail.last, s.nextTrail.max
	db.QueueSweepProgress(statements, &s.next, s.next, progress)
	return end.last
}

// pushAnchor puts a as the newest of the anchors kept.
func pushAnchor(anchors []db.Anchor, a db.Anchor) []db.Anchor {
	out := append([]db.Anchor{a}, anchors...)
	return out[:min(len(out), keptAnchors)]
}

func (s *sweep) committed(ctx context.Context, freshAt time.Time) {
	bulkLoaded := !freshAt.IsZero() && s.cp.BulkLoad
	s.cp, s.trail, s.anchors, s.missed = s.next, s.nextTrail, s.nextAnchors, s.nextMissed
	if bulkLoaded {
		s.run.analyze(ctx, s.list.table.db, s.cp.Rows)
	}
	if !freshAt.IsZero() && s.missed > 0 {
		s.run.runner.obs().FollowMissed(s.run.target.Source, s.run.scope.Stream, s.run.scope.Login, s.missed)
	}
}

// end closes the sweep in the transaction of its last page: it marks the
// rows the sweep did not see deleted (unless it cannot be sure it saw
// them all), records what it showed of the list's order for the follow
// runs, and completes it, returning when.
func (s *sweep) end(ctx context.Context, tx pgx.Tx, bk *book) (freshAt time.Time, deleted int64, err error) {
	cp := s.next
	// The seen-list holds an id per row of each page read, unless Postgres
	// emptied it in a crash; a bulk load keeps none.
	var seen, distinct int64
	if !cp.BulkLoad {
		if seen, distinct, err = db.SeenCount(ctx, tx, cp.SweepID); err != nil {
			return freshAt, 0, err
		}
	}
	// The pages of this sweep are known to the next only if no id came
	// twice in it: a row listed on two pages ends as the later copy, so
	// the earlier page would not be as the warehouse has it (in a bulk
	// load, a second copy made the COPY fall back). Descending lists keep
	// none: a record added at their head moves every record after it, so
	// their pages are never answered the same twice.
	twice := distinct < cp.Rows
	if cp.BulkLoad {
		twice = bk.fellBack
	}
	keepDigests := !twice && cp.Order != descending
	if deleted, err = s.markDeletions(ctx, tx, cp, bk.pages[len(bk.pages)-1], seen, distinct); err != nil {
		return freshAt, 0, err
	}
	if s.list.follows() {
		f, err := db.LoadFollow(ctx, tx, cp.Key)
		if err != nil {
			return freshAt, 0, err
		}
		orders := append([]string{cmp.Or(cp.Order, "unknown")}, f.SweepOrders...)[:min(len(f.SweepOrders)+1, 2)]
		showed := db.Follow{SweepOrders: orders, ListOrder: listOrder(orders, f.DemotedWhy != ""), MaxKey: cp.MaxKey, Anchors: s.nextAnchors}
		if s.nextMissed > 0 {
			showed.DemotedWhy = fmt.Sprintf("sweep %d found %d records at or below the highest id follow runs had read, which they missed: the list is not followed until `erpsync reset %s`",
				cp.SweepID, s.nextMissed, cp.Key.Stream)
			s.run.Warn("%s", showed.DemotedWhy)
		}
		if err = db.SweepFollowed(ctx, tx, cp.Key, showed); err != nil {
			return freshAt, 0, err
		}
	}
	freshAt, err = db.CompleteSweep(ctx, tx, cp, s.lists.scope(), keepDigests)
	return freshAt, deleted, err
}

// markDeletions marks the rows of the run's scope that the completed
// sweep did not see, unless it cannot be sure it saw them all (seen and
// distinct: the ids its seen-list holds, and the distinct ones).
func (s *sweep) markDeletions(ctx context.Context, tx pgx.Tx, cp db.Checkpoint, end *preparedPage, seen, distinct int64) (int64, error) {
	r, table := s.run, s.list.table.db
	// A bulk load began on a table without rows of the source, so every
	// row there now was written by this sweep: nothing to mark.
	if cp.BulkLoad {
		return 0, nil
	}
	if seen != cp.Rows {
		// Postgres restarted during the sweep and emptied the UNLOGGED
		// seen-list: skipping is safe, guessing is not.
		r.log.Warn("sweep's seen-list was lost in a database restart; not marking deletions this time", "sweep_id", cp.SweepID)
		r.Note("sweep %d: deletions not marked (seen-list lost in a database restart)", cp.SweepID)
		return 0, nil
	}
	if end.total >= 0 {
		// The ERP said how long the list is. Pages read by offset can
		// skip a record when the list shifts between two of them: a sweep
		// that saw fewer records than stated marks nothing.
		if distinct < end.total {
			r.log.Warn("sweep saw fewer records than the ERP said the list holds; not marking deletions", "seen", distinct, "stated", end.total)
			r.Note("sweep %d: deletions not marked (the ERP stated %d records, the sweep saw %d)", cp.SweepID, end.total, distinct)
			return 0, nil
		}
	}
	gone, err := table.Gone(ctx, tx, r.scope, cp.SweepID, cp.SweepStarted)
	if err != nil {
		return 0, err
	}
	n := int64(len(gone))
	if n > 0 && end.cut {
		// The whole list was one answer without a paging signal, exactly
		// as long as a page: the rest may never have been read.
		r.Warn("%s, so the %d rows it no longer lists were not marked deleted", cutWarning(end.received), n)
		return 0, nil
	}
	var mark, held []string
	if n > 0 {
		if mark, held, err = s.moved(ctx, tx, cp, gone); err != nil {
			return 0, err
		}
	}
	if err := db.SetDeletionCandidates(ctx, tx, cp.Key, cp.SweepID, held); err != nil {
		return 0, err
	}
	if len(held) > 0 {
		r.Note("sweep %d: %d rows not listed where two of its pages meet (a record moves there when the list shifts while it is read) are marked deleted only if the next complete sweep misses them too",
			cp.SweepID, len(held))
	}
	return r.MarkGone(ctx, tx, Deletions{
		Rows:   int64(len(mark)),
		Live:   n + cp.Rows,
		Digest: func() ([]byte, error) { return idsDigest(mark), nil },
		Mark:   func() (int64, error) { return table.MarkDeleted(ctx, tx, r.scope.Source, mark) },
	})
}

// moved splits the rows a sweep did not see into those it may mark now
// and those it holds for the next sweep. A record moves between the pages
// of a list that shifts while it is read (a record deleted ahead of a
// position cursor pulls the next one back onto a page already read), and
// a sweep then misses it without its being gone. Where the sweep's pages
// listed ids in one strict order, a row whose id lies inside a page's
// range, or beyond the first or last page, was not where its neighbours
// were listed: it is gone. One whose id lies between two pages may have
// moved across that boundary: it is marked only if the last sweep held it
// too. Without a strict order, every row of a sweep of several pages is
// such a one. A sweep of one page cannot miss a record that moved.
func (s *sweep) moved(ctx context.Context, tx pgx.Tx, cp db.Checkpoint, gone []string) (mark, held []string, err error) {
	if cp.Pages <= 1 {
		return gone, nil, nil
	}
	var bounds []db.Bound
	if cp.Order == ascending || cp.Order == descending {
		if bounds, err = db.SweepBounds(ctx, tx, cp.SweepID); err != nil {
			return nil, nil, err
		}
	}
	before, err := db.DeletionCandidates(ctx, tx, cp.Key)
	if err != nil {
		return nil, nil, err
	}
	for _, id := range gone {
		if bounds != nil && !betweenPages(id, bounds, cp.Order) || before[id] {
			mark = append(mark, id)
		} else {
			held = append(held, id)
		}
	}
	return mark, held, nil
}

// betweenPages reports whether an id lies between two consecutive pages of
// a sweep whose ids came in order (strictly between the last id of one and
// the first of the next).
func betweenPages(id string, bounds []db.Bound, order string) bool {
	for i := 1; i < len(bounds); i++ {
		low, high := bounds[i-1].Last, bounds[i].First
		if order == descending {
			low, high = high, low
		}
		if compareIDs(low, id) < 0 && compareIDs(id, high) < 0 {
			return true
		}
	}
	return false
}

// idsDigest names a set of ids (for the deletion guard): the sha256 of
// the ids sorted by their bytes, one per line.
func idsDigest(ids []string) []byte {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sum := sha256.Sum256([]byte(strings.Join(sorted, "\n")))
	return sum[:]
}

// listScope gathers what a sweep shows of the stream's lists: records of
// other branches (their own labels say so), or rows another login of the
// source listed first, mean the lists hold the whole company's records
// (every login of the company reads each one); records all carrying the
// login's own branch mean the branch's. Without labels, a login that
// lists rows no other login does cannot tell which: nothing is said.
type listScope struct {
	companyWide bool // evidence of company-wide lists
	labelled    int  // records with their own labels
}

func (l *listScope) observe(page *preparedPage, othersListed int64) {
	l.companyWide = l.companyWide || page.otherBranch > 0 || othersListed > 0
	l.labelled += page.labelled
}

// scope is what the sweep showed: "company", "branch", or "".
func (l listScope) scope() string {
	switch {
	case l.companyWide:
		return "company"
	case l.labelled > 0:
		return "branch"
	}
	return ""
}
