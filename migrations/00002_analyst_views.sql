-- +goose Up
-- Views for analysts: what the ERP lists now, with the fields the
-- reference names pulled out of payload. seen_at is the end of the last
-- completed sweep: every live row was seen by it (kept per sweep, not
-- per row, so an unchanged re-sync rewrites nothing).

CREATE VIEW erp.invoices_current AS
SELECT i.source, i.id, i.company_id, i.branch_id,
       i.payload->>'number'        AS number,
       i.payload->>'date'          AS invoice_date,
       i.payload->>'status'        AS status,
       i.payload->>'currency_code' AS currency_code,
       i.total_bc,
       i.first_seen_at, i.synced_at, c.last_sweep_completed_at AS seen_at,
       i.payload
FROM erp.invoices i
LEFT JOIN erp.sync_checkpoints c ON c.source = i.source AND c.stream = 'invoices'
WHERE i.deleted_at IS NULL;

CREATE VIEW erp.currencies_current AS
SELECT cu.source, cu.id, cu.code, cu.name, cu.exchange_rate, cu.is_base_currency,
       cu.is_system_enabled, r.valid_from AS rate_valid_from,
       cu.synced_at, c.last_sweep_completed_at AS seen_at, cu.payload
FROM erp.currencies cu
LEFT JOIN erp.currency_rates r ON r.source = cu.source AND r.currency_id = cu.id AND r.valid_to IS NULL
LEFT JOIN erp.sync_checkpoints c ON c.source = cu.source AND c.stream = 'currencies'
WHERE cu.deleted_at IS NULL;

CREATE VIEW erp.cashboxes_current AS
SELECT b.source, b.id, b.company_id, b.branch_id, b.name, b.balance,
       b.payload->>'currency_code' AS currency_code,
       b.synced_at, c.last_sweep_completed_at AS seen_at, b.payload
FROM erp.cashboxes b
LEFT JOIN erp.sync_checkpoints c ON c.source = b.source AND c.stream = 'cashboxes'
WHERE b.deleted_at IS NULL;

CREATE VIEW erp.cashbox_reconciliations_current AS
SELECT r.source, r.id, r.company_id, r.branch_id, r.cashbox_id, r.status,
       r.expected_balance, r.counted_balance, r.difference,
       r.synced_at, c.last_sweep_completed_at AS seen_at, r.payload
FROM erp.cashbox_reconciliations r
LEFT JOIN erp.sync_checkpoints c ON c.source = r.source AND c.stream = 'cashbox_reconciliations'
WHERE r.deleted_at IS NULL;

-- How fresh each stream is, for dashboards and alerts written in SQL.
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

-- A read-only role for analysts and BI tools: grant it to their login
-- roles (GRANT erpsync_analyst TO alice). Roles belong to the whole
-- server; if the migrating user may not create roles, this says so and
-- the README shows the statements to run by hand.
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_analyst') THEN
        BEGIN
            CREATE ROLE erpsync_analyst NOLOGIN;
        EXCEPTION
            WHEN duplicate_object THEN NULL; -- another database's migration made it just now
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'role erpsync_analyst not created (no CREATEROLE); see README, "Analysts"';
                RETURN;
        END;
    END IF;
    GRANT USAGE ON SCHEMA erp TO erpsync_analyst;
    GRANT SELECT ON ALL TABLES IN SCHEMA erp TO erpsync_analyst;
    ALTER DEFAULT PRIVILEGES IN SCHEMA erp GRANT SELECT ON TABLES TO erpsync_analyst;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP VIEW erp.stream_freshness;
DROP VIEW erp.cashbox_reconciliations_current;
DROP VIEW erp.cashboxes_current;
DROP VIEW erp.currencies_current;
DROP VIEW erp.invoices_current;
