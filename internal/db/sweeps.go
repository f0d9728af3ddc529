package db

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/erpsync/erpsync/internal/model"
)

// What a sweep in progress keeps besides its checkpoint: the ids it has
// seen (erp.sweep_seen), the first and last id of each page
// (erp.sweep_bounds), what each request was answered with
// (erp.sweep_pages), and the rows it held for the next sweep to confirm
// (erp.deletion_candidates).

// seenSQL records a page's ids as seen by the sweep.
const seenSQL = `INSERT INTO erp.sweep_seen (sweep_id, id) SELECT $1, unnest($2::text[])`

// SweepProgress is what a transaction of a sweep records besides its
// rows: how many pages and rows it committed, the ids of rows it saw
// without writing them (pages known), the first and last id of each page
// (none in a bulk load), and what each request was answered with.
type SweepProgress struct {
	Pages, Rows int64
	Seen        []string
	Bounds      []Bound
	Digests     []PageDigest
}

// QueueSweepProgress queues, in the transaction of committed pages, the
// record of p: the ids seen, the pages' bounds, the checkpoint past the
// pages (next: see queueAdvanceCheckpoint) and the page digests.
func QueueSweepProgress(b *pgx.Batch, next Checkpoint, p SweepProgress) {
	if len(p.Seen) > 0 {
		b.Queue(seenSQL, next.SweepID, p.Seen)
	}
	for _, bd := range p.Bounds {
		QueueSweepBounds(b, next.SweepID, bd)
	}
	queueAdvanceCheckpoint(b, next, p.Pages, p.Rows)
	queueRecordPageDigests(b, next.Key, next.SweepID, p.Digests)
}

// abandonSweep forgets a sweep that will not continue (another starts in
// its place), or that completed: its seen-list and page bounds; nothing
// is marked deleted.
func abandonSweep(ctx context.Context, q Querier, sweepID int64) error {
	if _, err := q.Exec(ctx, `DELETE FROM erp.sweep_seen WHERE sweep_id = $1`, sweepID); err != nil {
		return fmt.Errorf("abandoning sweep %d: %w", sweepID, Describe(err))
	}
	if _, err := q.Exec(ctx, `DELETE FROM erp.sweep_bounds WHERE sweep_id = $1`, sweepID); err != nil {
		return fmt.Errorf("abandoning sweep %d: %w", sweepID, Describe(err))
	}
	return nil
}

// KnownPages is what the requests of k's complete sweep sweepID were
// answered with, and the ids of t's rows that something other than that
// sweep's pages changed since it began (see changedSince): a page
// answered as it was then holds rows as the warehouse has them, but for
// those. The digests are bookkeeping the daemon's role writes, so a login
// of that role can forge them; the sweep in progress therefore uses none
// when it compares every page (see StartSweep): at the latest a week
// after the login's last full comparison began, by the database's clock.
func (t *Table) KnownPages(ctx context.Context, q Querier, k model.Key, sweepID int64) (Answers, []string, error) {
	var all bool
	err := q.QueryRow(ctx, `SELECT coalesce(bool_or(sweep_compares_all), false) FROM erp.sync_checkpoints
WHERE source = $1 AND stream = $2 AND login = $3 AND sweep_id IS NOT NULL`, k.Source, k.Stream, k.Login).Scan(&all)
	if err != nil {
		return nil, nil, fmt.Errorf("reading whether the sweep compares every page: %w", Describe(err))
	}
	if all {
		return nil, nil, nil
	}
	answers, err := pageDigests(ctx, q, k, sweepID)
	if err != nil {
		return nil, nil, err
	}
	changed, err := t.changedSince(ctx, q, k, sweepID)
	return answers, changed, err
}

// fullComparisonEvery is how long a login's sweeps may use page digests
// after a sweep of its that compared every page began: the longest a row
// changed in the warehouse can be kept from the comparison by digests
// forged after the change.
const fullComparisonEvery = 7 * 24 * time.Hour

// PageDigest is what one request of a sweep was answered with.
type PageDigest struct {
	Request, Answer [sha256.Size]byte
}

// Answers are the digests of what a sweep's requests were answered with,
// by the digest of the request.
type Answers map[[sha256.Size]byte][sha256.Size]byte

