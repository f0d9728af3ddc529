-- +goose Up
-- One installation, several logins. A multi-branch ERP gives each token
-- the company and branch of its user, so a source may be read through a
-- login per branch. What a login reads is kept per login (checkpoints,
-- held deletions, freshness, balance-sheet snapshots, statistics), and
-- every row remembers the login whose sweeps keep it (listed_by): only a
-- complete sweep of that login marks it deleted, never another login's
-- sweep that did not list it.

-- Checkpoints per login. '' is a checkpoint written before logins: the
-- first login of its source to run the stream claims it, so an upgrade
-- neither restarts a sweep nor loses a held deletion.
ALTER TABLE erp.sync_checkpoints ADD COLUMN login text NOT NULL DEFAULT '';
ALTER TABLE erp.sync_checkpoints DROP CONSTRAINT sync_checkpoints_pkey;
ALTER TABLE erp.sync_checkpoints ADD PRIMARY KEY (source, stream, login);
COMMENT ON COLUMN erp.sync_checkpoints.login IS
    'the login (username or client id) this reading is of; empty for one written before logins, claimed by the first login to run';

ALTER TABLE erp.sync_runs ADD COLUMN login text;
-- Page digests are forgotten per login: each login's sweeps know their
-- own pages.
ALTER TABLE erp.sweep_pages ADD COLUMN login text NOT NULL DEFAULT '';
COMMENT ON COLUMN erp.sync_runs.login IS 'the login the run read through; NULL for runs before logins';

-- The login whose complete sweeps decide a row's deletion: the first that
-- listed it, or the one that listed it again after a deletion. NULL for
-- rows written before logins: those keep the old rule, the sweeps of the
-- login whose company and branch they carry.
-- +goose StatementBegin
DO $$
DECLARE
    tbl text;
BEGIN
    FOREACH tbl IN ARRAY ARRAY['invoices', 'currencies', 'cashboxes', 'cashbox_reconciliations', 'journal_entries',
            'payment_vouchers', 'receipt_vouchers', 'messaging_conversations', 'messaging_messages',
            'messaging_templates', 'messaging_queue', 'cashbox_access'] LOOP
        EXECUTE format('ALTER TABLE erp.%I ADD COLUMN listed_by text', tbl);
        EXECUTE format($c$COMMENT ON COLUMN erp.%I.listed_by IS 'the login whose complete sweeps decide whether the row is deleted'$c$, tbl);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- A snapshot is of one login's context.
ALTER TABLE erp.balance_sheet_snapshots ADD COLUMN login text NOT NULL DEFAULT '';
ALTER TABLE erp.balance_sheet_snapshots DROP CONSTRAINT balance_sheet_snapshots_pkey;
ALTER TABLE erp.balance_sheet_snapshots ADD PRIMARY KEY (source, login, as_of, node);
ALTER TABLE erp.messaging_stats ADD COLUMN login text NOT NULL DEFAULT '';
ALTER TABLE erp.messaging_stats DROP CONSTRAINT messaging_stats_pkey;
ALTER TABLE erp.messaging_stats ADD PRIMARY KEY (source, login, taken_at);

-- erp.refresh_history(table) brings a history table and its as-of
-- function up to the entity table's columns, after columns were added to
-- it: the new columns are added to the history table (NULL in versions
-- written before) and erp.<table>_as_of is rewritten to return them.
-- +goose StatementBegin
CREATE PROCEDURE erp.refresh_history(tbl text)
LANGUAGE plpgsql AS $proc$
DECLARE
    entity regclass := format('erp.%I', tbl)::regclass;
    hist   regclass := format('erp.%I', tbl || '_history')::regclass;
    live   text;  -- the entity's columns as the live row gives them
    old    text;  -- the same, from a history row
    col    record;
BEGIN
    FOR col IN
        SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type FROM pg_attribute a
        WHERE a.attrelid = entity AND a.attnum > 0 AND NOT a.attisdropped
          AND a.attname NOT IN ('synced_at', 'deleted_at')
          AND NOT EXISTS (SELECT 1 FROM pg_attribute h WHERE h.attrelid = hist AND h.attname = a.attname AND NOT h.attisdropped)
        ORDER BY a.attnum
    LOOP
        EXECUTE format('ALTER TABLE %s ADD COLUMN %I %s', hist, col.attname, col.type);
    END LOOP;
    SELECT string_agg(CASE attname WHEN 'deleted_at' THEN 'NULL::timestamptz' ELSE quote_ident(attname) END, ', ' ORDER BY attnum),
           string_agg(CASE attname WHEN 'deleted_at' THEN 'NULL::timestamptz' WHEN 'synced_at' THEN 'valid_from'
                      ELSE quote_ident(attname) END, ', ' ORDER BY attnum)
      INTO live, old
      FROM pg_attribute WHERE attrelid = entity AND attnum > 0 AND NOT attisdropped;
    -- PARALLEL SAFE (it only reads): Postgres decides whether a query may
    -- run in parallel before it inlines the function's SQL, so a function
    -- not declared so keeps every query calling it on one core.
    EXECUTE format($f$CREATE OR REPLACE FUNCTION erp.%I(ts timestamptz) RETURNS SETOF %s
        LANGUAGE sql STABLE PARALLEL SAFE AS $body$
            SELECT %s FROM %s
            WHERE synced_at <= ts AND (deleted_at IS NULL OR deleted_at > ts)
            UNION ALL
            SELECT %s FROM %s
            WHERE valid_from <= ts AND valid_to > ts
        $body$$f$, tbl || '_as_of', entity, live, entity, old, hist);
