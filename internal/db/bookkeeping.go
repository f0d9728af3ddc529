package db

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Rejected is a record that could not be used.
type Rejected struct {
	RecordID string // empty when the record has none
	Reason   string
	Record   []byte // as received
}

// QueueInsertRejected queues the storing of rejected records with their
// reason and raw bytes (bytea: they may not be valid text). A record
// rejected before with the same bytes is not stored again: its row's
// last_seen, count, run and reason are updated.
func QueueInsertRejected(b *pgx.Batch, source, stream string, runID int64, recs []Rejected) {
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
		ids = append(ids, SafeText(r.RecordID, MaxKeyBytes))
		reasons = append(reasons, SafeText(r.Reason, 1000))
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

// QueueRecordDrift queues the adding of a page's drift counts to
// erp.schema_drift.
func QueueRecordDrift(b *pgx.Batch, source, stream string, drift []Drift) {
	if len(drift) == 0 {
		return
	}
	var fields, changes, details, examples []string
	var counts []int64
	// Field names and examples come from the ERP: made storable, and
	// short enough for the table's key.
	at := map[[3]string]int{}
	for _, d := range drift {
		k := [3]string{SafeText(d.Field, 200), d.Change, SafeText(d.Detail, 200)}
		if i, dup := at[k]; dup { // distinct fields may meet once cut
			counts[i] += d.Count
			continue
		}
		at[k] = len(fields)
		fields = append(fields, k[0])
		changes = append(changes, k[1])
		details = append(details, k[2])
		examples = append(examples, SafeText(d.Example, 200))
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

// RecordCurrencyRates keeps erp.currency_rates in step with the
// currencies of ids, as they now are in erp.currencies: it closes the open
// period of every currency whose rate changed and opens a new one (also
// for a currency seen for the first time). It runs in the transaction
// that wrote them and returns the periods opened.
func RecordCurrencyRates(ctx context.Context, tx pgx.Tx, source string, ids []string) (int64, error) {
	// Two statements, not one CTE: the parts of a CTE run in no fixed
	// order, and the unique index on open periods needs the close first.
	_, err := tx.Exec(ctx, `
UPDATE erp.currency_rates r SET valid_to = now()
FROM erp.currencies c
WHERE c.source = $1 AND c.id = ANY ($2::text[]) AND r.source = c.source AND r.currency_id = c.id
  AND r.valid_to IS NULL AND r.rate <> c.exchange_rate`, source, ids)
	if err != nil {
		return 0, fmt.Errorf("closing changed currency rates: %w", Describe(err))
	}
	tag, err := tx.Exec(ctx, `
INSERT INTO erp.currency_rates (source, currency_id, code, rate, valid_from)
SELECT c.source, c.id, c.code, c.exchange_rate, now() FROM erp.currencies c
WHERE c.source = $1 AND c.id = ANY ($2::text[]) AND c.exchange_rate IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM erp.currency_rates r
                  WHERE r.source = c.source AND r.currency_id = c.id AND r.valid_to IS NULL)`, source, ids)
	if err != nil {
		return 0, fmt.Errorf("opening currency rates: %w", Describe(err))
	}
	return tag.RowsAffected(), nil
}