// pageDigests returns what each request of a sweep was answered with.
func pageDigests(ctx context.Context, q Querier, k model.Key, sweepID int64) (Answers, error) {
	rows, err := q.Query(ctx, `SELECT request, answer FROM erp.sweep_pages WHERE source = $1 AND stream = $2 AND login = $4 AND sweep_id = $3`,
		k.Source, k.Stream, sweepID, k.Login)
	if err != nil {
		return nil, fmt.Errorf("reading page digests: %w", Describe(err))
	}
	out := Answers{}
	var req, ans []byte
	_, err = pgx.ForEachRow(rows, []any{&req, &ans}, func() error {
		if len(req) == sha256.Size && len(ans) == sha256.Size {
			out[[sha256.Size]byte(req)] = [sha256.Size]byte(ans)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading page digests: %w", Describe(err))
	}
	return out, nil
}

// queueRecordPageDigests queues the record of what requests of a sweep
// were answered with.
func queueRecordPageDigests(b *pgx.Batch, k model.Key, sweepID int64, pages []PageDigest) {
	if len(pages) == 0 {
		return
	}
	reqs, answers := make([][]byte, len(pages)), make([][]byte, len(pages))
	for i := range pages {
		reqs[i], answers[i] = pages[i].Request[:], pages[i].Answer[:]
	}
	b.Queue(`
INSERT INTO erp.sweep_pages (source, stream, login, sweep_id, request, answer)
SELECT $1, $2, $6, $3, u.request, u.answer FROM unnest($4::bytea[], $5::bytea[]) AS u(request, answer)
ON CONFLICT (source, stream, sweep_id, request) DO UPDATE SET answer = EXCLUDED.answer`,
		k.Source, k.Stream, sweepID, reqs, answers, k.Login)
}

// forgetPageDigests drops the page digests of every sweep of the stream
// and login but keep.
func forgetPageDigests(ctx context.Context, q Querier, k model.Key, keep int64) error {
	if _, err := q.Exec(ctx, `DELETE FROM erp.sweep_pages WHERE source = $1 AND stream = $2 AND login = $4 AND sweep_id <> $3`,
		k.Source, k.Stream, keep, k.Login); err != nil {
		return fmt.Errorf("forgetting page digests: %w", Describe(err))
	}
	return nil
}

// QueueSweepBounds queues the record of the first and last id of a page
// of a read (its seen-list's sweepID).
func QueueSweepBounds(b *pgx.Batch, sweepID int64, bd Bound) {
	b.Queue(`INSERT INTO erp.sweep_bounds (sweep_id, page, first_id, last_id) VALUES ($1, $2, $3, $4)
ON CONFLICT (sweep_id, page) DO UPDATE SET first_id = EXCLUDED.first_id, last_id = EXCLUDED.last_id`, sweepID, bd.Page, bd.First, bd.Last)
}

// Bound is the first and last id of a page of a sweep, by page number.
type Bound struct {
	Page        int64
	First, Last string
}

// DeletionEvidence is what the warehouse says that the deletions of a
// login's complete read are decided on, read in one round trip in the
// read's last transaction.
type DeletionEvidence struct {
	// Seen and Distinct count the ids the read's seen-list holds, and the
	// distinct ones: one per row of each page read, fewer once Postgres
	// emptied the UNLOGGED list in a crash.
	Seen, Distinct int64
	// Gone are the live rows the login decides (see decidedBy), stored
	// before the read began, whose ids the read did not see.
	Gone []string
	// Bounds are the first and last id of each page of the read, in page
	// order (asked for only when its ids came in a strict order).
	Bounds []Bound
	// Candidates are the rows the login's last complete read held for
	// this one to confirm.
	Candidates map[string]bool
	// Held is the deletion the guard holds for the login.
	Held Held
}

// Read is a complete read of a login's list whose deletions are decided
// at its end: a sweep, or a window run, which judges only the rows from
// the lowest id it read (From) to the list's newest end.
type Read struct {
	Kind  model.RunKind // model.KindSweep or model.KindWindow
	ID    int64         // its seen-list (erp.sweep_seen.sweep_id)
	Began time.Time     // rows written since are no deletion of its
	From  string        // "": the whole list
	// Bounds: the bounds of its pages are asked for (its ids came in a
	// strict order).
	Bounds bool
}

// DeletionEvidence reads, in one round trip, what the deletions of read,
// by sc's login, are decided on.
func (t *Table) DeletionEvidence(ctx context.Context, tx Tx, sc model.Scope, read Read) (DeletionEvidence, error) {
	var ev DeletionEvidence
	b := &pgx.Batch{}
	b.Queue(`SELECT count(*), count(DISTINCT id) FROM erp.sweep_seen WHERE sweep_id = $1`, read.ID).QueryRow(func(r pgx.Row) error {
		return r.Scan(&ev.Seen, &ev.Distinct)
	})
	b.Queue(t.goneSQL, sc.Source, sc.CompanyID, sc.BranchID, read.ID, sc.Login, read.Began, read.From).Query(func(rows pgx.Rows) error {
		var err error
		ev.Gone, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if read.Bounds {
		b.Queue(`SELECT page, first_id, last_id FROM erp.sweep_bounds WHERE sweep_id = $1 ORDER BY page`, read.ID).Query(func(rows pgx.Rows) error {
			var err error
			ev.Bounds, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Bound])
			return err
		})
	}
	b.Queue(`SELECT id FROM erp.deletion_candidates WHERE source = $1 AND stream = $2 AND login = $3 AND kind = $4`,
		sc.Source, sc.Stream, sc.Login, read.Kind).Query(func(rows pgx.Rows) error {
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		ev.Candidates = make(map[string]bool, len(ids))
		for _, id := range ids {
			ev.Candidates[id] = true
		}
		return err
	})
	queueLoadHeld(b, sc.Key, read.Kind, &ev.Held)
	if err := sendBatch(ctx, tx, b, t.Name+": what its deletions are decided on"); err != nil {
		return ev, err
	}
	return ev, nil
}

// Deletions is what a login's complete read decided: the rows to mark
// deleted, those to hold for the next complete read to confirm (Hold;
// SetHold false: the held rows stay as they were), and the deletion the
// guard holds from now on (Held; SetHeld false: as it was).
type Deletions struct {
	Mark, Hold       []string
	SetHold, SetHeld bool
	Held             Held
	// Where are the pages the marked rows lay on, for sizing windows.
	Where ChangedPages
}

// ApplyDeletions records what read of sc's login decided, in one round
// trip, and returns how many rows it marked deleted.
func (t *Table) ApplyDeletions(ctx context.Context, tx Tx, sc model.Scope, read Read, d Deletions) (int64, error) {
	b := &pgx.Batch{}
	if d.SetHold {
		queueDeletionCandidates(b, sc.Key, read, d.Hold)
	}
	if d.SetHeld {
		queueSetHeld(b, sc.Key, read.Kind, d.Held)
	}
	QueueChangePositions(b, sc.Key, d.Where)
	var marked int64
	if len(d.Mark) > 0 {
		b.Queue(t.deleteSQL, sc.Source, d.Mark).Exec(func(tag pgconn.CommandTag) error {
			marked = tag.RowsAffected()
			return nil
		})
	}
	if err := sendBatch(ctx, tx, b, t.Name+": marking deletions"); err != nil {
		return 0, err
	}
	return marked, nil
}

// queueDeletionCandidates queues the replacement of the rows a login's
// reads of read's kind hold for the next to confirm (a row held already
// keeps the read that first held it). A window run holds rows only inside
// its range: those it held before below its range are left to the next
// window run that covers them, or to a sweep.
func queueDeletionCandidates(b *pgx.Batch, k model.Key, read Read, ids []string) {
	if ids == nil {
		ids = []string{} // NULL would keep every row
	}
	b.Queue(`DELETE FROM erp.deletion_candidates WHERE source = $1 AND stream = $2 AND login = $3 AND kind = $5 AND id <> ALL($4)
  AND ($6 = '' OR erp.id_key(id) >= erp.id_key($6))`,
		k.Source, k.Stream, k.Login, ids, read.Kind, read.From)
	b.Queue(`
INSERT INTO erp.deletion_candidates (source, stream, login, kind, id, sweep_id)
SELECT $1, $2, $3, $6, id, $4 FROM unnest($5::text[]) AS u(id)
ON CONFLICT (source, stream, login, kind, id) DO NOTHING`, k.Source, k.Stream, k.Login, read.ID, ids, read.Kind)
}
