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

// Sync walks the list route in a sweep: from the first page (or, for a
// cursor-paged route, from the page after the last one committed) to the
// last, each page (or group of pages during a bulk load) committed in one
// transaction with the checkpoint. When the sweep completes, the rows it
// did not see are marked deleted.
func (l *List) Sync(ctx context.Context, r *Run) error {
	cp, err := db.LoadCheckpoint(ctx, r.conn, r.key)
	if err != nil {
		return err
	}
	switch {
	case cp.SweepID != 0 && l.resumable():
		r.log.Info("resuming sweep", "sweep_id", cp.SweepID, "pages_done", cp.Pages, "rows_done", cp.Rows)
	case cp.SweepID != 0:
		// Only a cursor says where a sweep stopped; any other paging
		// starts over, and the unfinished sweep marks nothing.
		if err := db.AbandonSweep(ctx, r.conn, cp.SweepID); err != nil {
			return err
		}
		fallthrough
	default:
		if cp, err = l.startSweep(ctx, r); err != nil {
			return err
		}
	}
	restarted := false
	for {
		r.sweepID = cp.SweepID
		err := l.walk(ctx, r, &cp)
		var refused *erp.CursorRefusedError
		if errors.As(err, &refused) && !restarted {
			// A cursor the ERP no longer accepts (expired, or the ERP was
			// upgraded) cannot be repaired: start over once, and record it.
			r.log.Warn("saved cursor refused; starting a new sweep", "sweep_id", cp.SweepID, "pages_done", cp.Pages, "err", refused.Err)
			r.Note("sweep %d: the ERP refused the saved cursor after page %d (%v); started a new sweep", cp.SweepID, cp.Pages, refused.Err)
			if err := db.AbandonSweep(ctx, r.conn, cp.SweepID); err != nil {
				return err
			}
			if cp, err = l.startSweep(ctx, r); err != nil {
				return err
			}
			restarted = true
			continue
		}
		return err
	}
}

// startSweep begins a sweep from the first page; on a table without rows
// of the source it is a bulk load.
func (l *List) startSweep(ctx context.Context, r *Run) (db.Checkpoint, error) {
	has, err := l.table.db.HasRows(ctx, r.conn, r.target.Source)
	if err != nil {
		return db.Checkpoint{}, err
	}
	cp, err := db.StartSweep(ctx, r.conn, r.key, !has)
	if err == nil {
		r.log.Debug("sweep started", "sweep_id", cp.SweepID, "bulk_load", cp.BulkLoad)
	}
	return cp, err
}

// walk reads pages from a page source and hands them to a committer
// until the sweep's last page is committed or something fails.
func (l *List) walk(ctx context.Context, r *Run, cp *db.Checkpoint) error {
	var answers db.Answers
	if !cp.BulkLoad && cp.LastSweepID != 0 {
		var err error
		if answers, err = db.PageDigests(ctx, r.conn, r.key, cp.LastSweepID); err != nil {
			return err
		}
		if err := r.compareChanged(ctx, l.table.db, cp.LastSweepID); err != nil {
			return err
		}
	}
	known := l.knownPages(r.scope, answers)
	prepare := func(p *erp.Page) *preparedPage { return l.prepare(p, known, r.scope) }
	src := r.newPageSource(ctx, l.request(r.target, cp.Cursor), cp.Pages, prepare)
	defer src.close()
	c := &committer{run: r, list: l, sweep: cp, src: src}
	for {
		b, err := src.next(ctx, nil)
		if err != nil {
			return err
		}
		var last bool
		if cp.BulkLoad && src.prefetching() && !b.last {
			last, err = c.group(ctx, b)
		} else {
			last, err = b.last, c.page(ctx, b)
			src.release(b)
		}
		if err != nil || last {
			return err
		}
	}
}

// committer writes a sweep's pages: one page per transaction, or, during a
// bulk load, groups of pages in one COPY. Both end with the run's one
// bookkeeping.
type committer struct {
	run   *Run
	list  *List
	sweep *db.Checkpoint
	src   *pageSource
}

