-- +goose Up
-- Access that holds. Reading is denied unless granted:
--
--   erpsync_analyst  reads the whole warehouse's finance tables: full read
--                    access is this role, granted explicitly.
--   erpsync_scoped   the SELECT of logins limited to some companies
--                    (erp.grant_company); by itself it sees no row.
--
-- The row-level security policies are keyed on the session's login
-- (session_user), not on the role it has set: a login that holds a
-- company grant, directly or through a role it is a member of, is scoped,
-- whatever roles it is also a member of or sets (SET ROLE erpsync_analyst
-- changes nothing). A login with no grant reads every row only as a
-- member of erpsync_analyst, erpsync_sensitive, erpsync_runtime or the
-- schema's owner; any other login sees none. The cost: a pooler that
-- connects as one login and SET ROLEs to its users' roles is scoped as
-- that one login.
--
-- The caller's grants are read once per query, not once per row: the
-- policies call the erp.session_* functions in init plans, whose values
-- the leader hands to parallel workers, and test each row with plain
-- (leakproof) operators against them, so that an index condition on the
-- table survives the policy. The functions are PARALLEL SAFE: a policy
-- calling an unsafe one would turn parallel scans off.

-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_scoped') THEN
        BEGIN
            CREATE ROLE erpsync_scoped NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN NULL;
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'role erpsync_scoped does not exist and the migrating user may not create it'
                    USING HINT = 'A superuser runs: CREATE ROLE erpsync_scoped NOLOGIN; then erpsync migrate again.';
        END;
    END IF;
END
$$;
-- +goose StatementEnd

-- The grants that apply to the session's login: to it, or to a role it is
-- a member of. Grants of roles dropped since are left out.
-- +goose StatementBegin
CREATE FUNCTION erp.session_grants() RETURNS TABLE (source text, company_id text, branch_id text)
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT g.source, g.company_id, g.branch_id
    FROM erp.company_grants g JOIN pg_roles r ON r.oid = g.role
    WHERE pg_has_role(session_user, r.oid, 'MEMBER')
$$;
-- +goose StatementEnd

-- Whether the session reads every row: its login holds no company grant,
-- and is a member of a role that reads everything.
-- +goose StatementBegin
CREATE FUNCTION erp.session_reads_all() RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT NOT EXISTS (SELECT 1 FROM erp.session_grants())
       AND EXISTS (SELECT 1 FROM pg_roles r
                   WHERE (r.rolname IN ('erpsync_analyst', 'erpsync_sensitive', 'erpsync_runtime')
                          OR r.oid = (SELECT nspowner FROM pg_namespace WHERE nspname = 'erp'))
                     AND pg_has_role(session_user, r.oid, 'MEMBER'))
$$;
-- +goose StatementEnd

-- The grants as the policies test them: the sources of the session's
-- grants (of its company-wide ones when company_wide is true, of its
-- branch ones when false), the companies of its company-wide grants, and
-- whether those are every pairing of those sources and companies (the
-- usual case: one source, some companies), which one row's source and
-- company then need no other test.
-- +goose StatementBegin
CREATE FUNCTION erp.session_sources(company_wide boolean DEFAULT NULL) RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT coalesce(array_agg(DISTINCT g.source), '{}') FROM erp.session_grants() g
    WHERE company_wide IS NULL OR (g.branch_id IS NULL) = company_wide
$$;
CREATE FUNCTION erp.session_companies() RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT coalesce(array_agg(DISTINCT g.company_id), '{}') FROM erp.session_grants() g WHERE g.branch_id IS NULL
$$;
CREATE FUNCTION erp.session_companies_are_product() RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT count(DISTINCT (g.source, g.company_id)) = count(DISTINCT g.source) * count(DISTINCT g.company_id)
    FROM erp.session_grants() g WHERE g.branch_id IS NULL
$$;
-- +goose StatementEnd
-- Every role that reads a policed table runs them (the policies call
-- them as the reader); they tell a session only of its own grants.

-- erp.restrict_to_companies(table) and erp.restrict_to_sources(table) put
-- the rule on a table: its rows are read by the sessions that read all,
-- and by the scoped ones per (source, company[, branch]), or per source
-- for rows a source's companies share (currencies and their rates, and
-- the bookkeeping of runs). FORCE: the table's owner is held to it too.
-- Writes are left to privileges.
-- +goose StatementBegin
CREATE OR REPLACE PROCEDURE erp.restrict_to_companies(tbl text)
LANGUAGE plpgsql AS $proc$
BEGIN
    CALL erp.restrict(tbl, $r$(source = ANY ((SELECT erp.session_sources(true))::text[]) AND company_id = ANY ((SELECT erp.session_companies())::text[])
            AND ((SELECT erp.session_companies_are_product())
                 OR (source, company_id) IN (SELECT g.source, g.company_id FROM erp.session_grants() g WHERE g.branch_id IS NULL)))
        OR (source = ANY ((SELECT erp.session_sources(false))::text[])
            AND (source, company_id, branch_id) IN (SELECT g.source, g.company_id, g.branch_id FROM erp.session_grants() g WHERE g.branch_id IS NOT NULL))$r$);
