package sync

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
)

// fetched is a page read and prepared, ready to write.
type fetched struct {
	page   *erp.Page
	batch  batch
	cursor string // the cursor the page was requested with
	err    error
}

// cursorRefused is a 400 answer to a request that carried a cursor.
type cursorRefused struct {
	err  *erp.HTTPError
	page int64
}

func (e *cursorRefused) Error() string {
	return fmt.Sprintf("page %d: cursor refused: %v", e.page, e.err)
}

// cursorSweep walks the cursor pages from the checkpoint. Each page (or
// group of pages, in a bulk load) is one transaction with its checkpoint,
// so a crash anywhere loses at most the pages fetched but not committed.
func (x *streamRun) cursorSweep(ctx context.Context, stop <-chan struct{}) error {
	cp, err := db.LoadCheckpoint(ctx, x.conn, x.t.Source, x.s.Name)
	if err != nil {
		return err
	}
	if cp.SweepID == 0 {
		if cp, err = x.startSweep(ctx); err != nil {
			return err
		}
	} else {
		x.log.Info("resuming sweep", "sweep_id", cp.SweepID, "pages_done", cp.Pages, "rows_done", cp.Rows)
	}
	restarted := false
	for {
		x.sweepID = cp.SweepID
		err := x.walk(ctx, stop, &cp)
		var refused *cursorRefused
		if errors.As(err, &refused) && !restarted {
			he := refused.err
			// A cursor the ERP no longer accepts (expired, or the ERP was
			// upgraded) cannot be repaired: start over once, and record it.
			note := fmt.Sprintf("sweep %d: the ERP refused the saved cursor after page %d (%d %s); started a new sweep",
				cp.SweepID, cp.Pages, he.Status, he.Excerpt)
			x.log.Warn("saved cursor refused; starting a new sweep", "sweep_id", cp.SweepID, "pages_done", cp.Pages, "erp_said", he.Excerpt)
			x.notes = append(x.notes, note)
			if err := db.AbandonSweep(ctx, x.conn, cp.SweepID); err != nil {
				return err
			}
			if cp, err = x.startSweep(ctx); err != nil {
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
func (x *streamRun) startSweep(ctx context.Context) (db.Checkpoint, error) {
	has, err := x.s.Table.HasRows(ctx, x.conn, x.t.Source)
	if err != nil {
		return db.Checkpoint{}, err
	}
	cp, err := db.StartSweep(ctx, x.conn, x.t.Source, x.s.Name, !has)
	if err == nil {
		x.log.Debug("sweep started", "sweep_id", cp.SweepID, "bulk_load", cp.BulkLoad)
	}
	return cp, err
}

// walk fetches and writes pages until the sweep completes, a stop is
// asked for, or something fails. With Prefetch > 0 a goroutine fetches
// ahead through a bounded channel; pages are still committed in order.
func (x *streamRun) walk(ctx context.Context, stop <-chan struct{}, cp *db.Checkpoint) error {
	fctx, cancel := context.WithCancel(ctx)
	var wg gosync.WaitGroup
	defer wg.Wait()
	defer cancel()

	// next returns the next fetched page; false when there is none, or
	// when wait fires first (pipelined mode only).
	var next func(wait <-chan time.Time) (fetched, bool)
	if x.Prefetch <= 0 {
		cursor, done := cp.Cursor, false
		next = func(<-chan time.Time) (fetched, bool) {
			if done {
				return fetched{}, false
			}
			f := x.fetch(fctx, cursor)
			done = f.err != nil || !f.page.HasNext
			if !done {
				cursor = f.page.NextCursor
			}
			return f, true
		}
	} else {
		ch := make(chan fetched, x.Prefetch-1)
		wg.Go(func() {
			defer close(ch)
			cursor := cp.Cursor
			for {
				f := x.fetch(fctx, cursor)
				select {
				case ch <- f:
				case <-fctx.Done():
					return
				}
				if f.err != nil || !f.page.HasNext {
					return
				}
				cursor = f.page.NextCursor
			}
		})
		next = func(wait <-chan time.Time) (fetched, bool) {
			select {
			case f, ok := <-ch:
				return f, ok
			case <-stop:
				return fetched{err: errStopped}, true
			case <-wait:
				return fetched{}, false
			}
		}
	}

	for {
		select {
		case <-stop:
			return errStopped
		default:
		}
		f, ok := next(nil)
		if !ok {
			return nil
		}
		if f.err != nil {
			return x.fetchError(f, cp)
		}
		if cp.BulkLoad && x.Prefetch > 0 && f.page.HasNext {
			last, held, err := x.bulkGroup(ctx, cp, f, next)
			switch {
			case err != nil:
				return err
			case held != nil:
				return x.fetchError(*held, cp)
			case last:
				return nil
			}
			continue
		}
		last := !f.page.HasNext
		nextCursor := ""
		if !last {
			nextCursor = f.page.NextCursor
		}
		err := x.writePage(ctx, cp, f.batch, nextCursor, last)
		f.page.Release() // the batch points into the page; both are done with
		if err != nil {
			return fmt.Errorf("%s page %d: %w", x.s.Name, cp.Pages+1, err)
		}
		if last {
			return nil
		}
	}
}

// fetchError turns a failed fetch into the walk's error.
func (x *streamRun) fetchError(f fetched, cp *db.Checkpoint) error {
	if errors.Is(f.err, errStopped) {
		return errStopped
	}
	var he *erp.HTTPError
	if f.cursor != "" && errors.As(f.err, &he) && he.Status == http.StatusBadRequest {
		return &cursorRefused{err: he, page: cp.Pages + 1}
	}
	return fmt.Errorf("%s page %d: %w", x.s.Name, cp.Pages+1, f.err)
}

func (x *streamRun) fetch(ctx context.Context, cursor string) fetched {
	q := url.Values{}
	for k, v := range x.s.Query {
		q[k] = v
	}
	q.Set("page_size", strconv.Itoa(x.t.PageSize))
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	page, err := x.t.Client.List(ctx, x.s.Path, q)
	if err != nil {
		return fetched{cursor: cursor, err: err}
	}
	return fetched{page: page, batch: x.s.prepare(page.Records, page.Parsed), cursor: cursor}
}

// oneList fetches the whole list and writes it in one transaction: a
// sweep of one page.
func (x *streamRun) oneList(ctx context.Context) error {
	paging := erp.Paging{DataTables: x.s.Paging == DataTablesList, PageSize: x.t.PageSize}
	records, err := x.t.Client.ListAll(ctx, x.s.Path, x.s.Query, paging)
	if err != nil {
		return fmt.Errorf("%s: %w", x.s.Name, err)
	}
	b := x.s.prepare(records, nil)
	cp, err := db.StartSweep(ctx, x.conn, x.t.Source, x.s.Name, false)
	if err != nil {
		return err
	}
	x.sweepID = cp.SweepID
	if err := x.writePage(ctx, &cp, b, "", true); err != nil {
		return fmt.Errorf("%s: %w", x.s.Name, err)
	}
	return nil
}

// writePage commits one page: rows, checkpoint, rejected records, drift
// and, on the sweep's last page, the deletion marks, all in one
// transaction. cp is updated only after the commit.
func (x *streamRun) writePage(ctx context.Context, cp *db.Checkpoint, b batch, nextCursor string, last bool) error {
	err := x.commitPage(ctx, cp, b, nextCursor, last, cp.BulkLoad)
	if cp.BulkLoad && db.IsUniqueViolation(err) {
		// A row of this page is there already: it moved behind the
		// cursor and an earlier page loaded it. Write the page again,
		// upserting.
		x.log.Debug("bulk load met an existing row; upserting this page", "sweep_id", cp.SweepID)
		err = x.commitPage(ctx, cp, b, nextCursor, last, false)
	}
	return err
}

// commitPage is one attempt at writePage; copyNew COPYs the rows straight
// into the table (bulk load) instead of upserting them.
func (x *streamRun) commitPage(ctx context.Context, cp *db.Checkpoint, b batch, nextCursor string, last, copyNew bool) error {
	tx, err := x.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", db.Describe(err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	sc := x.scope
	sc.SweepID = cp.SweepID
	var up db.UpsertResult
	if copyNew {
		up.Inserted, err = x.s.Table.CopyNew(ctx, tx, sc, db.Rows(b.rows))
	} else {
		// A bulk load needs no seen-list: see finish.
		up, err = x.s.Table.Upsert(ctx, tx, sc, b.rows, !cp.BulkLoad)
	}
	if err != nil {
		return err
	}
	if x.s.AfterUpsert != nil && up.Inserted+up.Updated > 0 {
		if err := x.s.AfterUpsert(ctx, tx, x.t.Source); err != nil {
			return err
		}
	}
	return x.finish(ctx, tx, cp, []batch{b}, up, nextCursor, last)
}

// finish completes the transaction of one or more pages: checkpoint,
// deletion marks at the end of a sweep, rejected records, drift, commit,
// and the run's counters. cp is updated only after the commit.
func (x *streamRun) finish(ctx context.Context, tx pgx.Tx, cp *db.Checkpoint, batches []batch, up db.UpsertResult, nextCursor string, last bool) error {
	var rows, received int
	var rejected []db.Rejected
	var drift []db.Drift
	for _, b := range batches {
		rows += len(b.rows)
		received += b.received
		rejected = append(rejected, b.rejected...)
		drift = append(drift, b.drift...)
	}
	next := *cp
	if err := db.AdvanceCheckpoint(ctx, tx, &next, nextCursor, int64(len(batches)), int64(rows)); err != nil {
		return err
	}
	sc := x.scope
	sc.SweepID = cp.SweepID
	var deleted int64
	// A bulk load began on a table without rows of the source, so every
	// row there now was written by this sweep: nothing to mark deleted.
	if last && !next.BulkLoad {
		intact, err := db.SeenIntact(ctx, tx, next)
		if err != nil {
			return err
		}
		if intact {
			if deleted, err = x.s.Table.MarkDeleted(ctx, tx, sc); err != nil {
				return err
			}
		} else {
			// Postgres restarted during the sweep and emptied the
			// UNLOGGED seen-list: skipping is safe, guessing is not.
			x.log.Warn("sweep's seen-list was lost in a database restart; not marking deletions this time", "sweep_id", next.SweepID)
			x.notes = append(x.notes, fmt.Sprintf("sweep %d: deletions not marked (seen-list lost in a database restart)", next.SweepID))
		}
	}
	if last {
		if err := db.CompleteSweep(ctx, tx, next); err != nil {
			return err
		}
	}
	if err := db.InsertRejected(ctx, tx, x.t.Source, x.s.Name, x.runID, rejected); err != nil {
		return err
	}
	if err := db.RecordDrift(ctx, tx, x.t.Source, x.s.Name, mergeDrift(drift)); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", db.Describe(err))
	}
	*cp = next
	done := db.RunStats{Pages: int64(len(batches)), Seen: int64(received), Inserted: up.Inserted, Updated: up.Updated,
		Unchanged: up.Unchanged, Rejected: int64(len(rejected)), Deleted: deleted}
	x.stats.Add(done)
	x.obs().PageCommitted(x.t.Source, x.s.Name, done)
	if x.progress != nil {
		x.progress(x.stats)
	}
	if len(rejected) > 0 {
		x.log.Warn("records rejected", "count", len(rejected), "first_reason", rejected[0].Reason)
	}
	return nil
}

// mergeDrift adds up the drift of several pages: one upsert statement
// must not name the same row twice.
func mergeDrift(drift []db.Drift) []db.Drift {
	if len(drift) < 2 {
		return drift
	}
	at := map[[3]string]int{}
	var out []db.Drift
	for _, d := range drift {
		k := [3]string{d.Field, d.Change, d.Detail}
		if i, ok := at[k]; ok {
			out[i].Count += d.Count
			continue
		}
		at[k] = len(out)
		out = append(out, d)
	}
	return out
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

// groupStream feeds one COPY with the rows of consecutive pages, pulling
// each next page only when the previous one is written out.
type groupStream struct {
	pages []fetched
	rows  []db.Row
	i     int
	count int
	pull  func() (fetched, bool)
}

func (g *groupStream) Next() bool {
	for g.i+1 >= len(g.rows) {
		f, ok := g.pull()
		if !ok {
			return false
		}
		g.pages = append(g.pages, f)
		g.rows, g.i = f.batch.rows, -1
		g.count += len(f.batch.rows)
	}
	g.i++
	return true
}

func (g *groupStream) Row() *db.Row { return &g.rows[g.i] }

// bulkGroup writes first and the pages that follow it in one COPY and one
// transaction. It returns whether the sweep's last page was written and
// a fetched item it pulled but did not write (a fetch error or a stop).
func (x *streamRun) bulkGroup(ctx context.Context, cp *db.Checkpoint, first fetched, next func(<-chan time.Time) (fetched, bool)) (last bool, held *fetched, err error) {
	deadline := time.NewTimer(maxGroupAge)
	defer deadline.Stop()
	pending := &first
	g := &groupStream{}
	g.pull = func() (fetched, bool) {
		if pending != nil {
			f := *pending
			pending = nil
			return f, true
		}
		if n := len(g.pages); n > 0 && (!g.pages[n-1].page.HasNext || g.count >= maxGroupRows) {
			return fetched{}, false
		}
		f, ok := next(deadline.C)
		if !ok {
			return fetched{}, false
		}
		if f.err != nil {
			held = &f
			return fetched{}, false
		}
		return f, true
	}
	defer func() {
		for _, f := range g.pages {
			f.page.Release()
		}
	}()

	tx, err := x.conn.Begin(ctx)
	if err != nil {
		return false, nil, fmt.Errorf("begin: %w", db.Describe(err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	sc := x.scope
	sc.SweepID = cp.SweepID
	n, err := x.s.Table.CopyNew(ctx, tx, sc, g)
	if len(g.pages) == 0 { // the COPY failed before it asked for a row
		first.page.Release()
		return false, held, fmt.Errorf("%s page %d: %w", x.s.Name, cp.Pages+1, err)
	}
	lastPage := g.pages[len(g.pages)-1].page
	last = !lastPage.HasNext
	nextCursor := ""
	if !last {
		nextCursor = lastPage.NextCursor
	}
	batches := make([]batch, len(g.pages))
	for i, f := range g.pages {
		batches[i] = f.batch
	}
	if err == nil {
		err = x.finish(ctx, tx, cp, batches, db.UpsertResult{Inserted: n}, nextCursor, last)
	}
	if db.IsUniqueViolation(err) {
		// A row is there already (it moved behind the cursor): write the
		// group's pages one by one, each falling back to the upsert.
		tx.Rollback(ctx)
		for i, b := range batches {
			pageCursor, pageLast := g.pages[i].page.NextCursor, !g.pages[i].page.HasNext
			if pageLast {
				pageCursor = ""
			}
			if err = x.writePage(ctx, cp, b, pageCursor, pageLast); err != nil {
				break
			}
		}
	}
	if err != nil {
		return false, held, fmt.Errorf("%s pages %d-%d: %w", x.s.Name, cp.Pages+1, cp.Pages+int64(len(g.pages)), err)
	}
	return last, held, nil
}
