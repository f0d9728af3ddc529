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
// bookkeeping. What differs between ways of reading a list (a complete
// sweep, a follow run of what is new, a second look at pages read) is a
// reading: where the walk starts and how it writes, what a page must
// show before it is written, what each transaction records besides the
// rows, and how the last one ends. Each reading owns its state; the walk
// hands it each page and each transaction, and nothing else does.
type reading interface {
	// plan is where the walk starts and how it writes; asked once.
	plan() walkPlan
	// admit judges a fetched page before anything of it is written: the
	// walk writes it (ending there when the admission says last), or
	// ends without writing it when the reading refuses it.
	admit(ctx context.Context, page *preparedPage) (admission, error)
	// stage queues, in the batch of the transaction that writes bk's
	// pages, the reading's own statements, and returns what the reading
	// becomes once that transaction commits.
	stage(statements *pgx.Batch, bk *book) staged
}

// walkPlan is where a walk starts and how it writes.
type walkPlan struct {
	// request is the walk's first request; before counts the pages of
	// the same pass committed before it (for page numbers in messages).
	request erp.ListRequest
	before  int64
	// known are the pages whose rows need no comparing (zero: none).
	known knownPages
	// seenBy is the sweep whose seen-list records the ids written (0:
	// none; a bulk load needs none).
	seenBy int64
	// bulk: pages are COPYed straight into the table, in groups while
	// they arrive back to back.
	bulk bool
	// ahead: pages may be fetched ahead of the one being written; not
	// where the walk's end depends on what a page holds (each page
	// fetched ahead would be a request for nothing).
	ahead bool
	// look: the walk writes nothing; the reading only looks at pages.
	look bool
}

// admission is a reading's judgement of a page: refused (why) ends the
// walk without writing it; last ends the walk once it is written.
type admission struct {
	refused verdict
	last    bool
}

// verdict is why a reading refused a page: "" when it did not. A reading
// that cannot prove its ground (a follow run whose first page does not
// overlap what the warehouse holds) says so with a verdict, and whoever
// runs it decides what to do instead.
type verdict struct {
	why string
	// elsewhere: the refusal is about where the walk began; a walk that
	// begins elsewhere may be admitted.
	elsewhere bool
}

// staged is what a reading becomes once a transaction commits: last says
// the transaction ends the walk, and end then runs in it after the
// bookkeeping; adopt takes the reading's next state, with what end gave.
type staged struct {
	last  bool
	end   func(ctx context.Context, tx db.Tx, bk *book) (ended, error)
	adopt func(ctx context.Context, e ended)
}

// ended is what the end of a complete read did: when it completed, and
// how many rows it marked deleted.
type ended struct {
	at      time.Time
	deleted int64
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
	// newIDs are the ids of the rows it inserted (upserts only); updated
	// counts the rows it changed.
	newIDs  []string
	updated int64
}

// walk reads pages from a page source and hands them to a committer until
// the reading says the walk is done, the list ends, the reading refuses a
// page (its verdict), or something fails. The source checks for a stop
// before each page; page memory goes back to the pool once a page is
// committed.
func (l *List) walk(ctx context.Context, r *Run, rd reading) (verdict, error) {
	p := rd.plan()
	prepare := func(pg *erp.Page) *preparedPage { return l.prepare(pg, p.known, r.scope) }
	src := r.newPageSource(ctx, p.request, p.before, prepare, p.ahead)
	defer src.close()
	c := &committer{run: r, list: l, reading: rd, plan: p, src: src}
	for {
		page, err := src.next(ctx, nil)
		if err != nil {
			return verdict{}, err
		}
		adm, err := rd.admit(ctx, page)
		if err != nil || adm.refused.why != "" {
			src.release(page)
			return adm.refused, err
		}
		last := page.last || adm.last
		switch {
		case p.look:
			src.release(page)
		case p.bulk && src.prefetching() && !last:
			last, err = c.group(ctx, page)
		default:
			err = c.page(ctx, page)
			src.release(page)
		}
		if err != nil || last {
			return verdict{}, err
		}
	}
}

