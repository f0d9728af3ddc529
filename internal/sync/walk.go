package sync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// A walk is one pass over a list route's pages: a page source fetches and
// prepares them (ahead of the writer), a committer writes each page, or a
// group of pages during a bulk load, in one transaction with the walk's
// bookkeeping. What differs between a complete sweep and a follow run is
// a policy: where the walk starts, what each transaction records besides
// the rows, what a page must show before it is written, and when the walk
// is done.
type policy interface {
	// start is the walk's first request and how many pages of the same
	// pass were committed before it (for page numbers in messages).
	start() (erp.ListRequest, int64)
	// known are the pages whose rows need no comparing (off: none).
	known() knownPages
	// seenBy is the sweep whose seen-list records the ids written (0:
	// none; a bulk load needs none, see markDeletions).
	seenBy() int64
	// bulk reports whether pages are COPYed straight into the table, in
	// groups while they arrive back to back.
	bulk() bool
	// ahead reports whether pages may be fetched ahead of the one being
	// written: not where the walk's end depends on what a page holds
	// (each page fetched ahead would be a request for nothing).
	ahead() bool
	// admit checks a fetched page before it is written; an error ends
	// the walk with nothing of the page written.
	admit(ctx context.Context, page *preparedPage) error
	// queue queues, in the batch of a transaction writing book's pages,
	// the policy's statements, and reports whether the pages end the walk;
	// end then runs in the same transaction.
	queue(statements *pgx.Batch, book *book) (last bool)
	end(ctx context.Context, tx pgx.Tx, book *book) (freshAt time.Time, deleted int64, err error)
	// committed is told that the transaction committed.
	committed(ctx context.Context, freshAt time.Time)
	// done reports, after page b was committed, whether the walk ends
	// there (besides the end of the list).
	done(ctx context.Context, page *preparedPage) (bool, error)
}

// book is what one transaction of a walk writes: its pages, and the ids of
// known pages (their rows not written, only seen).
type book struct {
	pages []*preparedPage
	seen  []string
	// othersListed counts the rows written that another login of the
	// source listed first.
	othersListed int64
	// fellBack: the walk met, in a COPY, a row it had written already
	// (the same id on two pages).
	fellBack bool
	// newIDs are the ids of the rows it inserted (upserts only).
	newIDs []string
}

// walk reads pages from a page source and hands them to a committer until
// the policy says the walk is done, the list ends, or something fails. The
// source checks for a stop before each page; page memory goes back to the
// pool once a page is committed.
func (l *List) walk(ctx context.Context, r *Run, p policy) error {
	known := p.known()
	prepare := func(pg *erp.Page) *preparedPage { return l.prepare(pg, known, r.scope) }
	req, before := p.start()
	src := r.newPageSource(ctx, req, before, prepare, p.ahead())
	defer src.close()
	c := &committer{run: r, list: l, policy: p, src: src, known: known}
	for {
		page, err := src.next(ctx, nil)
		if err != nil {
			return err
		}
		if err := p.admit(ctx, page); err != nil {
			src.release(page)
			return err
		}
		var last bool
		if p.bulk() && src.prefetching() && !page.last {
			last, err = c.group(ctx, page)
		} else {
			last, err = page.last, c.page(ctx, page)
			if err == nil && !last {
				last, err = p.done(ctx, page)
			}
			src.release(page)
		}
		if err != nil || last {
			return err
		}
	}
}

// committer writes a walk's pages: one page per transaction, or, during a
// bulk load, groups of pages in one COPY. Both end with the run's one
// bookkeeping and the policy's.
type committer struct {
	run    *Run
	list   *List
	policy policy
	src    *pageSource
	known  knownPages
	// written are the ids the walk wrote so far; a known page holding one
	// of them is not skipped (see page). Past maxWritten ids, no page is
	// skipped for the rest of the walk.
	written  map[string]struct{}
	skipOff  bool
	fellBack bool // a bulk load met a row it had written already
}

// page commits one page. In a bulk load it is COPYed straight into the
// table; a row that is there already (it moved behind the cursor and an
// earlier page loaded it) makes it write the page again, upserting.
func (c *committer) page(ctx context.Context, page *preparedPage) error {
	if page.known && (c.mayHaveWritten(page.rows) || c.known.touched(page.rows)) {
		// This walk wrote one of the page's rows already (it is listed on
		// an earlier page too), or something else changed one since the
		// page was known: the page must be compared after all.
		c.list.reprepare(page)
	}
	bulk := c.policy.bulk()
	err := c.write(ctx, newPageRows(page, nil), bulk)
	if bulk && db.IsUniqueViolation(err) {
		c.run.log.Debug("bulk load met an existing row; upserting this page")
		c.fellBack = true
		err = c.write(ctx, newPageRows(page, nil), false)
	}
	if err != nil {
		return fmt.Errorf("%s page %d: %w", c.list.Stream, page.number, err)
	}
	return nil
}

