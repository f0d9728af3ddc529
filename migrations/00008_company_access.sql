-- +goose Up
-- Per-company access. A role granted companies with erp.grant_company
-- reads only their rows, in every entity table, history and view; a role
-- with no grant reads what its privileges allow, as before. The grants
-- apply through membership: grant companies to a group role (say
-- accountants_a) and every login in it is scoped.
--
-- The rule is row-level security on the data, so it holds in any tool
-- and any query, not only in the views. The tables' owner (the role
-- migrations run as) is not subject to it.

CREATE TABLE erp.company_grants (
    role       regrole     NOT NULL,
    source     text        NOT NULL,
    company_id text        NOT NULL,
    branch_id  text,       -- NULL: every branch of the company
    granted_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE NULLS NOT DISTINCT (role, source, company_id, branch_id)
);

-- Every role reads its own grants (the policies below read them as the
-- querying role), and nobody else's.
ALTER TABLE erp.company_grants ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_grants ON erp.company_grants FOR SELECT USING (pg_has_role(role, 'USAGE'));
GRANT SELECT ON erp.company_grants TO PUBLIC;

-- erp.restrict_to_companies(table) turns the rule on for a table with
-- (source, company_id, branch_id), or with source only (rows shared by
-- the source's companies, such as currency rates: readable with any grant
-- on the source). Writes are untouched: privileges decide who writes,
-- and the daemon's role has no grant, so it sees and writes every row.
-- +goose StatementBegin
CREATE PROCEDURE erp.restrict_to_companies(tbl text)
LANGUAGE plpgsql AS $proc$
DECLARE
    t          regclass := format('erp.%I', tbl)::regclass;
    by_company boolean;
    readable   text;
BEGIN
    SELECT count(*) = 2 INTO by_company FROM pg_attribute
     WHERE attrelid = t AND attname IN ('company_id', 'branch_id') AND NOT attisdropped;
    readable := CASE WHEN by_company THEN
        format('g.source = %1$s.source AND g.company_id = %1$s.company_id AND (g.branch_id IS NULL OR g.branch_id = %1$s.branch_id)', t)
    ELSE
        format('g.source = %s.source', t)
    END;
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
    -- Unscoped (no grant through any role): every row; scoped: the
    -- granted ones. The first test does not depend on the row, so
    -- Postgres evaluates it once per query.
    EXECUTE format($f$CREATE POLICY company_scope ON %s AS PERMISSIVE FOR SELECT USING (
        NOT EXISTS (SELECT 1 FROM erp.company_grants g WHERE pg_has_role(g.role, 'USAGE'))
        OR EXISTS (SELECT 1 FROM erp.company_grants g WHERE pg_has_role(g.role, 'USAGE') AND %s))$f$,
        t, readable);
    EXECUTE format('CREATE POLICY writes ON %s AS PERMISSIVE FOR INSERT WITH CHECK (true)', t);
    EXECUTE format('CREATE POLICY updates ON %s AS PERMISSIVE FOR UPDATE USING (true) WITH CHECK (true)', t);
    EXECUTE format('CREATE POLICY deletes ON %s AS PERMISSIVE FOR DELETE USING (true)', t);
END
$proc$;
-- +goose StatementEnd
REVOKE ALL ON PROCEDURE erp.restrict_to_companies(text) FROM PUBLIC;

-- +goose StatementBegin
DO $$
DECLARE
    tbl text;
BEGIN
    FOR tbl IN
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'erp' AND c.relkind = 'r' AND c.relpersistence = 'p'
          AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'source' AND NOT a.attisdropped)
          AND c.relname NOT IN ('company_grants', 'sync_checkpoints', 'sync_runs', 'rejected_records', 'schema_drift')
        ORDER BY c.relname
    LOOP
        CALL erp.restrict_to_companies(tbl);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- Views read the tables with the rights of whoever queries them, so the
-- rule above holds through them too.
-- +goose StatementBegin
DO $$
DECLARE
    v text;
BEGIN
    FOR v IN SELECT viewname FROM pg_views WHERE schemaname = 'erp' LOOP
        EXECUTE format('ALTER VIEW erp.%I SET (security_invoker = true)', v);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- erp.grant_company(role, source, company[, branch]) scopes a role to a
-- company (or one branch of it) of a source, and makes it an analyst if
-- it is not one yet. One call per company; erp.revoke_company undoes one.
-- For administrators (the owner of the schema, or a superuser).
-- +goose StatementBegin
CREATE FUNCTION erp.grant_company(role regrole, source text, company_id text, branch_id text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO erp.company_grants (role, source, company_id, branch_id)
    VALUES (role, source, company_id, branch_id) ON CONFLICT DO NOTHING;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_analyst')
       AND NOT pg_has_role(role, 'erpsync_analyst', 'MEMBER') THEN
        BEGIN
            EXECUTE format('GRANT erpsync_analyst TO %s', role);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'company granted, but % is not an analyst and you may not make it one: a superuser runs GRANT erpsync_analyst TO %', role, role;
        END;
    END IF;
END
$fn$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION erp.revoke_company(role regrole, source text, company_id text, branch_id text DEFAULT NULL)
RETURNS void LANGUAGE sql AS $fn$
    DELETE FROM erp.company_grants g
    WHERE g.role = $1 AND g.source = $2 AND g.company_id = $3 AND g.branch_id IS NOT DISTINCT FROM $4;
$fn$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION erp.grant_company(regrole, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION erp.revoke_company(regrole, text, text, text) FROM PUBLIC;

-- +goose Down
DROP FUNCTION erp.revoke_company(regrole, text, text, text);
DROP FUNCTION erp.grant_company(regrole, text, text, text);
-- +goose StatementBegin
DO $$
DECLARE
    v text;
    tbl text;
BEGIN
    FOR v IN SELECT viewname FROM pg_views WHERE schemaname = 'erp' LOOP
        EXECUTE format('ALTER VIEW erp.%I RESET (security_invoker)', v);
    END LOOP;
    FOR tbl IN SELECT DISTINCT tablename FROM pg_policies WHERE schemaname = 'erp' AND policyname = 'company_scope' LOOP
        EXECUTE format('DROP POLICY company_scope ON erp.%I', tbl);
        EXECUTE format('DROP POLICY writes ON erp.%I', tbl);
        EXECUTE format('DROP POLICY updates ON erp.%I', tbl);
        EXECUTE format('DROP POLICY deletes ON erp.%I', tbl);
        EXECUTE format('ALTER TABLE erp.%I DISABLE ROW LEVEL SECURITY', tbl);
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP PROCEDURE erp.restrict_to_companies(text);
DROP TABLE erp.company_grants;
