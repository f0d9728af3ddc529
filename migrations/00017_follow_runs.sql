-- +goose Up
-- Follow runs. A paged list (invoices by cursor, journal entries by
-- start/length) is read in two kinds of run: a complete sweep, which reads
-- the whole list and decides deletions, and a follow run, which reads only
-- what is new since the last read. A list is followed only when its last
-- two complete sweeps listed ids in one strict order; how a login stands
-- is in erp.sync_follow.

-- What kind of run a row of sync_runs is: a complete sweep (every run
-- before this release), a follow run, or a reset of the stream.
ALTER TABLE erp.sync_runs ADD COLUMN kind text NOT NULL DEFAULT 'sweep'
    CONSTRAINT sync_runs_kind CHECK (kind IN ('sweep', 'follow', 'reset'));
COMMENT ON COLUMN erp.sync_runs.kind IS
    'sweep: a complete read of the stream (deletions decided); follow: a read of what is new only; reset: the stream started over';
CREATE INDEX sync_runs_kind ON erp.sync_runs (source, stream, login, kind, id DESC);

-- What the sweep in progress has learnt of the list so far, committed with
-- each of its pages: the order its ids came in ('ascending',
-- 'descending', 'unordered'; NULL while fewer than two were read), the
-- last id of its last page, its highest id, and the highest id follow
-- runs had read when it began (an id it inserts at or below that one is
-- a record the follows missed). reset_at: when `erpsync reset` started the
-- stream over for the login (its next runs read everything again). Highest
-- ids are kept as sort keys: text
-- whose byte order (COLLATE "C") is the order of ids, whole numbers by
-- value (internal/sync/order.go).
ALTER TABLE erp.sync_checkpoints
    ADD COLUMN reset_at timestamptz,
    ADD COLUMN sweep_order text CHECK (sweep_order IN ('ascending', 'descending', 'unordered')),
    ADD COLUMN sweep_last_id text,
    ADD COLUMN sweep_max_key text COLLATE "C",
    ADD COLUMN sweep_followed_key text COLLATE "C";

-- How each login follows a paged list.
--   sweep_orders     the orders of its last complete sweeps, newest first
--                    (two kept)
--   list_order       what they say of the list (internal/sync/order.go):
--                    ascending or descending when both are that strict
--                    order (it is then followed), else unordered; NULL
--                    before two sweeps
--   demoted_at/why   a sweep found records the follows had missed: the
--                    list is swept, not followed, until `erpsync reset`
--   max_key          the sort key of the highest id this login has read
--                    (sweeps, follows)
--   followed_key     the sort key of the highest id a follow run has read
--   anchors          newest first, the positions of the last non-empty
--                    pages read (cursor or start) with their ids: a follow
--                    of a list in ascending order asks again from one
--   last_follow_*    the last follow run: when it completed, and why it
--                    read the whole list instead, if it did
CREATE TABLE erp.sync_follow (
    source                 text        NOT NULL,
    stream                 text        NOT NULL,
    login                  text        NOT NULL,
    sweep_orders           text[]      NOT NULL DEFAULT '{}',
    list_order             text        CHECK (list_order IN ('ascending', 'descending', 'unordered')),
    demoted_at             timestamptz,
    demoted_why            text,
    max_key                text COLLATE "C",
    followed_key           text COLLATE "C",
    anchors                jsonb       NOT NULL DEFAULT '[]',
    last_follow_at         timestamptz,
    last_follow_swept      text,
    updated_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, stream, login)
);

-- The first and last id of each page of a sweep in progress: at its end, a
-- row it did not see whose id falls between two of its pages may have
-- moved across that boundary while the list was read (a deletion before a
-- position cursor shifts the list), and is marked deleted only when the
-- next complete sweep misses it too. UNLOGGED, as the seen-list: after a
-- Postgres crash the sweep marks nothing.
CREATE UNLOGGED TABLE erp.sweep_bounds (
    sweep_id bigint NOT NULL,
    page     bigint NOT NULL,
    first_id text   NOT NULL,
    last_id  text   NOT NULL,
    PRIMARY KEY (sweep_id, page)
);

-- Rows a complete sweep did not see, at a boundary of its pages, held for
-- the next one to confirm.
CREATE TABLE erp.deletion_candidates (
    source   text   NOT NULL,
    stream   text   NOT NULL,
    login    text   NOT NULL,
    id       text   NOT NULL,
    sweep_id bigint NOT NULL,
    PRIMARY KEY (source, stream, login, id)
);

