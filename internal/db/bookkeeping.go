package db

import (
	"context"
	"crypto/sha256"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/model"
)

// Rejected is a record that could not be used.
type Rejected struct {
	RecordID string // empty when the record has none
	Reason   string
	Record   []byte // as received
}

// queueInsertRejected queues the storing of rejected records with their
// reason and raw bytes (bytea: they may not be valid text). A record
// rejected before with the same bytes is not stored again: its row's
// last_seen, count, run and reason are updated.
func queueInsertRejected(b *pgx.Batch, source, stream string, runID int64, recs []Rejected) {
	if len(recs) == 0 {
		return
	}
	// One statement must not name a row twice: the same bytes rejected
	// twice in one commit are one row counted twice.
	at := make(map[[sha256.Size]byte]int, len(recs))
	var ids, reasons []string
	var records, hashes [][]byte
	var counts []int64
	for _, r := range recs {
		h := sha256.Sum256(r.Record)
		if i, dup := at[h]; dup {
			counts[i]++
			continue
		}
		at[h] = len(hashes)
		ids = append(ids, safeText(r.RecordID, maxKeyBytes))
		reasons = append(reasons, safeText(r.Reason, 1000))
		records, hashes, counts = append(records, r.Record), append(hashes, h[:]), append(counts, 1)
	}
	b.Queue(`
INSERT INTO erp.rejected_records AS r (source, stream, run_id, record_id, reason, record, record_hash, count)
SELECT $1, $2, $3, nullif(u.id, ''), u.reason, u.record, u.hash, u.n
FROM unnest($4::text[], $5::text[], $6::bytea[], $7::bytea[], $8::bigint[]) AS u(id, reason, record, hash, n)
ON CONFLICT (source, stream, record_hash) DO UPDATE SET
    last_seen = now(), count = r.count + EXCLUDED.count, run_id = EXCLUDED.run_id, reason = EXCLUDED.reason`,
		source, stream, runID, ids, reasons, records, hashes, counts)
}

// Drift is one kind of difference between what a stream expects and what
// arrived, counted over a page.
type Drift struct {
	Field, Change, Detail, Example string
	Count                          int64
}

// queueRecordDrift queues the adding of a page's drift counts to
// erp.schema_drift.
func queueRecordDrift(b *pgx.Batch, source, stream string, drift []Drift) {
	if len(drift) == 0 {
		return
	}
	var fields, changes, details, examples []string
	var counts []int64
	// Field names and examples come from the ERP: made storable, and
	// short enough for the table's key.
	at := map[[3]string]int{}
	for _, d := range drift {
		k := [3]string{safeText(d.Field, 200), d.Change, safeText(d.Detail, 200)}
		if i, dup := at[k]; dup { // distinct fields may meet once cut
			counts[i] += d.Count
			continue
		}
		at[k] = len(fields)
		fields = append(fields, k[0])
		changes = append(changes, k[1])
		details = append(details, k[2])
		examples = append(examples, safeText(d.Example, 200))
		counts = append(counts, d.Count)
	}
	b.Queue(`
INSERT INTO erp.schema_drift AS d (source, stream, field, change, detail, example, count)
SELECT $1, $2, u.field, u.change, u.detail, u.example, u.count
FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[]) AS u(field, change, detail, example, count)
ON CONFLICT (source, stream, field, change, detail) DO UPDATE SET
    last_seen = now(), count = d.count + EXCLUDED.count, example = EXCLUDED.example`,
		source, stream, fields, changes, details, examples, counts)
}

// Bookkeeping is what every transaction of a run records besides its rows
// and the statements of its walk: the records it rejected and the drift it
// counted.
type Bookkeeping struct {
	Key      model.Key
	Run      int64 // erp.sync_runs.id
	Rejected []Rejected
	Drift    []Drift
	// NoFlush lets the commit return before its WAL reaches the disk
	// (synchronous_commit off, for this transaction only): only for a
	// transaction whose loss a Postgres crash may cost without harm (see
	// the caller).
	NoFlush bool
}

// SendBookkeeping queues bk after the statements b holds, and runs them
// all in tx in one round trip; it returns the first error.
func SendBookkeeping(ctx context.Context, tx Tx, b *pgx.Batch, bk Bookkeeping) error {
	queueInsertRejected(b, bk.Key.Source, bk.Key.Stream, bk.Run, bk.Rejected)
	queueRecordDrift(b, bk.Key.Source, bk.Key.Stream, bk.Drift)
	if bk.NoFlush {
		b.Queue(`SET LOCAL synchronous_commit = off`)
	}
	return sendBatch(ctx, tx, b, "recording the pages")
}
