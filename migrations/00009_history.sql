-- +goose Up
-- As-of history. An entity table keeps each record's current version;
-- erp.<table>_history keeps every version it replaced, with the range
-- [valid_from, valid_to) in which that version was current:
--   valid_from  the old version's synced_at (when it was written)
--   valid_to    when it stopped being current: replaced by a change, or
--               (ended_by 'deletion') stopped being listed, for a record
--               that came back later
-- A record deleted and not back is its live row with deleted_at set, so
-- deleting writes no version. erp.<table>_as_of(ts) answers "the table as
-- it was at ts" with the table's own columns.
--
-- The version is written by the same statement that overwrites the row
-- (see internal/db/entities.go), only when the row really changes: the
-- first load and an unchanged re-sync write none.

-- erp.add_history(table) creates erp.<table>_history and
-- erp.<table>_as_of for an entity table keyed by (source, id) with the
-- shared columns. A migration adding a stream with history calls it;
-- the history table's readers are the entity table's readers.
-- +goose StatementBegin
CREATE PROCEDURE erp.add_history(tbl text)
LANGUAGE plpgsql AS $proc$
DECLARE
    entity  regclass := format('erp.%I', tbl)::regclass;
    hist    text := tbl || '_history';
    live    text;  -- the entity's columns as the live row gives them
    old     text;  -- the same, from a history row
    r       text;
BEGIN
    SELECT string_agg(CASE attname WHEN 'deleted_at' THEN 'NULL::timestamptz' ELSE quote_ident(attname) END, ', ' ORDER BY attnum),
           string_agg(CASE attname WHEN 'deleted_at' THEN 'NULL::timestamptz' WHEN 'synced_at' THEN 'valid_from'
                      ELSE quote_ident(attname) END, ', ' ORDER BY attnum)
      INTO live, old
      FROM pg_attribute WHERE attrelid = entity AND attnum > 0 AND NOT attisdropped;

    EXECUTE format('CREATE TABLE erp.%I (LIKE %s)', hist, entity);
    EXECUTE format($f$ALTER TABLE erp.%I
        DROP COLUMN synced_at, DROP COLUMN deleted_at,
        ADD COLUMN valid_from timestamptz NOT NULL,
        ADD COLUMN valid_to   timestamptz NOT NULL,
        ADD COLUMN ended_by   text        NOT NULL CHECK (ended_by IN ('change', 'deletion')),
        ADD PRIMARY KEY (source, id, valid_from),
        ADD CHECK (valid_to > valid_from)$f$, hist);
    -- "What changed this week" reads by valid_to.
    EXECUTE format('CREATE INDEX %I ON erp.%I (valid_to)', hist || '_valid_to', hist);

    EXECUTE format($f$CREATE FUNCTION erp.%I(ts timestamptz) RETURNS SETOF %s
        LANGUAGE sql STABLE AS $body$
            SELECT %s FROM %s
            WHERE synced_at <= ts AND (deleted_at IS NULL OR deleted_at > ts)
            UNION ALL
            SELECT %s FROM erp.%I
            WHERE valid_from <= ts AND valid_to > ts
        $body$$f$, tbl || '_as_of', entity, live, entity, old, hist);

    -- Whoever may read only some companies' rows of the table may read
    -- only theirs in its history.
    IF (SELECT relrowsecurity FROM pg_class WHERE oid = entity) THEN
        CALL erp.restrict_to_companies(hist);
    END IF;

    -- History is appended, never rewritten: the daemon's role may add
    -- versions and nothing else.
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_runtime') THEN
        EXECUTE format('REVOKE ALL ON erp.%I FROM erpsync_runtime', hist);
        EXECUTE format('GRANT SELECT, INSERT ON erp.%I TO erpsync_runtime', hist);
    END IF;
    FOREACH r IN ARRAY ARRAY['erpsync_analyst', 'erpsync_sensitive'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) AND has_table_privilege(r, entity, 'SELECT') THEN
            EXECUTE format('GRANT SELECT ON erp.%I TO %I', hist, r);
        END IF;
    END LOOP;
END
$proc$;
-- +goose StatementEnd
REVOKE ALL ON PROCEDURE erp.add_history(text) FROM PUBLIC;

CALL erp.add_history('invoices');
CALL erp.add_history('currencies');
CALL erp.add_history('cashboxes');
CALL erp.add_history('cashbox_reconciliations');
CALL erp.add_history('journal_entries');
CALL erp.add_history('payment_vouchers');
CALL erp.add_history('receipt_vouchers');
CALL erp.add_history('messaging_conversations');
CALL erp.add_history('messaging_messages');
CALL erp.add_history('messaging_templates');
CALL erp.add_history('messaging_queue');

-- +goose Down
DROP FUNCTION erp.messaging_queue_as_of(timestamptz);
DROP FUNCTION erp.messaging_templates_as_of(timestamptz);
DROP FUNCTION erp.messaging_messages_as_of(timestamptz);
DROP FUNCTION erp.messaging_conversations_as_of(timestamptz);
DROP FUNCTION erp.receipt_vouchers_as_of(timestamptz);
DROP FUNCTION erp.payment_vouchers_as_of(timestamptz);
DROP FUNCTION erp.journal_entries_as_of(timestamptz);
DROP FUNCTION erp.cashbox_reconciliations_as_of(timestamptz);
DROP FUNCTION erp.cashboxes_as_of(timestamptz);
DROP FUNCTION erp.currencies_as_of(timestamptz);
DROP FUNCTION erp.invoices_as_of(timestamptz);
DROP TABLE erp.messaging_queue_history, erp.messaging_templates_history, erp.messaging_messages_history,
    erp.messaging_conversations_history, erp.receipt_vouchers_history, erp.payment_vouchers_history,
    erp.journal_entries_history, erp.cashbox_reconciliations_history, erp.cashboxes_history,
    erp.currencies_history, erp.invoices_history;
DROP PROCEDURE erp.add_history(text);
