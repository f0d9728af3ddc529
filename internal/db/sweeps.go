package db

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/jackc/pgx/v5"

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
// pages (see queueAdvanceCheckpoint: cp becomes next when the batch runs)
// and the page digests.
func QueueSweepProgress(b *pgx.Batch, cp *Checkpoint, next Checkpoint, p SweepProgress) {
	if len(p.Seen) > 0 {
		b.Queue(seenSQL, cp.SweepID, p.Seen)
	}
	for _, bd := range p.Bounds {
		queueSweepBounds(b, cp.SweepID, bd)
	}
	queueAdvanceCheckpoint(b, cp, next, p.Pages, p.Rows)
	queueRecordPageDigests(b, cp.Key, cp.SweepID, p.Digests)
}

// SeenCount counts the ids sweep sweepID has seen so far, one per row of
// each page it read (fewer once Postgres emptied the UNLOGGED seen-list in
// a crash), and how many distinct ones (fewer when the list showed an id
// twice).
func SeenCount(ctx context.Context, q Querier, sweepID int64) (ids, distinct int64, err error) {
	if err := q.QueryRow(ctx, `SELECT count(*), count(DISTINCT id) FROM erp.sweep_seen WHERE sweep_id = $1`, sweepID).Scan(&ids, &distinct); err != nil {
		return 0, 0, fmt.Errorf("counting the sweep's ids: %w", Describe(err))
	}
	return ids, distinct, nil
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
// those.
func (t *Table) KnownPages(ctx context.Context, q Querier, k model.Key, sweepID int64) (Answers, []string, error) {
	answers, err := pageDigests(ctx, q, k, sweepID)
	if err != nil {
		return nil, nil, err
	}
	changed, err := t.changedSince(ctx, q, k, sweepID)
	return answers, changed, err
}

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

// queueSweepBounds queues the record of a sweep page's first and last
// id.
func queueSweepBounds(b *pgx.Batch, sweepID int64, bd Bound) {
	b.Queue(`INSERT INTO erp.sweep_bounds (sweep_id, page, first_id, last_id) VALUES ($1, $2, $3, $4)
ON CONFLICT (sweep_id, page) DO UPDATE SET first_id = EXCLUDED.first_id, last_id = EXCLUDED.last_id`, sweepID, bd.Page, bd.First, bd.Last)
}

// Bound is the first and last id of a page of a sweep, by page number.
type Bound struct {
	Page        int64
	First, Last string
}

// SweepBounds lists the bounds of a sweep's pages, in page order.
func SweepBounds(ctx context.Context, q Querier, sweepID int64) ([]Bound, error) {
	rows, err := q.Query(ctx, `SELECT page, first_id, last_id FROM erp.sweep_bounds WHERE sweep_id = $1 ORDER BY page`, sweepID)
	if err != nil {
		return nil, fmt.Errorf("reading the sweep's page bounds: %w", Describe(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Bound])
	if err != nil {
		return nil, fmt.Errorf("reading the sweep's page bounds: %w", Describe(err))
	}
	return out, nil
}

// DeletionCandidates lists the rows a login's last complete sweep held
// for the next to confirm (erp.deletion_candidates).
func DeletionCandidates(ctx context.Context, q Querier, k model.Key) (map[string]bool, error) {
	rows, err := q.Query(ctx, `SELECT id FROM erp.deletion_candidates WHERE source = $1 AND stream = $2 AND login = $3`,
		k.Source, k.Stream, k.Login)
	if err != nil {
		return nil, fmt.Errorf("reading the rows held for a second sweep: %w", Describe(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading the rows held for a second sweep: %w", Describe(err))
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// SetDeletionCandidates replaces the rows a login's sweep holds for the
// next to confirm (a row held already keeps the sweep that first held
// it).
func SetDeletionCandidates(ctx context.Context, q Querier, k model.Key, sweepID int64, ids []string) error {
	if ids == nil {
		ids = []string{} // NULL would keep every row
	}
	_, err := q.Exec(ctx, `DELETE FROM erp.deletion_candidates WHERE source = $1 AND stream = $2 AND login = $3 AND id <> ALL($4)`,
		k.Source, k.Stream, k.Login, ids)
	if err == nil {
		_, err = q.Exec(ctx, `
INSERT INTO erp.deletion_candidates (source, stream, login, id, sweep_id)
SELECT $1, $2, $3, id, $4 FROM unnest($5::text[]) AS u(id)
ON CONFLICT (source, stream, login, id) DO NOTHING`, k.Source, k.Stream, k.Login, sweepID, ids)
	}
	if err != nil {
		return fmt.Errorf("holding rows for a second sweep: %w", Describe(err))
	}
	return nil
}
