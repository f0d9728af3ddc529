-- +goose Up
-- The as-of answers in parallel for every login. erp.<table>_as_of(ts)
-- was a UNION ALL of two filtered queries: the live rows current at ts
-- and the versions valid at ts. Postgres keeps a branch of a UNION ALL
-- that has a WHERE of its own as a subquery, planned apart, and the
-- policy's once-per-query tests (the init plans of erp.access_rule) are
-- then planned inside each branch: a subquery with init plans offers no
-- parallel plan, so every login that row-level security applies to read
-- the whole table on one process (3 to 5x the typed table's time at
-- 1,000,000 invoices, against under 2x for the superuser, whom the policy
-- does not apply to).
--
-- Now each branch only names its rows' validity, as two columns: the
-- live row is valid from synced_at until it was deleted (never, while it
-- is not), a version from valid_from to valid_to. One WHERE over the
-- UNION ALL tests both. Postgres folds the branches into the query that
-- calls the function, pushes the test into each, plans the policy's init
-- plans once, at the top, and hands their values to parallel workers:
-- a Parallel Append under one Gather, for every login. The answers are
-- the same rows: a version's valid_to is never open, and a live row is
-- valid until deleted_at, or for ever.
--
-- The function is still an SQL-standard body, inlined into the query
-- that calls it, so the caller's filters still reach the indexes
-- (invoices_synced for the live rows, <table>_history_valid_to for the
-- versions). Only the functions are written again: no table is touched,
-- nothing is locked longer than a catalog update takes.

