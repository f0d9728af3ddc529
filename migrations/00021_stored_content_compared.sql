-- +goose Up
-- The warehouse's word is final against the daemon's own login. Postgres
-- cannot tell a sweep's write from any other write of the same login, so
-- nothing a sweep trusts may be something that login can write back:
--
-- 0. Sweeps compare stored content (internal/db/entities.go), never a
--    hash that role can write back over a changed row.
--
-- 1. A first lister nobody changes. Each entity row with listed_by gets
--    first_listed_by: the login that first listed it, whose context gives
--    the labels of a record that carries none, and to which listed_by
--    returns whenever that login lists the row. The daemon's role inserts
--    it and never updates it; the row trigger refuses a change once it is
--    set. Rows written before this migration get it from the trigger, on
--    their first update, from the listed_by they had before that update
--    (readers take coalesce(first_listed_by, listed_by)): filling it here
--    would rewrite every row inside this migration's transaction, which
--    holds the table's lock the while (21 s at 1,000,000 invoices, readers
--    waiting).
--
-- 2. Every time in a version is Postgres's. The row trigger stamps
--    deleted_at with now() when a row goes from live to deleted, whatever
--    the writer gave, and keeps it as it was while the row stays deleted:
--    OLD.deleted_at, which ends the version of a row that comes back from
--    a deletion, is always a time Postgres wrote. The sweeps' start times
--    in erp.sync_checkpoints, which the shortcut of known pages trusts,
--    are stamped the same way.
--
-- 3. A full comparison on a schedule the daemon's role cannot postpone
--    unseen. Page digests are bookkeeping that role writes, so a forged
--    one can keep a changed row out of one sweep's comparison. A sweep
--    that compares every page (a bulk load, a first sweep, and any sweep
--    begun when the login's last full comparison began more than a week
--    ago by Postgres's clock) says so when it starts
--    (sync_checkpoints.sweep_compares_all) and is recorded at its end in
--    erp.full_comparisons, which only erp.record_full_comparison writes,
--    stamped by Postgres, with the session that called it.
--
-- 4. What the release before let that role plant is found, reported in
--    erp.upgrade_findings and set right: a version ending later than its
--    key allows (after the next version began, after the row was last
--    written, or in the future) is cut back to that end; a row deleted in
--    the future is deleted when Postgres last wrote it; a sweep start in
--    the future is forgotten.

-- What upgrades found and set right, for the operator to read (migration
-- 19 makes it too, as it is here).
CREATE TABLE IF NOT EXISTS erp.upgrade_findings (
    found_at   timestamptz NOT NULL DEFAULT now(),
    migration  bigint      NOT NULL,
    table_name text        NOT NULL,
    key        text        NOT NULL,
    what       text        NOT NULL
);
COMMENT ON TABLE erp.upgrade_findings IS 'what a migration found wrong in the warehouse and set right, one row per finding';
CALL erp.apply_access('upgrade_findings', 'withheld');
REVOKE ALL ON erp.upgrade_findings FROM PUBLIC;

-- The tables the row trigger guards (migration 16's rule), and of those
-- the ones with listed_by.
-- +goose StatementBegin
CREATE FUNCTION pg_temp.guarded() RETURNS SETOF text
LANGUAGE sql STABLE AS $$
    SELECT c.relname::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'erp' AND c.relkind = 'r'
      AND (SELECT count(*) FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND NOT a.attisdropped
           AND a.attname IN ('payload', 'payload_hash', 'first_seen_at', 'synced_at', 'deleted_at')) = 5
    ORDER BY 1
$$;
-- +goose StatementEnd

-- 4. Planted times, found and set right before anything else takes the
-- tables' locks. A version's end is at most the start of the next version
-- of its key, or the row's last write when it is the last, and never in
-- the future; a version cut to nothing is removed. Either way the
-- finding keeps the version as it was. The row trigger is off while a
-- row planted as deleted in the future is set right: it would keep a
-- version until that time.
-- +goose StatementBegin
DO $$
DECLARE
    tbl  text;
    hist regclass;
    keys text[];
    kx   text;  -- the key as text, of alias h
    kj   text;  -- h's key equals r's
    kp   text;  -- h's key columns
    planted boolean;
BEGIN
    FOR tbl IN SELECT pg_temp.guarded() LOOP
        SELECT array_agg(a.attname::text ORDER BY k.ord) INTO keys
        FROM pg_catalog.pg_index i, unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord), pg_catalog.pg_attribute a
        WHERE i.indrelid = pg_catalog.format('erp.%I', tbl)::regclass AND i.indisprimary
          AND a.attrelid = i.indrelid AND a.attnum = k.attnum;
        SELECT string_agg(pg_catalog.format('h.%I', x), ' || ''/'' || '),
               string_agg(pg_catalog.format('h.%1$I = r.%1$I', x), ' AND '),
               string_agg(pg_catalog.format('h.%I', x), ', ')
          INTO kx, kj, kp FROM unnest(keys) x;
        hist := pg_catalog.to_regclass(pg_catalog.format('erp.%I', tbl || '_history'));
        IF hist IS NOT NULL THEN
            EXECUTE pg_catalog.format($q$
WITH v AS (
    SELECT h.ctid AS at, h.valid_from, h.valid_to, %3$s AS key, pg_catalog.to_jsonb(h) AS version,
           least(coalesce(lead(h.valid_from) OVER (PARTITION BY %5$s ORDER BY h.valid_from), r.synced_at), now()) AS allowed
    FROM %1$s h JOIN erp.%2$I r ON %4$s
), planted AS (
    SELECT * FROM v WHERE valid_to > allowed
), found AS (
    INSERT INTO erp.upgrade_findings (migration, table_name, key, what)
    SELECT 21, %6$L, key, CASE WHEN allowed > valid_from
        THEN pg_catalog.format('a version ended at %%s, later than its key allows; it now ends at %%s. The version as it was: %%s', valid_to, allowed, version)
        ELSE pg_catalog.format('a version ended at %%s, later than its key allows, and began when the next began; it is removed. The version as it was: %%s', valid_to, version)
    END FROM planted
), cut AS (
    UPDATE %1$s h SET valid_to = p.allowed FROM planted p WHERE h.ctid = p.at AND p.allowed > p.valid_from
)
DELETE FROM %1$s h USING planted p WHERE h.ctid = p.at AND p.allowed <= p.valid_from$q$,
                hist, tbl, kx, kj, kp, tbl || '_history');
        END IF;
        EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM erp.%I WHERE deleted_at > now())', tbl) INTO STRICT planted;
        IF planted THEN
            EXECUTE pg_catalog.format('ALTER TABLE erp.%I DISABLE TRIGGER guard_rows', tbl);
            EXECUTE pg_catalog.format($q$
WITH planted AS (
    SELECT h.ctid AS at, %2$s AS key, h.deleted_at, least(h.synced_at, now()) AS right_at, pg_catalog.to_jsonb(h) AS row
    FROM erp.%1$I h WHERE h.deleted_at > now()
), found AS (
    INSERT INTO erp.upgrade_findings (migration, table_name, key, what)
    SELECT 21, %1$L, key, pg_catalog.format('a row deleted at %%s, in the future; now deleted at %%s, when it was last written. The row as it was: %%s',
        deleted_at, right_at, row)
    FROM planted
)
UPDATE erp.%1$I h SET deleted_at = p.right_at FROM planted p WHERE h.ctid = p.at$q$,
                tbl, (SELECT string_agg(pg_catalog.format('h.%I', x), ' || ''/'' || ') FROM unnest(keys) x));
            EXECUTE pg_catalog.format('ALTER TABLE erp.%I ENABLE TRIGGER guard_rows', tbl);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- A sweep start in the future: the sweep in progress started now, the
