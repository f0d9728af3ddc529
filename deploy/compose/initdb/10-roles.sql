-- The demo's database administrator. The postgres image runs this once, as the superuser, in
-- the database erpsync, when it creates the data volume; never again (`docker compose down -v`
-- starts over). It makes the roles a real installation's administrator would:
--
--   erpsync_owner  owns the database, hence schema erp (the first migration creates it) and
--                  the schema version table: the `migrate` service logs in as it.
--   erpsync_app    a member of erpsync_runtime (rows of the erp tables, no DDL, never the
--                  company grants): the daemon.
--   analyst        a member of erpsync_analyst (every row of the finance tables and views):
--                  psql, BI tools, the Grafana data source.
--
-- erpsync_scoped is the role through which logins limited to some companies read
-- (erp.grant_company makes them members; by itself it reads no row). erpsync_owner may hand out
-- erpsync_analyst and erpsync_scoped: erp.grant_company, which the owner runs, grants the latter.
--
-- erpsync_app may bypass row-level security. That is optional: the runtime role reads and writes
-- every row either way, but Postgres refuses COPY into a table whose policies apply, so without
-- it bulk loads take a slower path.
--
-- The four group roles are created here rather than by the migrations, so the owner needs no
-- CREATEROLE; the migrations find them and only grant to them.
CREATE ROLE erpsync_runtime NOLOGIN;
CREATE ROLE erpsync_analyst NOLOGIN;
CREATE ROLE erpsync_sensitive NOLOGIN;
CREATE ROLE erpsync_scoped NOLOGIN;

CREATE ROLE erpsync_owner LOGIN PASSWORD 'erpsync-owner-demo';
GRANT erpsync_analyst TO erpsync_owner WITH ADMIN OPTION;
GRANT erpsync_scoped TO erpsync_owner WITH ADMIN OPTION;
ALTER DATABASE erpsync OWNER TO erpsync_owner;

CREATE ROLE erpsync_app LOGIN BYPASSRLS PASSWORD 'erpsync-app-demo' IN ROLE erpsync_runtime;
CREATE ROLE analyst LOGIN PASSWORD 'analyst-demo' IN ROLE erpsync_analyst;
