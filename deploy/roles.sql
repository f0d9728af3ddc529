-- erpsync's roles and database. A Postgres superuser runs it with psql, before the first
-- `erpsync migrate` and again whenever it likes: every statement checks first, so a second run on
-- a server that has the roles changes nothing.
--
--   psql -v ON_ERROR_STOP=1 -U postgres -d postgres -f deploy/roles.sql \
--        -v database=erpsync -v owner_password="$OWNER_PASSWORD" -v app_password="$APP_PASSWORD"
--
-- psql variables, all optional:
--   database        the warehouse's database, created (owned by erpsync_owner) when missing;
--                   default erpsync
--   owner_password  the password of erpsync_owner; without it none is set (psql: \password erpsync_owner)
--   app_password    the password of erpsync_app; likewise
--
-- What it makes:
--   erpsync_runtime    NOLOGIN  the daemon's rights: rows of the erp tables, no DDL, no history,
--                               never the company grants
--   erpsync_analyst    NOLOGIN  reads every row of the finance tables and views
--   erpsync_sensitive  NOLOGIN  reads everything in erp
--   erpsync_scoped     NOLOGIN  the SELECT of logins limited to some companies
--                               (erp.grant_company makes them members; by itself it reads no row)
--   erpsync_owner      LOGIN    owns the database, hence schema erp (the first migration creates
--                               it): runs `erpsync migrate` and erp.grant_company. It may hand out
--                               erpsync_analyst and erpsync_scoped, nothing more: no superuser, no
--                               CREATEROLE, no BYPASSRLS (row-level security holds it too)
--   erpsync_app        LOGIN    the daemon: a member of erpsync_runtime, with BYPASSRLS (below)
-- The migrations grant to the four group roles; the migrating owner needs no CREATEROLE because
-- they exist already.
--
-- BYPASSRLS on erpsync_app: Postgres refuses COPY into a table whose row-level security applies
-- to the session, so without it first loads, balance sheets and journal lines go through a
-- temporary table and one INSERT (correct, somewhat slower). It widens nothing: the runtime role
-- reads every row of the erp tables anyway, writes through column privileges and triggers that
-- row-level security does not touch, and has no privilege on the company grants. A site that
-- wants it off runs ALTER ROLE erpsync_app NOBYPASSRLS; this script does not put it back.
--
-- Temporary objects: only erpsync_owner and erpsync_runtime may create them in the warehouse's
-- database (the daemon stages pages in temporary tables). Readers need none, and a reader who
-- cannot create a temporary table, view or function cannot use one to steer a function's name
-- lookups (the functions of erp are pinned against that as well).

-- Quiet, so that a run that changes nothing prints nothing (only notices and errors): psql would
-- otherwise echo every command's tag, and \connect its "You are now connected".
\set QUIET on

\if :{?database}
\else
\set database erpsync
\endif

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['erpsync_runtime', 'erpsync_analyst', 'erpsync_sensitive', 'erpsync_scoped'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'erpsync_owner') THEN
        CREATE ROLE erpsync_owner LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB NOBYPASSRLS;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'erpsync_app') THEN
        CREATE ROLE erpsync_app LOGIN BYPASSRLS IN ROLE erpsync_runtime;
    END IF;
    -- The owner hands out analysts, and scopes logins (erp.grant_company).
    FOREACH r IN ARRAY ARRAY['erpsync_analyst', 'erpsync_scoped'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m
                       WHERE m.roleid = r::regrole AND m.member = 'erpsync_owner'::regrole AND m.admin_option) THEN
            EXECUTE pg_catalog.format('GRANT %I TO erpsync_owner WITH ADMIN OPTION', r);
        END IF;
    END LOOP;
    IF NOT pg_catalog.pg_has_role('erpsync_app', 'erpsync_runtime', 'MEMBER') THEN
        GRANT erpsync_runtime TO erpsync_app;
    END IF;
END
$$;

\if :{?owner_password}
ALTER ROLE erpsync_owner PASSWORD :'owner_password';
\endif
\if :{?app_password}
ALTER ROLE erpsync_app PASSWORD :'app_password';
\endif

-- The database, owned by erpsync_owner when this script creates it. One that exists keeps its
-- owner (migrations run as the owner of its schema erp): a notice says so when it is not
-- erpsync_owner.
SELECT pg_catalog.format('CREATE DATABASE %I OWNER erpsync_owner', :'database')
WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_database WHERE datname = :'database') \gexec
SELECT pg_catalog.format('DO $notice$ BEGIN RAISE NOTICE %L; END $notice$',
    pg_catalog.format('database %s is owned by %s, not erpsync_owner: run erpsync migrate as the owner of its schema erp, or ALTER DATABASE %I OWNER TO erpsync_owner on a database without it',
        datname, datdba::regrole, datname))
FROM pg_catalog.pg_database WHERE datname = :'database' AND datdba <> 'erpsync_owner'::regrole \gexec

-- Temporary objects for the owner and the daemon only.
REVOKE TEMPORARY ON DATABASE :"database" FROM PUBLIC;
GRANT TEMPORARY ON DATABASE :"database" TO erpsync_owner, erpsync_runtime;

-- What follows is kept per database: it is done in the warehouse's.
\connect :"database"

-- Stream locks for the owner and the daemon only. A run of a stream holds a Postgres advisory
-- lock on keys made of the source's and the stream's names, and `erpsync migrate` holds goose's;
-- any login that may call the advisory-lock functions could take those keys and stop a stream
-- (its runs skipped while it holds them) or the migrations. So every advisory-lock function, of
-- the session and of the transaction, shared or not, with one key or two, is taken from PUBLIC
-- and given to erpsync_owner and erpsync_runtime. Large objects for nobody but superusers: a
-- large object is a copy of whatever its maker could read, outside row-level security, that its
-- maker may hand to any login, and a way to fill the disk; erpsync uses none. So every function
-- that makes, opens, reads or writes one is taken from PUBLIC.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname ~ '^pg_(try_)?advisory_'
    LOOP
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO erpsync_owner, erpsync_runtime', f);
    END LOOP;
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'pg_catalog'::regnamespace AND (p.proname ~ '^lo_' OR p.proname IN ('loread', 'lowrite'))
    LOOP
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