// committer writes a walk's pages: one page per transaction, or, during a
// bulk load, groups of pages in one COPY. Each transaction is a pagesUnit
// for Run.commit.
type committer struct {
	run     *Run
	list    *List
	reading reading
	plan    walkPlan
	src     *pageSource
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
	if page.known && (c.mayHaveWritten(page.rows) || c.plan.known.touched(page.rows)) {
		// This walk wrote one of the page's rows already (it is listed on
		// an earlier page too), or something else changed one since the
		// page was known: the page must be compared after all.
		c.list.reprepare(page)
	}
	err := c.run.commit(ctx, c.unit(newPageRows(page, nil), c.plan.bulk))
	if c.plan.bulk && db.IsUniqueViolation(err) {
		c.run.log.Debug("bulk load met an existing row; upserting this page")
		c.fellBack = true
		err = c.run.commit(ctx, c.unit(newPageRows(page, nil), false))
	}
	if err != nil {
		return fmt.Errorf("%s page %d: %w", c.list.Name, page.number, err)
	}
	return nil
}

// unit is the transaction that writes the pages of rows: COPYed straight
// into the table (copyNew), or upserted (one page).
func (c *committer) unit(rows *pageRows, copyNew bool) *pagesUnit {
	return &pagesUnit{committer: c, rows: rows, copyNew: copyNew}
}

// pagesUnit is one transaction of a walk: its pages' rows, then the
// reading's statements.
type pagesUnit struct {
	*committer
	rows    *pageRows
	copyNew bool
}

func (u *pagesUnit) write(ctx context.Context, tx db.Tx) (written, error) {
	bk := &book{fellBack: u.fellBack}
	var up db.UpsertResult
	var err error
	table := u.list.Table.db
	switch {
	case u.rows.pages[0].known:
		// Rows the warehouse has as they are: only seen (queued with the
		// reading's statements).
		bk.seen = u.rows.ids()
		up.Unchanged = int64(len(u.rows.pages[0].rows))
	case u.copyNew:
		up.Inserted, err = table.CopyNew(ctx, tx, u.run.scope, u.rows)
	default:
		up, err = table.Upsert(ctx, tx, u.run.scope, u.rows.pages[0].rows,
			db.UpsertOptions{SeenBy: u.plan.seenBy, CountOthers: len(u.run.target.Logins) > 1})
		u.wrote(up.Changed)
		bk.newIDs, bk.updated = up.New, up.Updated
	}
	// The pages a COPY took are known only once it ran: the bookkeeping
	// (the reading's statements, rejected records, drift) covers exactly
	// those.
	bk.pages, bk.othersListed = u.rows.pages, up.OthersListed
	if err != nil {
		return written{}, err
	}
	w := written{stats: model.RunStats{Inserted: up.Inserted, Updated: up.Updated, Unchanged: up.Unchanged}, statements: &pgx.Batch{},
		first: bk.pages[0].number, through: bk.pages[len(bk.pages)-1].number}
	for _, page := range bk.pages {
		w.stats.Pages++
		w.stats.Seen += int64(page.received)
		w.rejected = append(w.rejected, page.rejected...)
		w.drift = append(w.drift, page.drift...)
	}
	st := u.reading.stage(w.statements, bk)
	w.replayable, w.adopt = !st.last, st.adopt
	if st.end != nil {
		w.end = func(ctx context.Context, tx db.Tx) (ended, error) { return st.end(ctx, tx, bk) }
	}
	return w, nil
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
	err = c.run.commit(ctx, c.unit(g, true))
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
		return false, fmt.Errorf("%s pages %d-%d: %w", c.list.Name, first.number, g.pages[len(g.pages)-1].number, err)
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
