-- +goose Up
-- What real installations send.

-- A rejected record keeps the bytes received, which may not be valid
-- text (invalid UTF-8, \u0000): bytea. A record rejected again with the
-- same bytes stays one row, counted, rather than one row per run.
ALTER TABLE erp.rejected_records ALTER COLUMN record TYPE bytea USING convert_to(record, 'UTF8');
ALTER TABLE erp.rejected_records
    ADD COLUMN record_hash bytea,
    ADD COLUMN last_seen   timestamptz,
    ADD COLUMN count       bigint NOT NULL DEFAULT 1;
UPDATE erp.rejected_records SET record_hash = sha256(record), last_seen = rejected_at;
-- Earlier versions stored a record once per rejection: fold them.
CREATE TEMP TABLE rejected_folded ON COMMIT DROP AS
SELECT max(id) AS id, count(*) AS n, min(rejected_at) AS first_seen, max(rejected_at) AS last_seen
FROM erp.rejected_records GROUP BY source, stream, record_hash;
DELETE FROM erp.rejected_records r WHERE NOT EXISTS (SELECT 1 FROM rejected_folded f WHERE f.id = r.id);
UPDATE erp.rejected_records r SET count = f.n, rejected_at = f.first_seen, last_seen = f.last_seen
FROM rejected_folded f WHERE f.id = r.id;
ALTER TABLE erp.rejected_records
    ALTER COLUMN record_hash SET NOT NULL,
    ALTER COLUMN last_seen SET NOT NULL,
    ALTER COLUMN last_seen SET DEFAULT now();
CREATE UNIQUE INDEX rejected_records_once ON erp.rejected_records (source, stream, record_hash);
COMMENT ON COLUMN erp.rejected_records.rejected_at IS 'first time the record was rejected';
COMMENT ON COLUMN erp.rejected_records.last_seen IS 'last time the same bytes were rejected';
COMMENT ON COLUMN erp.rejected_records.count IS 'how many times the same bytes were rejected';

-- Deletions held by the guard: a complete sweep that would mark more than
-- half of a stream's live rows deleted marks nothing until further
-- complete sweeps find the same rows gone (or an operator confirms).
ALTER TABLE erp.sync_checkpoints
    ADD COLUMN held_deletions bigint      NOT NULL DEFAULT 0,
    ADD COLUMN held_digest    bytea,
    ADD COLUMN held_sweeps    integer     NOT NULL DEFAULT 0,
    ADD COLUMN held_since     timestamptz;
COMMENT ON COLUMN erp.sync_checkpoints.held_deletions IS 'rows the last complete sweep found gone but did not mark (deletion guard)';
COMMENT ON COLUMN erp.sync_checkpoints.held_sweeps IS 'consecutive complete sweeps that found the same rows gone';

-- +goose Down
ALTER TABLE erp.sync_checkpoints DROP COLUMN held_since, DROP COLUMN held_sweeps,
    DROP COLUMN held_digest, DROP COLUMN held_deletions;
DROP INDEX erp.rejected_records_once;
ALTER TABLE erp.rejected_records DROP COLUMN count, DROP COLUMN last_seen, DROP COLUMN record_hash;
ALTER TABLE erp.rejected_records ALTER COLUMN record TYPE text USING convert_from(record, 'UTF8');