-- erp.refresh_history(table) brings a history table and erp.<table>_as_of
-- up to the entity table's columns: columns added to the entity are added
-- to the history (NULL in versions written before), and the as-of function
-- is written again to return them. A table without deleted_at (journal
-- lines) keeps its rows until they are deleted, and their versions then
-- go to the history.
-- +goose StatementBegin
CREATE OR REPLACE PROCEDURE erp.refresh_history(tbl text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $proc$
DECLARE
    entity  regclass := pg_catalog.format('erp.%I', tbl)::regclass;
    hist    regclass := pg_catalog.format('erp.%I', tbl || '_history')::regclass;
    names   text;  -- the entity's columns, by name
    live    text;  -- the same as the live row gives them
    old     text;  -- the same, from a history row
    ends    text := '''infinity''::timestamptz';  -- when the live row stops being current
    col     record;
BEGIN
    FOR col IN
        SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = entity AND a.attnum > 0 AND NOT a.attisdropped
          AND a.attname NOT IN ('synced_at', 'deleted_at')
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute h WHERE h.attrelid = hist AND h.attname = a.attname AND NOT h.attisdropped)
        ORDER BY a.attnum
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN %I %s', hist, col.attname, col.type);
    END LOOP;
    SELECT string_agg(pg_catalog.quote_ident(attname), ', ' ORDER BY attnum),
           string_agg(CASE attname WHEN 'deleted_at' THEN 'NULL::timestamptz' ELSE pg_catalog.quote_ident(attname) END, ', ' ORDER BY attnum),
           string_agg(CASE attname WHEN 'deleted_at' THEN 'NULL::timestamptz' WHEN 'synced_at' THEN 'valid_from'
                      ELSE pg_catalog.quote_ident(attname) END, ', ' ORDER BY attnum)
      INTO names, live, old
      FROM pg_catalog.pg_attribute WHERE attrelid = entity AND attnum > 0 AND NOT attisdropped;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = entity AND attname = 'deleted_at' AND NOT attisdropped) THEN
        ends := 'coalesce(deleted_at, ''infinity''::timestamptz)';
    END IF;
    -- An SQL-standard body: its names are bound now, and Postgres still
    -- inlines it into the calling query, which then plans with the
    -- query's own filters (and in parallel: PARALLEL SAFE is decided
    -- before inlining). Neither branch of the UNION ALL may have a WHERE
    -- of its own: Postgres would plan that branch apart, with the
    -- policy's init plans inside it, and no parallel plan (see the top of
    -- this migration). A column of the tables it reads cannot be dropped
    -- or change type while it exists; refresh_history writes it again.
    EXECUTE pg_catalog.format($f$CREATE OR REPLACE FUNCTION erp.%1$I(ts timestamptz) RETURNS SETOF %2$s
        LANGUAGE sql STABLE PARALLEL SAFE
        BEGIN ATOMIC
            SELECT %3$s FROM (
                SELECT %4$s, synced_at, %5$s FROM %2$s
                UNION ALL
                SELECT %6$s, valid_from, valid_to FROM %7$s
            ) AS versions(%3$s, as_of_valid_from, as_of_valid_to)
            WHERE as_of_valid_from <= ts AND as_of_valid_to > ts;
        END$f$, tbl || '_as_of', entity, names, live, ends, old, hist);
END
$proc$;
-- +goose StatementEnd
REVOKE ALL ON PROCEDURE erp.refresh_history(text) FROM PUBLIC;

-- +goose StatementBegin
DO $$
DECLARE
    tbl text;
BEGIN
    FOR tbl IN
        SELECT left(c.relname, -length('_history')) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'erp' AND c.relkind = 'r' AND c.relname LIKE '%\_history'
          AND pg_catalog.to_regclass(pg_catalog.format('erp.%I', left(c.relname, -length('_history')))) IS NOT NULL
        ORDER BY 1
    LOOP
        CALL erp.refresh_history(tbl);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- The form of migration 16: a WHERE in each branch.
-- +goose StatementBegin
CREATE OR REPLACE PROCEDURE erp.refresh_history(tbl text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $proc$
DECLARE
    entity  regclass := pg_catalog.format('erp.%I', tbl)::regclass;
    hist    regclass := pg_catalog.format('erp.%I', tbl || '_history')::regclass;
    live    text;
    old     text;
    current text := 'synced_at <= ts';
    col     record;
BEGIN
    FOR col IN
        SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = entity AND a.attnum > 0 AND NOT a.attisdropped
          AND a.attname NOT IN ('synced_at', 'deleted_at')
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute h WHERE h.attrelid = hist AND h.attname = a.attname AND NOT h.attisdropped)
        ORDER BY a.attnum
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN %I %s', hist, col.attname, col.type);
    END LOOP;
    SELECT string_agg(CASE attname WHEN 'deleted_at' THEN 'NULL::timestamptz' ELSE pg_catalog.quote_ident(attname) END, ', ' ORDER BY attnum),
           string_agg(CASE attname WHEN 'deleted_at' THEN 'NULL::timestamptz' WHEN 'synced_at' THEN 'valid_from'
                      ELSE pg_catalog.quote_ident(attname) END, ', ' ORDER BY attnum)
      INTO live, old
      FROM pg_catalog.pg_attribute WHERE attrelid = entity AND attnum > 0 AND NOT attisdropped;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = entity AND attname = 'deleted_at' AND NOT attisdropped) THEN
        current := current || ' AND (deleted_at IS NULL OR deleted_at > ts)';
    END IF;
    EXECUTE pg_catalog.format($f$CREATE OR REPLACE FUNCTION erp.%I(ts timestamptz) RETURNS SETOF %s
        LANGUAGE sql STABLE PARALLEL SAFE
        BEGIN ATOMIC
            SELECT %s FROM %s WHERE %s
            UNION ALL
            SELECT %s FROM %s WHERE valid_from <= ts AND valid_to > ts;
        END$f$, tbl || '_as_of', entity, live, entity, current, old, hist);
END
$proc$;
-- +goose StatementEnd
REVOKE ALL ON PROCEDURE erp.refresh_history(text) FROM PUBLIC;

-- +goose StatementBegin
DO $$
DECLARE
    tbl text;
BEGIN
    FOR tbl IN
        SELECT left(c.relname, -length('_history')) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'erp' AND c.relkind = 'r' AND c.relname LIKE '%\_history'
          AND pg_catalog.to_regclass(pg_catalog.format('erp.%I', left(c.relname, -length('_history')))) IS NOT NULL
        ORDER BY 1
    LOOP
        CALL erp.refresh_history(tbl);
    END LOOP;
END
$$;
-- +goose StatementEnd