END
$proc$;
-- +goose StatementEnd
REVOKE ALL ON PROCEDURE erp.refresh_history(text) FROM PUBLIC;

-- +goose StatementBegin
DO $$
DECLARE
    tbl text;
BEGIN
    FOR tbl IN SELECT left(relname, -length('_history')) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = 'erp' AND c.relkind = 'r' AND relname LIKE '%\_history' ORDER BY 1 LOOP
        CALL erp.refresh_history(tbl);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- Views read the last completed sweep of a stream over its logins (the
-- earliest: by then every login had seen every row it lists), so a row
-- shows once however many logins read it.
CREATE OR REPLACE VIEW erp.invoices_current WITH (security_invoker = true) AS
SELECT i.source, i.id, i.company_id, i.branch_id,
       i.payload->>'number'        AS number,
       i.payload->>'date'          AS invoice_date,
       i.payload->>'status'        AS status,
       i.payload->>'currency_code' AS currency_code,
       i.total_bc,
       i.first_seen_at, i.synced_at, c.seen_at,
       i.payload
FROM erp.invoices i
LEFT JOIN (SELECT source, min(last_sweep_completed_at) AS seen_at FROM erp.sync_checkpoints
           WHERE stream = 'invoices' GROUP BY source) c ON c.source = i.source
WHERE i.deleted_at IS NULL;

CREATE OR REPLACE VIEW erp.currencies_current WITH (security_invoker = true) AS
SELECT cu.source, cu.id, cu.code, cu.name, cu.exchange_rate, cu.is_base_currency,
       cu.is_system_enabled, r.valid_from AS rate_valid_from,
       cu.synced_at, c.seen_at, cu.payload
FROM erp.currencies cu
LEFT JOIN erp.currency_rates r ON r.source = cu.source AND r.currency_id = cu.id AND r.valid_to IS NULL
LEFT JOIN (SELECT source, min(last_sweep_completed_at) AS seen_at FROM erp.sync_checkpoints
           WHERE stream = 'currencies' GROUP BY source) c ON c.source = cu.source
WHERE cu.deleted_at IS NULL;

CREATE OR REPLACE VIEW erp.cashboxes_current WITH (security_invoker = true) AS
SELECT b.source, b.id, b.company_id, b.branch_id, b.name, b.balance,
       b.payload->>'currency_code' AS currency_code,
       b.synced_at, c.seen_at, b.payload
FROM erp.cashboxes b
LEFT JOIN (SELECT source, min(last_sweep_completed_at) AS seen_at FROM erp.sync_checkpoints
           WHERE stream = 'cashboxes' GROUP BY source) c ON c.source = b.source
WHERE b.deleted_at IS NULL;

CREATE OR REPLACE VIEW erp.cashbox_reconciliations_current WITH (security_invoker = true) AS
SELECT r.source, r.id, r.company_id, r.branch_id, r.cashbox_id, r.status,
       r.expected_balance, r.counted_balance, r.difference,
       r.synced_at, c.seen_at, r.payload
FROM erp.cashbox_reconciliations r
LEFT JOIN (SELECT source, min(last_sweep_completed_at) AS seen_at FROM erp.sync_checkpoints
           WHERE stream = 'cashbox_reconciliations' GROUP BY source) c ON c.source = r.source
WHERE r.deleted_at IS NULL;

-- Freshness and failures per stream and login.
CREATE OR REPLACE VIEW erp.stream_freshness WITH (security_invoker = true) AS
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

CREATE OR REPLACE VIEW erp.stream_failures WITH (security_invoker = true) AS
SELECT DISTINCT ON (source, stream, login) source, stream, id AS run_id, started_at, finished_at, error, note, login
FROM erp.sync_runs WHERE status = 'failed'
ORDER BY source, stream, login, id DESC;

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_analyst') THEN
        GRANT SELECT (login) ON erp.sync_runs TO erpsync_analyst;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- Checkpoints, snapshots and statistics of several logins cannot be
-- folded back into one: going back means restoring a backup.
-- +goose StatementBegin
DO $$
BEGIN
    RAISE EXCEPTION 'migration 10 (logins) cannot be undone: restore the warehouse from a backup taken before it';
END
$$;
-- +goose StatementEnd