-- last complete one is forgotten (its digests compare nothing).
WITH planted AS (
    SELECT c.ctid AS at, c.source || '/' || c.stream || '/' || c.login AS key, c.sweep_started_at, c.last_sweep_started_at
    FROM erp.sync_checkpoints c WHERE c.sweep_started_at > now() OR c.last_sweep_started_at > now()
), found AS (
    INSERT INTO erp.upgrade_findings (migration, table_name, key, what)
    SELECT 21, 'sync_checkpoints', key, format('a sweep start in the future (sweep_started_at %s, last_sweep_started_at %s): '
        'the sweep in progress is taken to have started now, and the last complete sweep''s start is forgotten', sweep_started_at, last_sweep_started_at)
    FROM planted
)
UPDATE erp.sync_checkpoints c SET
    sweep_started_at = CASE WHEN c.sweep_started_at > now() THEN now() ELSE c.sweep_started_at END,
    last_sweep_started_at = CASE WHEN c.last_sweep_started_at > now() THEN NULL ELSE c.last_sweep_started_at END
FROM planted p WHERE c.ctid = p.at;

-- +goose StatementBegin
DO $$
DECLARE
    n bigint;
BEGIN
    SELECT count(*) INTO n FROM erp.upgrade_findings WHERE migration = 21;
    IF n > 0 THEN
        RAISE WARNING 'erpsync: % time(s) no sync wrote were set right (versions, deletions, sweep starts); SELECT * FROM erp.upgrade_findings WHERE migration = 21 says what was found', n;
    END IF;