// write commits the pages of rows in one transaction: COPYed straight
// into the table (copyNew), or upserted (one page).
func (c *committer) write(ctx context.Context, rows *pageRows, copyNew bool) error {
	bk := &book{fellBack: c.fellBack}
	return c.run.commit(ctx, c.policy, bk, func(ctx context.Context, tx pgx.Tx) (model.RunStats, error) {
		var up db.UpsertResult
		var err error
		switch {
		case rows.pages[0].known:
			// Rows the warehouse has as they are: only seen (queued with
			// the policy's statements).
			bk.seen = rows.ids()
			up.Unchanged = int64(len(rows.pages[0].rows))
		case copyNew:
			up.Inserted, err = c.list.table.db.CopyNew(ctx, tx, c.run.scope, rows)
		default:
			up, err = c.list.table.db.Upsert(ctx, tx, c.run.scope, rows.pages[0].rows,
				db.UpsertOptions{SeenBy: c.policy.seenBy(), CountOthers: len(c.run.target.Logins) > 1})
			c.wrote(up.Changed)
			bk.newIDs = up.New
		}
		// The pages a COPY took are known only once it ran: the bookkeeping
		// (policy's statements, rejected records, drift) covers exactly
		// those.
		bk.pages, bk.othersListed = rows.pages, up.OthersListed
		if err == nil && c.list.AfterWrite != nil && up.Inserted+up.Updated > 0 {
			err = c.list.AfterWrite(ctx, tx, c.run.scope, rows.ids())
		}
		return model.RunStats{Inserted: up.Inserted, Updated: up.Updated, Unchanged: up.Unchanged}, err
	})
}

// Group commits of bulk loads: while pages arrive faster than they can
// be committed one by one, one COPY and one transaction take several
// pages, so Postgres is fed continuously instead of waiting on a commit
// and four round trips per page. A group is bounded in time and rows: a
// crash re-fetches at most the pages of one group.
const (
	maxGroupAge  = time.Second
	maxGroupRows = 10000
)

// group commits first and the pages that arrive after it, within the
// bounds, in one transaction. It returns whether the walk's last page
// was among them. A page that could not be fetched (or a stop) ends the
// group: the pages before it are committed, then its error is returned.
func (c *committer) group(ctx context.Context, first *preparedPage) (last bool, err error) {
	deadline := time.NewTimer(maxGroupAge)
	defer deadline.Stop()
	g := newPageRows(first, func(rows int) (*preparedPage, error) {
		if groupFull(rows) {
			return nil, errNotYet
		}
		return c.src.next(ctx, deadline.C)
	})
	defer func() {
		for _, page := range g.pages {
			c.src.release(page)
		}
	}()
	err = c.write(ctx, g, true)
	if db.IsUniqueViolation(err) {
		// A row is there already (it moved behind the cursor): write the
		// group's pages one by one, each falling back to the upsert.
		c.fellBack = true
		for _, page := range g.pages {
			if err = c.page(ctx, page); err != nil {
				return false, err
			}
		}
	} else if err != nil {
		return false, fmt.Errorf("%s pages %d-%d: %w", c.list.Stream, first.number, g.pages[len(g.pages)-1].number, err)
	}
	if g.pullErr != nil {
		return false, g.pullErr
	}
	return g.pages[len(g.pages)-1].last, nil
}

// groupFull reports whether a group that took rows rows takes no more
// pages: a crash re-fetches at most maxGroupRows rows (and a page).
func groupFull(rows int) bool { return rows >= maxGroupRows }

// maxWritten bounds the ids a walk remembers as written.
const maxWritten = 100_000

// wrote remembers ids the walk wrote.
func (c *committer) wrote(ids []string) {
	if c.skipOff || len(ids) == 0 {
		return
	}
	if c.written == nil {
		c.written = map[string]struct{}{}
	}
	for _, id := range ids {
		c.written[id] = struct{}{}
	}
	if len(c.written) > maxWritten {
		c.skipOff, c.written = true, nil
	}
}

// mayHaveWritten reports whether the walk may have written one of rows.
func (c *committer) mayHaveWritten(rows []db.Row) bool {
	if c.skipOff {
		return true
	}
	for _, row := range rows {
		if _, ok := c.written[row.ID]; ok {
			return true
		}
	}
	return false
}

// pageRows streams the rows of consecutive pages into one COPY. With
// pull, it asks for the next page only once the previous one is written
// out, and stops at the walk's last page, when pull says errNotYet, or
// at an error (kept in pullErr).
type pageRows struct {
	pages   []*preparedPage // rows come from the last one
	i       int             // current row in the last page; -1 before its first
	rows    int             // rows handed out so far
	pull    func(rows int) (*preparedPage, error)
	pullErr error
}

func newPageRows(first *preparedPage, pull func(rows int) (*preparedPage, error)) *pageRows {
	return &pageRows{pages: []*preparedPage{first}, i: -1, pull: pull}
}

func (g *pageRows) Next() bool {
	for g.i+1 >= len(g.pages[len(g.pages)-1].rows) {
		if g.pull == nil || g.pages[len(g.pages)-1].last {
			return false
		}
		next, err := g.pull(g.rows)
		if err != nil {
			if !errors.Is(err, errNotYet) {
				g.pullErr = err
			}
			return false
		}
		g.pages, g.i = append(g.pages, next), -1
	}
	g.i++
	g.rows++
	return true
}

func (g *pageRows) Row() *db.Row { return &g.pages[len(g.pages)-1].rows[g.i] }

// ids lists the ids of the rows of the pages taken.
func (g *pageRows) ids() []string {
	var out []string
	for _, page := range g.pages {
		for _, r := range page.rows {
			out = append(out, r.ID)
		}
	}
	return out
}