END
$proc$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE PROCEDURE erp.restrict_to_sources(tbl text)
LANGUAGE plpgsql AS $proc$
BEGIN
    CALL erp.restrict(tbl, $r$source = ANY ((SELECT erp.session_sources())::text[])$r$);
END
$proc$;
-- +goose StatementEnd

-- erp.withhold_from_scoped(table): read only by the sessions that read
-- all; a scoped login sees no row, whatever roles it also holds.
-- +goose StatementBegin
CREATE PROCEDURE erp.withhold_from_scoped(tbl text)
LANGUAGE plpgsql AS $proc$
BEGIN
    CALL erp.restrict(tbl, 'false');
END
$proc$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE PROCEDURE erp.restrict(tbl text, scoped text)
LANGUAGE plpgsql AS $proc$
DECLARE
    t regclass := format('erp.%I', tbl)::regclass;
    p text;
BEGIN
    FOR p IN SELECT policyname FROM pg_policies WHERE schemaname = 'erp' AND tablename = tbl LOOP
        EXECUTE format('DROP POLICY %I ON %s', p, t);
    END LOOP;
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY reads ON %s AS PERMISSIVE FOR SELECT USING ((SELECT erp.session_reads_all()) OR %s)', t, scoped);
    EXECUTE format('CREATE POLICY writes ON %s AS PERMISSIVE FOR INSERT WITH CHECK (true)', t);
    EXECUTE format('CREATE POLICY updates ON %s AS PERMISSIVE FOR UPDATE USING (true) WITH CHECK (true)', t);
    EXECUTE format('CREATE POLICY deletes ON %s AS PERMISSIVE FOR DELETE USING (true)', t);
END
$proc$;
-- +goose StatementEnd
REVOKE ALL ON PROCEDURE erp.restrict_to_companies(text), erp.restrict_to_sources(text), erp.withhold_from_scoped(text),
    erp.restrict(text, text) FROM PUBLIC;

-- Every table with a company: by company. Currencies and their rates
-- (shared by a source's companies) and the bookkeeping of runs (a scoped
-- login sees its sources', so a dashboard's source list holds only
-- those): by source.
-- +goose StatementBegin
DO $$
DECLARE
    tbl text;
BEGIN
    FOR tbl IN
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'erp' AND c.relkind = 'r' AND c.relpersistence = 'p'
          AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'company_id' AND NOT a.attisdropped)
          AND c.relname NOT IN ('currencies', 'currencies_history', 'company_grants')
        ORDER BY c.relname
    LOOP
        CALL erp.restrict_to_companies(tbl);
    END LOOP;
    FOREACH tbl IN ARRAY ARRAY['currencies', 'currencies_history', 'currency_rates', 'sync_checkpoints', 'sync_runs'] LOOP
        CALL erp.restrict_to_sources(tbl);
    END LOOP;
    -- The rest name records without saying whose company they are of
    -- (rejected records and drift quote values, the documents whose lines
    -- were read, the sweeps' bookkeeping): withheld from scoped sessions,
    -- whatever roles they also hold.
    FOR tbl IN
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'erp' AND c.relkind = 'r' AND c.relname <> 'company_grants'
          AND NOT EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'reads')
        ORDER BY c.relname
    LOOP
        CALL erp.withhold_from_scoped(tbl);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- Grants: each role reads its own, through its login's memberships; only
-- the schema's owner writes them (erp.grant_company, erp.revoke_company).
DROP POLICY own_grants ON erp.company_grants;
CREATE POLICY own_grants ON erp.company_grants FOR SELECT USING (pg_has_role(session_user, role, 'MEMBER'));
ALTER TABLE erp.company_grants FORCE ROW LEVEL SECURITY;
CREATE POLICY owner_writes ON erp.company_grants FOR ALL
    USING (pg_has_role(session_user, (SELECT nspowner FROM pg_namespace WHERE nspname = 'erp'), 'MEMBER'))
    WITH CHECK (pg_has_role(session_user, (SELECT nspowner FROM pg_namespace WHERE nspname = 'erp'), 'MEMBER'));
REVOKE ALL ON erp.company_grants FROM PUBLIC;
GRANT SELECT ON erp.company_grants TO PUBLIC;

