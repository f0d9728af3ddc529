package sync

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	gosync "sync"

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

// cursorSweep walks the cursor pages from the checkpoint. Each page is one
// transaction with its checkpoint, so a crash anywhere loses at most the
// pages fetched but not yet committed.
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

	var next func() (fetched, bool)
	if x.Prefetch <= 0 {
		cursor, done := cp.Cursor, false
		next = func() (fetched, bool) {
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
		next = func() (fetched, bool) {
			select {
			case f, ok := <-ch:
				return f, ok
			case <-stop:
				return fetched{err: errStopped}, true
			}
		}
	}

	for {
		select {
		case <-stop:
			return errStopped
		default:
		}
		f, ok := next()
		if !ok {
			return nil
		}
		if f.err != nil {
			if errors.Is(f.err, errStopped) {
				return errStopped
			}
			var he *erp.HTTPError
			if f.cursor != "" && errors.As(f.err, &he) && he.Status == http.StatusBadRequest {
				return &cursorRefused{err: he, page: cp.Pages + 1}
			}
			return fmt.Errorf("%s page %d: %w", x.s.Name, cp.Pages+1, f.err)
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
		up.Inserted, err = x.s.Table.CopyNew(ctx, tx, sc, b.rows)
	} else {
		// A bulk load needs no seen-list: see the end of the sweep below.
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
	next := *cp
	if err := db.AdvanceCheckpoint(ctx, tx, &next, nextCursor, int64(len(b.rows))); err != nil {
		return err
	}
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
	if err := db.InsertRejected(ctx, tx, x.t.Source, x.s.Name, x.runID, b.rejected); err != nil {
		return err
	}
	if err := db.RecordDrift(ctx, tx, x.t.Source, x.s.Name, b.drift); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", db.Describe(err))
	}
	*cp = next
	page := db.RunStats{Pages: 1, Seen: int64(b.received), Inserted: up.Inserted, Updated: up.Updated,
		Unchanged: up.Unchanged, Rejected: int64(len(b.rejected)), Deleted: deleted}
	x.stats.Add(page)
	x.obs().PageCommitted(x.t.Source, x.s.Name, page)
	if x.progress != nil {
		x.progress(x.stats)
	}
	if len(b.rejected) > 0 {
		x.log.Warn("records rejected", "count", len(b.rejected), "first_reason", b.rejected[0].Reason)
	}
	return nil
}
