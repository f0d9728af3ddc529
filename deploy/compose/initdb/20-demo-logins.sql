-- The demo's logins, after deploy/roles.sql (mounted beside this file as 10-roles.sql), which
-- makes the roles an installation has: the four group roles, erpsync_owner (owns the database,
-- runs the migrations: the `migrate` service logs in as it) and erpsync_app (the daemon, a member
-- of erpsync_runtime). The postgres image runs both once, as its superuser, in the database
-- erpsync, when it creates the data volume; never again (`docker compose down -v` starts over).
--
-- Demo only: the passwords are written here. An installation gives them to roles.sql as psql
-- variables, or sets them with \password.

-- The image made the database erpsync itself, as its superuser; roles.sql leaves the owner of a
-- database it finds alone. It becomes erpsync_owner's, as a database roles.sql creates is.
ALTER DATABASE erpsync OWNER TO erpsync_owner;

ALTER ROLE erpsync_owner PASSWORD 'erpsync-owner-demo';
ALTER ROLE erpsync_app PASSWORD 'erpsync-app-demo';

-- psql, BI tools and the Grafana data source: every row of the finance tables and views.
CREATE ROLE analyst LOGIN PASSWORD 'analyst-demo' IN ROLE erpsync_analyst;