-- erp.grant_company scopes a role: the grant, and erpsync_scoped (which
-- by itself sees nothing) for its SELECT.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION erp.grant_company(role regrole, source text, company_id text, branch_id text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO erp.company_grants (role, source, company_id, branch_id)
    VALUES (role, source, company_id, branch_id) ON CONFLICT DO NOTHING;
    IF NOT pg_has_role(role, 'erpsync_scoped', 'MEMBER') THEN
        BEGIN
            EXECUTE format('GRANT erpsync_scoped TO %s', role);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'company granted, but % does not read through erpsync_scoped and you may not make it: a superuser runs GRANT erpsync_scoped TO %', role, role;
        END;
    END IF;
END
$fn$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION erp.grant_company(regrole, text, text, text) FROM PUBLIC;

-- Roles scoped before were made members of erpsync_analyst, which now
-- reads everything: that membership goes (their grants would win over it
-- anyway), and they read through erpsync_scoped.
-- +goose StatementBegin
DO $$
DECLARE
    r regrole;
BEGIN
    FOR r IN SELECT DISTINCT g.role FROM erp.company_grants g JOIN pg_roles x ON x.oid = g.role LOOP
        BEGIN
            IF EXISTS (SELECT 1 FROM pg_auth_members m WHERE m.member = r AND m.roleid = 'erpsync_analyst'::regrole) THEN
                EXECUTE format('REVOKE erpsync_analyst FROM %s', r);
            END IF;
            IF NOT pg_has_role(r, 'erpsync_scoped', 'MEMBER') THEN
                EXECUTE format('GRANT erpsync_scoped TO %s', r);
            END IF;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role % holds company grants and is a member of erpsync_analyst, which now reads every company; the migrating user may not change its memberships', r
                USING HINT = format('A superuser runs: REVOKE erpsync_analyst FROM %s; GRANT erpsync_scoped TO %s; then erpsync migrate again.', r, r);
        END;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- What each role may do. The scoped role reads the finance tables, views,
-- history and as-of answers (rows as the policies allow), and the
-- bookkeeping of runs without error texts; never rejected records, drift
-- (they quote other companies' values) or which documents' lines were
-- read. The daemon's role writes rows but never the grants, and never
-- deletes from the tables it only marks deleted (entities and their
-- history); it rewrites its bookkeeping, snapshots and journal lines.
-- +goose StatementBegin
DO $$
DECLARE
    rel text;
BEGIN
    GRANT USAGE ON SCHEMA erp TO erpsync_scoped;
    FOR rel IN
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'erp' AND c.relkind IN ('r', 'v')
          AND has_table_privilege('erpsync_analyst', c.oid, 'SELECT')
          AND c.relname NOT IN ('rejected_records', 'schema_drift', 'journal_line_documents', 'sync_runs')
    LOOP
        EXECUTE format('GRANT SELECT ON erp.%I TO erpsync_scoped', rel);
    END LOOP;
    GRANT SELECT (id, source, stream, login, started_at, finished_at, status, sweep_id, pages, rows_seen, rows_inserted,
        rows_updated, rows_unchanged, rows_rejected, rows_deleted, host, pid) ON erp.sync_runs TO erpsync_scoped;

    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_runtime') THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON erp.company_grants FROM erpsync_runtime;
        FOR rel IN
            SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'erp' AND c.relkind = 'r'
              AND (c.relname LIKE '%\_history'
                   OR EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'deleted_at' AND NOT a.attisdropped)
                   OR c.relname IN ('currency_rates', 'messaging_stats'))
        LOOP
            EXECUTE format('REVOKE DELETE, TRUNCATE ON erp.%I FROM erpsync_runtime', rel);
        END LOOP;
        -- Tables added later get rows, not DELETE: a stream's migration
        -- grants DELETE where the stream rewrites.
        ALTER DEFAULT PRIVILEGES IN SCHEMA erp REVOKE DELETE ON TABLES FROM erpsync_runtime;
    END IF;
END
$$;
-- +goose StatementEnd

-- erp.add_history(table), for a stream added later, gives the history
-- table its entity's rule (by company or by source) and readers,
-- erpsync_scoped included.
-- +goose StatementBegin
CREATE OR REPLACE PROCEDURE erp.add_history(tbl text)
LANGUAGE plpgsql AS $proc$
DECLARE
    entity     regclass := format('erp.%I', tbl)::regclass;
    hist       text := tbl || '_history';
    by_company boolean;
    r          text;
BEGIN
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
    -- erp.<table>_as_of.
    CALL erp.refresh_history(tbl);

    SELECT bool_or(qual LIKE '%company_id%') INTO by_company
      FROM pg_policies WHERE schemaname = 'erp' AND tablename = tbl AND cmd = 'SELECT';
    IF by_company THEN
        CALL erp.restrict_to_companies(hist);
    ELSIF by_company IS NOT NULL THEN
        CALL erp.restrict_to_sources(hist);
    END IF;

    -- History is appended, never rewritten: the daemon's role may add
    -- versions and nothing else.
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_runtime') THEN
        EXECUTE format('REVOKE ALL ON erp.%I FROM erpsync_runtime', hist);
        EXECUTE format('GRANT SELECT, INSERT ON erp.%I TO erpsync_runtime', hist);
    END IF;
    FOREACH r IN ARRAY ARRAY['erpsync_analyst', 'erpsync_sensitive', 'erpsync_scoped'] LOOP
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) AND has_table_privilege(r, entity, 'SELECT') THEN
            EXECUTE format('GRANT SELECT ON erp.%I TO %I', hist, r);
        END IF;
    END LOOP;
END
$proc$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    RAISE EXCEPTION 'migration 14 (access) cannot be undone: it would give scoped logins every company again';
END
$$;
-- +goose StatementEnd
