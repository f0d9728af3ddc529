-- +goose Up
-- Who may do what, each role with no more than it needs. Roles belong to
-- the whole server: a migrating user without CREATEROLE gets a notice and
-- the README shows the statements for a superuser to run.
--
--   erpsync_runtime    the daemon and `erpsync sync`: rows of every erp
--                      table, its sequences, the schema version. No DDL,
--                      no role to create: migrations run as the owner.
--   erpsync_analyst    the finance tables and views; not people's
--                      messages, not raw rejected records, not error texts.
--   erpsync_sensitive  everything in erp, granted to a person on purpose.

-- +goose StatementBegin
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['erpsync_runtime', 'erpsync_analyst', 'erpsync_sensitive'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION
                -- another database's migration made it just now
                WHEN duplicate_object OR unique_violation THEN NULL;
                WHEN insufficient_privilege THEN
                    RAISE NOTICE 'role % not created (no CREATEROLE); see README, "Roles"', r;
            END;
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- The freshness view no longer carries error texts; those are in
-- erp.stream_failures, for the sensitive role.
DROP VIEW erp.stream_freshness;
CREATE VIEW erp.stream_freshness AS
SELECT c.source, c.stream,
       c.last_sweep_completed_at,
       now() - c.last_sweep_completed_at AS age,
       c.sweep_id IS NOT NULL AS sweep_in_progress,
       c.held_deletions,
       r.status AS last_run_status, r.finished_at AS last_run_finished
FROM erp.sync_checkpoints c
LEFT JOIN LATERAL (
    SELECT status, finished_at FROM erp.sync_runs
    WHERE source = c.source AND stream = c.stream ORDER BY id DESC LIMIT 1
) r ON true;

CREATE VIEW erp.stream_failures AS
SELECT DISTINCT ON (source, stream) source, stream, id AS run_id, started_at, finished_at, error, note
FROM erp.sync_runs WHERE status = 'failed'
ORDER BY source, stream, id DESC;

-- For retention: runs are pruned by age.
CREATE INDEX sync_runs_finished ON erp.sync_runs (finished_at);

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_runtime') THEN
        GRANT USAGE ON SCHEMA erp TO erpsync_runtime;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA erp TO erpsync_runtime;
        GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA erp TO erpsync_runtime;
        ALTER DEFAULT PRIVILEGES IN SCHEMA erp GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO erpsync_runtime;
        ALTER DEFAULT PRIVILEGES IN SCHEMA erp GRANT USAGE, SELECT ON SEQUENCES TO erpsync_runtime;
        -- To tell whether the schema is current.
        GRANT SELECT ON goose_db_version TO erpsync_runtime;
    END IF;

    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_analyst') THEN
        -- Until now the analyst read everything, including what is added
        -- later: that ends here; what it reads is granted by name.
        REVOKE SELECT ON ALL TABLES IN SCHEMA erp FROM erpsync_analyst;
        ALTER DEFAULT PRIVILEGES IN SCHEMA erp REVOKE SELECT ON TABLES FROM erpsync_analyst;
        GRANT USAGE ON SCHEMA erp TO erpsync_analyst;
        GRANT SELECT ON erp.invoices, erp.currencies, erp.currency_rates, erp.cashboxes, erp.cashbox_reconciliations,
            erp.journal_entries, erp.payment_vouchers, erp.receipt_vouchers, erp.journal_lines, erp.journal_line_documents,
            erp.balance_sheet_snapshots, erp.sync_checkpoints,
            erp.invoices_current, erp.currencies_current, erp.cashboxes_current, erp.cashbox_reconciliations_current,
            erp.stream_freshness
            TO erpsync_analyst;
        -- Bookkeeping without the texts that may quote the ERP's data.
        GRANT SELECT (id, source, stream, started_at, finished_at, status, sweep_id, pages, rows_seen, rows_inserted,
            rows_updated, rows_unchanged, rows_rejected, rows_deleted, host, pid) ON erp.sync_runs TO erpsync_analyst;
        GRANT SELECT (id, source, stream, run_id, record_id, reason, rejected_at, last_seen, count) ON erp.rejected_records TO erpsync_analyst;
        GRANT SELECT (source, stream, field, change, detail, first_seen, last_seen, count) ON erp.schema_drift TO erpsync_analyst;
    END IF;

    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_sensitive') THEN
        GRANT USAGE ON SCHEMA erp TO erpsync_sensitive;
        GRANT SELECT ON ALL TABLES IN SCHEMA erp TO erpsync_sensitive;
        ALTER DEFAULT PRIVILEGES IN SCHEMA erp GRANT SELECT ON TABLES TO erpsync_sensitive;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP INDEX erp.sync_runs_finished;
DROP VIEW erp.stream_failures;
DROP VIEW erp.stream_freshness;
CREATE VIEW erp.stream_freshness AS
SELECT c.source, c.stream,
       c.last_sweep_completed_at,
       now() - c.last_sweep_completed_at AS age,
       c.sweep_id IS NOT NULL AS sweep_in_progress,
       r.status AS last_run_status, r.finished_at AS last_run_finished, r.error AS last_run_error
FROM erp.sync_checkpoints c
LEFT JOIN LATERAL (
    SELECT status, finished_at, error FROM erp.sync_runs
    WHERE source = c.source AND stream = c.stream ORDER BY id DESC LIMIT 1
) r ON true;