END
$$;
-- +goose StatementEnd

-- 1. The first lister, on every guarded table with listed_by, and in its
-- history (refresh_history adds the column, NULL in versions of before).
-- +goose StatementBegin
DO $$
DECLARE
    tbl text;
BEGIN
    FOR tbl IN
        SELECT g FROM pg_temp.guarded() g
        WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                      WHERE a.attrelid = pg_catalog.format('erp.%I', g)::regclass AND a.attname = 'listed_by' AND NOT a.attisdropped)
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE erp.%I ADD COLUMN first_listed_by text', tbl);
        EXECUTE pg_catalog.format($c$COMMENT ON COLUMN erp.%I.first_listed_by IS
            'the login that first listed the row: its context labels a record that carries none, and listed_by returns to it whenever it lists the row (NULL: the row has not been written since before it was kept; listed_by is then still the first)'$c$, tbl);
        IF pg_catalog.to_regclass(pg_catalog.format('erp.%I', tbl || '_history')) IS NOT NULL THEN
            CALL erp.refresh_history(tbl);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- erp.guard_rows(table), as migration 16 made it, and besides:
--   - keeps first_listed_by: a row without one takes, on its first update,
--     the listed_by it had (or, if it had none, the one it is given); a
--     change of one already set is refused;
--   - stamps deleted_at: now() when the row goes from live to deleted,
--     unchanged while it stays deleted, whatever the writer gave;
--   - ends the version of a row that comes back from a deletion of before
--     migration 16 no later than now();
--   - gives the daemon's role INSERT on first_listed_by, never UPDATE;
--   - no longer marks a row changed without its payload_hash with
--     erp.stale_hash(): sweeps compare content, and the mark would fall on
--     a sweep's own repair of a row whose hash was written back (the
--     repair writes that very hash again).
-- +goose StatementBegin
CREATE OR REPLACE PROCEDURE erp.guard_rows(tbl text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $proc$
DECLARE
    entity  regclass := pg_catalog.format('erp.%I', tbl)::regclass;
    hist    regclass := pg_catalog.to_regclass(pg_catalog.format('erp.%I', tbl || '_history'));
    fn      text := tbl || '_guard';
    keycols text[];
    content text[];  -- what a change of leaves a version: labels, listed_by, payload, typed columns
    hcols   text[];  -- the history's columns the entity has
    keep    text := '';
    lister  text := '';
    firsts  text := '';
    c       text;
BEGIN
    SELECT array_agg(a.attname ORDER BY k.ord) INTO keycols
    FROM pg_catalog.pg_index i, unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord), pg_catalog.pg_attribute a
    WHERE i.indrelid = entity AND i.indisprimary AND a.attrelid = entity AND a.attnum = k.attnum;
    SELECT array_agg(attname ORDER BY attnum) INTO content FROM pg_catalog.pg_attribute
    WHERE attrelid = entity AND attnum > 0 AND NOT attisdropped
      AND attname::text <> ALL (keycols || ARRAY['first_seen_at', 'synced_at', 'deleted_at', 'payload_hash', 'first_listed_by']);
    IF keycols IS NULL OR content IS NULL THEN
        RAISE EXCEPTION 'erp.%: not an entity table (a primary key, payload, payload_hash, first_seen_at, synced_at, deleted_at)', tbl;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = entity AND attname = 'first_listed_by' AND NOT attisdropped)
       AND 'listed_by' = ANY (content) THEN
        lister := $l$
    IF OLD.first_listed_by IS NULL THEN
        NEW.first_listed_by := coalesce(OLD.listed_by, NEW.listed_by);
    ELSIF NEW.first_listed_by IS DISTINCT FROM OLD.first_listed_by THEN
        RAISE EXCEPTION 'erp.%: the first lister of a row never changes', TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
    END IF;$l$;
        firsts := ', first_listed_by';
    END IF;
    IF hist IS NOT NULL THEN
        SELECT array_agg(h.attname ORDER BY h.attnum) INTO hcols FROM pg_catalog.pg_attribute h
        WHERE h.attrelid = hist AND h.attnum > 0 AND NOT h.attisdropped
          AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = entity AND a.attname = h.attname AND NOT a.attisdropped);
        keep := pg_catalog.format($k$
    IF OLD.deleted_at IS NULL THEN
        IF OLD.synced_at < now() THEN
            INSERT INTO %1$s (%2$s, valid_from, valid_to, ended_by)
            VALUES (%3$s, OLD.synced_at, now(), CASE WHEN NEW.deleted_at IS NULL THEN 'change' ELSE 'deletion' END);
        END IF;
    ELSIF least(OLD.deleted_at, now()) > OLD.synced_at THEN
        INSERT INTO %1$s (%2$s, valid_from, valid_to, ended_by)
        VALUES (%3$s, OLD.synced_at, least(OLD.deleted_at, now()), 'deletion');
    END IF;$k$, hist,
            (SELECT string_agg(pg_catalog.quote_ident(x), ', ') FROM unnest(hcols) x),
            (SELECT string_agg('OLD.' || pg_catalog.quote_ident(x), ', ') FROM unnest(hcols) x));
    END IF;
    EXECUTE pg_catalog.format($f$CREATE OR REPLACE FUNCTION erp.%1$I() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $body$
BEGIN
    IF (%2$s, NEW.first_seen_at) IS DISTINCT FROM (%3$s, OLD.first_seen_at) THEN
        RAISE EXCEPTION 'erp.%4$s: the key and first_seen_at of a row never change' USING ERRCODE = 'insufficient_privilege';
    END IF;%8$s
    IF NEW.deleted_at IS NOT NULL THEN
        NEW.deleted_at := coalesce(OLD.deleted_at, now());
    END IF;
    IF (%5$s, NEW.deleted_at) IS NOT DISTINCT FROM (%6$s, OLD.deleted_at) THEN
        RETURN NEW;
    END IF;%7$s
    NEW.synced_at := now();
    RETURN NEW;
END
$body$$f$, fn,
        (SELECT string_agg('NEW.' || pg_catalog.quote_ident(x), ', ') FROM unnest(keycols) x),
        (SELECT string_agg('OLD.' || pg_catalog.quote_ident(x), ', ') FROM unnest(keycols) x),
        tbl,
        (SELECT string_agg('NEW.' || pg_catalog.quote_ident(x), ', ') FROM unnest(content) x),
        (SELECT string_agg('OLD.' || pg_catalog.quote_ident(x), ', ') FROM unnest(content) x),
        keep, lister);
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION erp.%I() FROM PUBLIC', fn);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS guard_rows ON %s', entity);
    EXECUTE pg_catalog.format('CREATE TRIGGER guard_rows BEFORE UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION erp.%I()', entity, fn);

    -- The daemon's role inserts the columns a sync writes (first_seen_at
    -- and synced_at take their defaults) and updates them, never the key
    -- or the first lister.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'erpsync_runtime') THEN
        EXECUTE pg_catalog.format('REVOKE INSERT, UPDATE ON %s FROM erpsync_runtime', entity);
        SELECT string_agg(pg_catalog.quote_ident(x), ', ') INTO c FROM unnest(keycols || content) x;
        EXECUTE pg_catalog.format('GRANT INSERT (%s, payload_hash%s) ON %s TO erpsync_runtime', c, firsts, entity);
        SELECT string_agg(pg_catalog.quote_ident(x), ', ') INTO c FROM unnest(content) x;
        EXECUTE pg_catalog.format('GRANT UPDATE (%s, payload_hash, deleted_at) ON %s TO erpsync_runtime', c, entity);
    END IF;
