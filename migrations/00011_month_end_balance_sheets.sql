-- +goose Up
-- Balance sheets at every month end: the balance-sheet stream keeps a
-- snapshot per login as of today and as of the last day of each closed
-- month, and re-reads the recent ones; a tree that changed (closing
-- entries posted late into a past month) is rewritten, and its previous
-- nodes are kept here, with the range in which they were current.
CREATE TABLE erp.balance_sheet_snapshot_history (
    source       text        NOT NULL,
    login        text        NOT NULL,
    as_of        date        NOT NULL,
    node         text        NOT NULL,
    parent       text,
    depth        integer     NOT NULL,
    company_id   text        NOT NULL,
    branch_id    text        NOT NULL,
    code         text,
    name         text,
    balance      numeric,
    payload      jsonb       NOT NULL,
    payload_hash bytea       NOT NULL,
    valid_from   timestamptz NOT NULL,
    valid_to     timestamptz NOT NULL,
    PRIMARY KEY (source, login, as_of, node, valid_from),
    CHECK (valid_to > valid_from)
);

-- What an operator should know of a login's last run of a stream (a list
-- that may be cut short, an installation that ignores date_to): erpsync
-- status and erp.stream_freshness show it until a run no longer warns.
ALTER TABLE erp.sync_checkpoints ADD COLUMN warning text;
-- What the login's complete sweeps showed of the stream's lists: 'branch'
-- (the login's branch's records) or 'company' (the whole company's, so
-- every login of the company reads every record); NULL: not known.
ALTER TABLE erp.sync_checkpoints ADD COLUMN list_scope text CHECK (list_scope IN ('branch', 'company'));

-- "The balance sheet at the end of month M", for any day of M.
-- +goose StatementBegin
CREATE FUNCTION erp.balance_sheet_at_month_end(month date) RETURNS SETOF erp.balance_sheet_snapshots
LANGUAGE sql STABLE AS $$
    SELECT * FROM erp.balance_sheet_snapshots
    WHERE as_of = (date_trunc('month', month) + interval '1 month - 1 day')::date
$$;
-- +goose StatementEnd

CREATE OR REPLACE VIEW erp.stream_freshness WITH (security_invoker = true) AS
SELECT c.source, c.stream,
       c.last_sweep_completed_at,
       now() - c.last_sweep_completed_at AS age,
       c.sweep_id IS NOT NULL AS sweep_in_progress,
       c.held_deletions,
       r.status AS last_run_status, r.finished_at AS last_run_finished,
       c.login, c.warning, c.list_scope
FROM erp.sync_checkpoints c
LEFT JOIN LATERAL (
    SELECT status, finished_at FROM erp.sync_runs
    WHERE source = c.source AND stream = c.stream AND coalesce(login, '') = c.login ORDER BY id DESC LIMIT 1
) r ON true;

CALL erp.restrict_to_companies('balance_sheet_snapshot_history');

-- +goose StatementBegin
DO $$
BEGIN
    -- Previous trees are appended, never rewritten.
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_runtime') THEN
        REVOKE ALL ON erp.balance_sheet_snapshot_history FROM erpsync_runtime;
        GRANT SELECT, INSERT ON erp.balance_sheet_snapshot_history TO erpsync_runtime;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_analyst') THEN
        GRANT SELECT ON erp.balance_sheet_snapshot_history TO erpsync_analyst;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION erp.balance_sheet_at_month_end(date);
DROP VIEW erp.stream_freshness;
CREATE VIEW erp.stream_freshness WITH (security_invoker = true) AS
SELECT c.source, c.stream,
       c.last_sweep_completed_at,
       now() - c.last_sweep_completed_at AS age,
       c.sweep_id IS NOT NULL AS sweep_in_progress,
       c.held_deletions,
       r.status AS last_run_status, r.finished_at AS last_run_finished,
       c.login
FROM erp.sync_checkpoints c
LEFT JOIN LATERAL (
    SELECT status, finished_at FROM erp.sync_runs
    WHERE source = c.source AND stream = c.stream AND coalesce(login, '') = c.login ORDER BY id DESC LIMIT 1
) r ON true;
ALTER TABLE erp.sync_checkpoints DROP COLUMN warning, DROP COLUMN list_scope;
DROP TABLE erp.balance_sheet_snapshot_history;