-- A login's following is its bookkeeping, read as its checkpoints are;
-- page bounds and held rows name records without their company.
CALL erp.apply_access('sync_follow', 'by_login');
CALL erp.apply_access('sweep_bounds', 'withheld');
CALL erp.apply_access('deletion_candidates', 'withheld');

-- Freshness per stream and login, now for both kinds of run: a complete
-- sweep (changes and deletions) and a follow run (new records).
DROP VIEW erp.stream_freshness;
CREATE VIEW erp.stream_freshness WITH (security_invoker = true) AS
SELECT c.source, c.stream,
       c.last_sweep_completed_at,
       now() - c.last_sweep_completed_at AS age,
       c.sweep_id IS NOT NULL AS sweep_in_progress,
       c.held_deletions,
       r.status AS last_run_status, r.finished_at AS last_run_finished,
       c.login, c.warning, c.list_scope,
       f.last_follow_at,
       now() - greatest(f.last_follow_at, c.last_sweep_completed_at) AS new_records_age,
       f.list_order,
       f.last_follow_swept
FROM erp.sync_checkpoints c
LEFT JOIN erp.sync_follow f ON f.source = c.source AND f.stream = c.stream AND f.login = c.login
LEFT JOIN LATERAL (
    SELECT status, finished_at FROM erp.sync_runs
    WHERE source = c.source AND stream = c.stream AND coalesce(login, '') = c.login ORDER BY id DESC LIMIT 1
) r ON true;

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_runtime') THEN
        -- The columns of the bookkeeping the daemon writes (it writes
        -- only named columns of sync_runs and sync_checkpoints), and the
        -- bookkeeping it clears as it goes.
        GRANT INSERT (kind) ON erp.sync_runs TO erpsync_runtime;
        GRANT UPDATE (reset_at, sweep_order, sweep_last_id, sweep_max_key, sweep_followed_key) ON erp.sync_checkpoints TO erpsync_runtime;
        REVOKE UPDATE ON erp.sweep_bounds, erp.deletion_candidates, erp.sync_follow FROM erpsync_runtime;
        GRANT SELECT, INSERT, DELETE ON erp.sweep_bounds, erp.deletion_candidates, erp.sync_follow TO erpsync_runtime;
        GRANT UPDATE (first_id, last_id) ON erp.sweep_bounds TO erpsync_runtime;
        GRANT UPDATE (sweep_orders, list_order, demoted_at, demoted_why, max_key, followed_key, anchors, last_follow_at,
            last_follow_swept, updated_at) ON erp.sync_follow TO erpsync_runtime;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_analyst') THEN
        GRANT SELECT ON erp.sync_follow, erp.stream_freshness TO erpsync_analyst;
        GRANT SELECT (kind) ON erp.sync_runs TO erpsync_analyst;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_scoped') THEN
        GRANT SELECT ON erp.sync_follow, erp.stream_freshness TO erpsync_scoped;
        GRANT SELECT (kind) ON erp.sync_runs TO erpsync_scoped;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_sensitive') THEN
        GRANT SELECT ON erp.sync_follow, erp.sweep_bounds, erp.deletion_candidates, erp.stream_freshness TO erpsync_sensitive;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP VIEW erp.stream_freshness;
CREATE VIEW erp.stream_freshness WITH (security_invoker = true) AS
SELECT c.source, c.stream,
       c.last_sweep_completed_at,
       now() - c.last_sweep_completed_at AS age,
       c.sweep_id IS NOT NULL AS sweep_in_progress,
       c.held_deletions,
       r.status AS last_run_status, r.finished_at AS last_run_finished,
       c.login, c.warning, c.list_scope
FROM erp.sync_checkpoints c
LEFT JOIN LATERAL (
    SELECT status, finished_at FROM erp.sync_runs
    WHERE source = c.source AND stream = c.stream AND coalesce(login, '') = c.login ORDER BY id DESC LIMIT 1
) r ON true;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_analyst') THEN
        GRANT SELECT ON erp.stream_freshness TO erpsync_analyst;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_scoped') THEN
        GRANT SELECT ON erp.stream_freshness TO erpsync_scoped;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_sensitive') THEN
        GRANT SELECT ON erp.stream_freshness TO erpsync_sensitive;
    END IF;
END
$$;
-- +goose StatementEnd
DROP TABLE erp.deletion_candidates, erp.sweep_bounds, erp.sync_follow;
ALTER TABLE erp.sync_checkpoints DROP COLUMN reset_at, DROP COLUMN sweep_order, DROP COLUMN sweep_last_id, DROP COLUMN sweep_max_key,
    DROP COLUMN sweep_followed_key;
DROP INDEX erp.sync_runs_kind;
ALTER TABLE erp.sync_runs DROP COLUMN kind;
