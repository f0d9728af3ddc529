-- +goose Up
-- Typed columns for what analysts filter and group by, written at sync
-- time from the received bytes: dates as date, status, currency, customer,
-- number. A value that does not parse is NULL (and, at sync time, an entry
-- in erp.schema_drift); the record is written all the same. The rows
-- written before are filled by migration 13, in batches.
--
-- erp.typed_* read a JSON value by the rules erpsync applies at sync time
-- (internal/sync/table.go, parseTyped; a test holds the two equal):
--   text       a string, or a number as Postgres prints it
--   date       a string YYYY-MM-DD that is a calendar date of year 1 or later
--   timestamp  a string in RFC 3339 (T, Z or an offset of at most 15:59, the most
--              Postgres takes; at most 6 fractional digits)
--   bool       a boolean
-- Anything else, JSON null included, is NULL.

-- +goose StatementBegin
CREATE FUNCTION erp.typed_text(v jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE jsonb_typeof(v) WHEN 'string' THEN v #>> '{}' WHEN 'number' THEN v #>> '{}' END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION erp.typed_date(v jsonb) RETURNS date
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_typeof(v) IS DISTINCT FROM 'string' OR (v #>> '{}') !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}$' THEN NULL
        WHEN substr(v #>> '{}', 1, 4)::int < 1 OR substr(v #>> '{}', 6, 2)::int NOT BETWEEN 1 AND 12 THEN NULL
        WHEN substr(v #>> '{}', 9, 2)::int BETWEEN 1 AND extract(day FROM
                 make_date(substr(v #>> '{}', 1, 4)::int, substr(v #>> '{}', 6, 2)::int, 1) + interval '1 month' - interval '1 day')
            THEN (v #>> '{}')::date
    END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION erp.typed_timestamp(v jsonb) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_typeof(v) IS DISTINCT FROM 'string'
          OR (v #>> '{}') !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})$' THEN NULL
        WHEN erp.typed_date(to_jsonb(left(v #>> '{}', 10))) IS NULL THEN NULL
        WHEN substr(v #>> '{}', 12, 2)::int > 23 OR substr(v #>> '{}', 15, 2)::int > 59 OR substr(v #>> '{}', 18, 2)::int > 59 THEN NULL
        WHEN right(v #>> '{}', 1) <> 'Z'
         AND (substr(right(v #>> '{}', 5), 1, 2)::int > 15 OR right(v #>> '{}', 2)::int > 59) THEN NULL
        ELSE (v #>> '{}')::timestamptz
    END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION erp.typed_bool(v jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(v) = 'boolean' THEN v::boolean END
$$;
-- +goose StatementEnd

-- erp.assert_replaceable(view) refuses to go on when something outside
-- erpsync's own views depends on a view a migration must drop and create
-- again (an analyst's view on it, a function returning its rows): the
-- migration would have to drop it too. It names what depends, and how to
-- get past: drop it, migrate, create it again.
-- +goose StatementBegin
CREATE PROCEDURE erp.assert_replaceable(v regclass)
LANGUAGE plpgsql AS $proc$
DECLARE
    dep text;
BEGIN
    SELECT string_agg(d, ', ') INTO dep FROM (
        SELECT DISTINCT format('view %s', c.oid::regclass) AS d
        FROM pg_depend x JOIN pg_rewrite r ON r.oid = x.objid JOIN pg_class c ON c.oid = r.ev_class
        WHERE x.classid = 'pg_rewrite'::regclass AND x.refobjid = v AND c.oid <> v
        UNION
        SELECT format('function %s', p.oid::regprocedure)
        FROM pg_proc p WHERE p.prorettype = (SELECT reltype FROM pg_class WHERE oid = v)
    ) deps;
    IF dep IS NOT NULL THEN
        RAISE EXCEPTION 'cannot replace %: % depend(s) on it', v, dep
            USING HINT = 'Save their definitions (pg_get_viewdef, pg_get_functiondef), drop them, run erpsync migrate, then create them again.';
    END IF;
END
$proc$;
-- +goose StatementEnd
REVOKE ALL ON PROCEDURE erp.assert_replaceable(regclass) FROM PUBLIC;

ALTER TABLE erp.invoices
    ADD COLUMN invoice_date  date,
    ADD COLUMN number        text,
    ADD COLUMN status        text,
    ADD COLUMN currency_code text,
    ADD COLUMN customer_id   text,
    ADD COLUMN customer_name text;
ALTER TABLE erp.currencies
    ADD COLUMN currency_code text,
    ADD COLUMN currency_name text;
ALTER TABLE erp.cashboxes
    ADD COLUMN currency_code text,
    ADD COLUMN type          text,
    ADD COLUMN is_active     boolean;
ALTER TABLE erp.cashbox_reconciliations
    ADD COLUMN reconciled_at timestamptz;
ALTER TABLE erp.journal_entries
    ADD COLUMN entry_date date,
    ADD COLUMN reference  text;
ALTER TABLE erp.payment_vouchers
    ADD COLUMN voucher_date  date,
    ADD COLUMN number        text,
    ADD COLUMN party         text,
    ADD COLUMN currency_code text;
ALTER TABLE erp.receipt_vouchers
    ADD COLUMN voucher_date  date,
    ADD COLUMN number        text,
    ADD COLUMN party         text,
    ADD COLUMN currency_code text;

-- The history tables get the same columns, and the as-of functions return
-- them.
CALL erp.refresh_history('invoices');
CALL erp.refresh_history('currencies');
CALL erp.refresh_history('cashboxes');
CALL erp.refresh_history('cashbox_reconciliations');
CALL erp.refresh_history('journal_entries');
CALL erp.refresh_history('payment_vouchers');
CALL erp.refresh_history('receipt_vouchers');

-- The views expose the typed columns. invoice_date was the payload's text
-- and is now a date: the view is dropped and made again, unless something
-- else depends on it.
CALL erp.assert_replaceable('erp.invoices_current');
DROP VIEW erp.invoices_current;
CREATE VIEW erp.invoices_current WITH (security_invoker = true) AS
SELECT i.source, i.id, i.company_id, i.branch_id,
       i.number, i.invoice_date, i.status, i.currency_code,
       i.total_bc,
       i.first_seen_at, i.synced_at, c.seen_at,
       i.payload,
       i.customer_id, i.customer_name
FROM erp.invoices i
LEFT JOIN (SELECT source, min(last_sweep_completed_at) AS seen_at FROM erp.sync_checkpoints
           WHERE stream = 'invoices' GROUP BY source) c ON c.source = i.source
WHERE i.deleted_at IS NULL;

CREATE OR REPLACE VIEW erp.currencies_current WITH (security_invoker = true) AS
SELECT cu.source, cu.id, cu.code, cu.name, cu.exchange_rate, cu.is_base_currency,
       cu.is_system_enabled, r.valid_from AS rate_valid_from,
       cu.synced_at, c.seen_at, cu.payload,
       cu.currency_code, cu.currency_name
FROM erp.currencies cu
LEFT JOIN erp.currency_rates r ON r.source = cu.source AND r.currency_id = cu.id AND r.valid_to IS NULL
LEFT JOIN (SELECT source, min(last_sweep_completed_at) AS seen_at FROM erp.sync_checkpoints
           WHERE stream = 'currencies' GROUP BY source) c ON c.source = cu.source
WHERE cu.deleted_at IS NULL;

CREATE OR REPLACE VIEW erp.cashboxes_current WITH (security_invoker = true) AS
SELECT b.source, b.id, b.company_id, b.branch_id, b.name, b.balance,
       b.currency_code,
       b.synced_at, c.seen_at, b.payload,
       b.type, b.is_active
FROM erp.cashboxes b
LEFT JOIN (SELECT source, min(last_sweep_completed_at) AS seen_at FROM erp.sync_checkpoints
           WHERE stream = 'cashboxes' GROUP BY source) c ON c.source = b.source
WHERE b.deleted_at IS NULL;

CREATE OR REPLACE VIEW erp.cashbox_reconciliations_current WITH (security_invoker = true) AS
SELECT r.source, r.id, r.company_id, r.branch_id, r.cashbox_id, r.status,
       r.expected_balance, r.counted_balance, r.difference,
       r.synced_at, c.seen_at, r.payload,
       r.reconciled_at
FROM erp.cashbox_reconciliations r
LEFT JOIN (SELECT source, min(last_sweep_completed_at) AS seen_at FROM erp.sync_checkpoints
           WHERE stream = 'cashbox_reconciliations' GROUP BY source) c ON c.source = r.source
WHERE r.deleted_at IS NULL;

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_analyst') THEN
        GRANT SELECT ON erp.invoices_current TO erpsync_analyst;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_sensitive') THEN
        GRANT SELECT ON erp.invoices_current TO erpsync_sensitive;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    RAISE EXCEPTION 'migration 12 (typed columns) cannot be undone: restore the warehouse from a backup taken before it';
END
$$;
-- +goose StatementEnd