END
$proc$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
DECLARE
    tbl text;
BEGIN
    FOR tbl IN SELECT pg_temp.guarded() LOOP
        CALL erp.guard_rows(tbl);
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP FUNCTION pg_temp.guarded();

-- 2. The times of sweeps, stamped by Postgres: a sweep starts when its
-- checkpoint takes a new sweep_id, and the last complete sweep started
-- when the sweep it names did; a start nobody can tell is NULL (the
-- shortcut of known pages then compares every row changed since ever).
-- sweep_compares_all: the sweep in progress compares every page (see
-- erp.full_comparisons).
ALTER TABLE erp.sync_checkpoints ADD COLUMN sweep_compares_all boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN erp.sync_checkpoints.sweep_compares_all IS
    'the sweep in progress compares every page with the warehouse (no page digest used): recorded in erp.full_comparisons when it completes';
-- +goose StatementBegin
CREATE FUNCTION erp.stamp_sweep_times() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.sweep_started_at := CASE WHEN NEW.sweep_id IS NOT NULL THEN now() END;
        NEW.last_sweep_started_at := NULL;
        RETURN NEW;
    END IF;
    NEW.sweep_started_at := CASE
        WHEN NEW.sweep_id IS NOT DISTINCT FROM OLD.sweep_id THEN OLD.sweep_started_at
        WHEN NEW.sweep_id IS NOT NULL THEN now()
    END;
    NEW.last_sweep_started_at := CASE
        WHEN NEW.last_sweep_id IS NOT DISTINCT FROM OLD.last_sweep_id THEN OLD.last_sweep_started_at
        WHEN NEW.last_sweep_id = OLD.sweep_id THEN OLD.sweep_started_at
    END;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION erp.stamp_sweep_times() FROM PUBLIC;
