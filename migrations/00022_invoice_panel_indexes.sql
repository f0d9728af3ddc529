-- +goose NO TRANSACTION
-- +goose Up
-- The finance dashboard's questions answered from indexes. An invoice's
-- heap row carries its payload, about 60% of its bytes, and a question
-- answered from the heap reads them all; these indexes hold what the
-- panels and the totals as of a time read, and the columns row-level
-- security reads (source, company_id, branch_id), so that every login's
-- question is an index-only scan. They are the indexes the stream
-- invoices declares (internal/sync/streams/core.go), which
-- TestMigrations holds the schema to:
--   invoices_source_date  revenue and customers over invoice dates (it
--                         replaces the index of that name, which held the
--                         key only)
--   invoices_synced       what changed since a time, and erp.invoices_as_of
--   invoices_deleted      what was deleted since a time
--
-- Each is built CONCURRENTLY: readers and the daemon's writes go on while
-- it is built (two scans of the table; the three took 7.6 s at 1,000,000
-- invoices and 122 s at 10,000,000, docs/operating.md gives the figures).
-- Each statement only waits, before it starts and before it ends, for the
-- transactions that were already running. Outside a transaction, a
-- statement that fails or
-- is stopped leaves the ones before it done: the migration runs again
-- from the top, and each index is dropped and built again (an index
-- stopped half-built is invalid and would otherwise be kept). The old
-- invoices_source_date is dropped only once the new one is valid, so the
-- date filters always have an index.
DROP INDEX CONCURRENTLY IF EXISTS erp.invoices_source_date_covering;
CREATE INDEX CONCURRENTLY invoices_source_date_covering ON erp.invoices (source, invoice_date)
    INCLUDE (status, currency_code, total_bc, customer_name, company_id, branch_id) WHERE deleted_at IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS erp.invoices_source_date;
ALTER INDEX erp.invoices_source_date_covering RENAME TO invoices_source_date;

DROP INDEX CONCURRENTLY IF EXISTS erp.invoices_synced;
CREATE INDEX CONCURRENTLY invoices_synced ON erp.invoices (source, synced_at)
    INCLUDE (deleted_at, total_bc, company_id, branch_id);

DROP INDEX CONCURRENTLY IF EXISTS erp.invoices_deleted;
CREATE INDEX CONCURRENTLY invoices_deleted ON erp.invoices (source, deleted_at) WHERE deleted_at IS NOT NULL;

-- An index-only scan reads the heap for every row on a page that is not
-- marked all-visible, and a write clears the mark of the pages it
-- touches until a vacuum sets it again. Autovacuum's defaults wait for
-- a fifth of the table to change (200,000 invoices of 1,000,000): a
-- day's new and changed invoices, the ones the dashboard shows first,
-- would be read from the heap for weeks. Vacuum once half a percent of
-- the invoices were written instead.
ALTER TABLE erp.invoices SET (autovacuum_vacuum_scale_factor = 0.005, autovacuum_vacuum_insert_scale_factor = 0.005);

-- +goose Down
ALTER TABLE erp.invoices RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_insert_scale_factor);
DROP INDEX CONCURRENTLY IF EXISTS erp.invoices_deleted;
DROP INDEX CONCURRENTLY IF EXISTS erp.invoices_synced;
DROP INDEX CONCURRENTLY IF EXISTS erp.invoices_source_date_key;
CREATE INDEX CONCURRENTLY invoices_source_date_key ON erp.invoices (source, invoice_date) WHERE deleted_at IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS erp.invoices_source_date;
ALTER INDEX erp.invoices_source_date_key RENAME TO invoices_source_date;