// page commits one page. In a bulk load it is COPYed straight into the
// table; a row that is there already (it moved behind the cursor and an
// earlier page loaded it) makes it write the page again, upserting.
func (c *committer) page(ctx context.Context, b *preparedPage) error {
	if b.known && c.run.mayHaveWritten(b.rows) {
		// This sweep wrote one of the page's rows already (it is listed on
		// an earlier page too): the page must be written after all, its
		// copy being the later one.
		c.list.reprepare(b)
	}
	err := c.write(ctx, newPageRows(b, nil), c.sweep.BulkLoad)
	if c.sweep.BulkLoad && db.IsUniqueViolation(err) {
		c.run.log.Debug("bulk load met an existing row; upserting this page", "sweep_id", c.sweep.SweepID)
		c.run.fellBack = true
		err = c.write(ctx, newPageRows(b, nil), false)
	}
	if err != nil {
		return fmt.Errorf("%s page %d: %w", c.list.Stream, b.number, err)
	}
	return nil
}

// write commits the pages of rows in one transaction: COPYed straight
// into the table (copyNew), or upserted (one page).
func (c *committer) write(ctx context.Context, rows *pageRows, copyNew bool) error {
	e := &bookkeeping{sweep: c.sweep, table: c.list.table.db}
	return c.run.commit(ctx, e, func(ctx context.Context, tx pgx.Tx) (model.RunStats, error) {
		sc := db.SweepScope{Scope: c.run.scope, SweepID: c.sweep.SweepID}
		var up db.UpsertResult
		var err error
		switch {
		case rows.pages[0].known:
			// Rows the warehouse has as they are: only seen (queued with
			// the bookkeeping's bookkeeping).
			e.seen = rows.ids()
			up.Unchanged = int64(len(rows.pages[0].rows))
		case copyNew:
			up.Inserted, err = c.list.table.db.CopyNew(ctx, tx, sc, rows)
		default:
			// A bulk load needs no seen-list: see markDeletions.
			up, err = c.list.table.db.Upsert(ctx, tx, sc, rows.pages[0].rows,
				db.UpsertOptions{TrackSeen: !c.sweep.BulkLoad, CountOthers: len(c.run.target.Logins) > 1})
			c.run.wrote(up.Changed)
		}
		// The pages a COPY took are known only once it ran: the bookkeeping
		// (checkpoint, rejected records, drift) covers exactly those.
		e.pages = rows.pages
		for _, p := range rows.pages {
			c.run.lists.observe(p, up.OthersListed)
		}
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
// bounds, in one transaction. It returns whether the sweep's last page
// was among them. A page that could not be fetched (or a stop) ends the
// group: the pages before it are committed, then its error is returned.
func (c *committer) group(ctx context.Context, first *preparedPage) (last bool, err error) {
	deadline := time.NewTimer(maxGroupAge)
	defer deadline.Stop()
	g := newPageRows(first, func(rows int) (*preparedPage, error) {
		if rows >= maxGroupRows {
			return nil, errNotYet
		}
		return c.src.next(ctx, deadline.C)
	})
	defer func() {
		for _, b := range g.pages {
			c.src.release(b)
		}
	}()
	err = c.write(ctx, g, true)
	if db.IsUniqueViolation(err) {
		// A row is there already (it moved behind the cursor): write the
		// group's pages one by one, each falling back to the upsert.
		c.run.fellBack = true
		for _, b := range g.pages {
			if err = c.page(ctx, b); err != nil {
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

// pageRows streams the rows of consecutive pages into one COPY. With
// pull, it asks for the next page only once the previous one is written
// out, and stops at the sweep's last page, when pull says errNotYet, or
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
		b, err := g.pull(g.rows)
		if err != nil {
			if !errors.Is(err, errNotYet) {
				g.pullErr = err
			}
			return false
		}
		g.pages, g.i = append(g.pages, b), -1
	}
	g.i++
	g.rows++
	return true
}

func (g *pageRows) Row() *db.Row { return &g.pages[len(g.pages)-1].rows[g.i] }

// ids lists the ids of the rows of the pages taken.
func (g *pageRows) ids() []string {
	var out []string
	for _, b := range g.pages {
		for _, r := range b.rows {
			out = append(out, r.ID)
		}
	}
	return out
}