CREATE TRIGGER stamp_sweep_times BEFORE INSERT OR UPDATE ON erp.sync_checkpoints FOR EACH ROW EXECUTE FUNCTION erp.stamp_sweep_times();

-- 3. The full comparisons of each login's stream: one row per sweep that
-- compared every page, written only by erp.record_full_comparison.
CREATE TABLE erp.full_comparisons (
    source      text        NOT NULL,
    stream      text        NOT NULL,
    login       text        NOT NULL,
    sweep_id    bigint      NOT NULL,
    began_at    timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    recorded_by name        NOT NULL DEFAULT session_user,
    PRIMARY KEY (source, stream, login, sweep_id)
);
CREATE INDEX full_comparisons_began ON erp.full_comparisons (source, stream, login, began_at DESC);
COMMENT ON TABLE erp.full_comparisons IS
    'complete sweeps that compared every page with the warehouse: began_at is the sweep''s start as Postgres stamped it, recorded_at its end; a login''s sweeps use page digests only while its last one began within a week';
CALL erp.apply_access('full_comparisons', 'by_login');

-- erp.record_full_comparison(source, stream, login, sweep) records that
-- the sweep in progress, which its checkpoint says compares every page,
-- did; it returns when that sweep began.
-- +goose StatementBegin
CREATE FUNCTION erp.record_full_comparison(source text, stream text, login text, sweep_id bigint) RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    began timestamptz;
BEGIN
    SELECT c.sweep_started_at INTO began FROM erp.sync_checkpoints c
    WHERE c.source = $1 AND c.stream = $2 AND c.login = $3 AND c.sweep_id = $4 AND c.sweep_compares_all;
    IF began IS NULL THEN
        RAISE EXCEPTION 'erp.record_full_comparison: sweep % of %/% through % is not in progress comparing every page', $4, $1, $2, $3;
    END IF;
    INSERT INTO erp.full_comparisons (source, stream, login, sweep_id, began_at) VALUES ($1, $2, $3, $4, began)
    ON CONFLICT ON CONSTRAINT full_comparisons_pkey DO NOTHING;
    RETURN began;
END
$fn$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION erp.record_full_comparison(text, text, text, bigint) FROM PUBLIC;

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'erpsync_runtime') THEN
        REVOKE ALL ON erp.upgrade_findings, erp.full_comparisons FROM erpsync_runtime;
        GRANT SELECT ON erp.full_comparisons TO erpsync_runtime;
        GRANT EXECUTE ON FUNCTION erp.record_full_comparison(text, text, text, bigint) TO erpsync_runtime;
        -- Sweeps' starts are Postgres's (stamp_sweep_times), and which
        -- sweep compares every page the daemon says when it starts one.
        REVOKE UPDATE (sweep_started_at, last_sweep_started_at) ON erp.sync_checkpoints FROM erpsync_runtime;
        GRANT UPDATE (sweep_compares_all) ON erp.sync_checkpoints TO erpsync_runtime;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'erpsync_analyst') THEN
        GRANT SELECT ON erp.upgrade_findings, erp.full_comparisons TO erpsync_analyst;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'erpsync_scoped') THEN
        GRANT SELECT ON erp.full_comparisons TO erpsync_scoped;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'erpsync_sensitive') THEN
        GRANT SELECT ON erp.upgrade_findings, erp.full_comparisons TO erpsync_sensitive;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    RAISE EXCEPTION 'migration 21 cannot be undone: it would let the daemon''s role plant times in versions again; restore the warehouse from a backup taken before it';
END
$$;
-- +goose StatementEnd
