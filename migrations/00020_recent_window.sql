-- +goose Up
-- Window runs. A paged list is read in three kinds of run: a follow run
-- reads what is new, a window run re-reads the newest pages (where
-- records change most) and decides the deletions inside the ids it read,
-- and a complete sweep reads everything. Each keeps what it decides
-- apart: the rows a window run holds for the next to confirm are not the
-- sweep's, nor is the deletion its guard holds.
ALTER TABLE erp.sync_runs DROP CONSTRAINT sync_runs_kind,
    ADD CONSTRAINT sync_runs_kind CHECK (kind IN ('sweep', 'follow', 'window', 'reset'));
COMMENT ON COLUMN erp.sync_runs.kind IS
    'sweep: a complete read of the stream (deletions decided); follow: a read of what is new only; window: a re-read of the newest pages (deletions decided inside them); reset: the stream started over';

ALTER TABLE erp.deletion_candidates ADD COLUMN kind text NOT NULL DEFAULT 'sweep' CHECK (kind IN ('sweep', 'window'));
ALTER TABLE erp.deletion_candidates DROP CONSTRAINT deletion_candidates_pkey, ADD PRIMARY KEY (source, stream, login, kind, id);

-- A login's window of a list:
--   pages            how many pages its last window run read
--   size_why         why the window has the size it has (learned, set, the budget's)
--   from_id          the lowest id its last window run read: its deletions are judged from
--                    there to the list's newest end
--   read_id          the seen-list of the window run in progress (a number of erp.sweep_id_seq)
--   last_window_*    when the last window run began and completed: recent changes are as fresh
--                    as its completion
--   held_*           the deletion the guard holds for window runs, as sync_checkpoints holds the
--                    sweeps'
CREATE TABLE erp.sync_window (
    source                 text        NOT NULL,
    stream                 text        NOT NULL,
    login                  text        NOT NULL,
    pages                  integer,
    size_why               text,
    from_id                text,
    read_id                bigint,
    last_window_started_at timestamptz,
    last_window_at         timestamptz,
    held_deletions         bigint      NOT NULL DEFAULT 0,
    held_digest            bytea,
    held_sweeps            integer     NOT NULL DEFAULT 0,
    held_since             timestamptz,
    updated_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, stream, login)
);

-- Where a list's changes are: each page a read (of any kind) found changed
-- records or deletions on, with how many, and how many pages from the
-- list's newest end it lay. A window is sized from these. pages_from_end
-- is NULL while a read of a list in ascending order is under way (its
-- last page, the newest end, is not read yet) and for ever if it never
-- completes.
CREATE TABLE erp.change_positions (
    source         text        NOT NULL,
    stream         text        NOT NULL,
    login          text        NOT NULL,
    kind           text        NOT NULL CHECK (kind IN ('sweep', 'follow', 'window')),
    read_id        bigint      NOT NULL,
    page           bigint      NOT NULL,
    pages_from_end integer,
    changes        integer     NOT NULL,
    seen_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX change_positions_seen ON erp.change_positions (source, stream, login, seen_at);

CALL erp.apply_access('sync_window', 'by_login');
CALL erp.apply_access('change_positions', 'withheld');

-- The sort key of an id, the one order of ids (internal/sync/order.go,
-- idKey, held equal by a test): whole numbers by value before any other
-- id, other ids by their bytes; compared COLLATE "C".
-- +goose StatementBegin
CREATE FUNCTION erp.id_key(id text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE WHEN id ~ '^(0|[1-9][0-9]*)$'
            THEN '0' || CASE WHEN length(id) < 10000 THEN lpad(length(id)::text, 4, '0') ELSE length(id)::text END || id
            ELSE '1' || id END COLLATE "C";
-- +goose StatementEnd

-- Freshness per stream and login, for each kind of run: new records
-- (a follow run, or a complete sweep), recent changes (a window run, or
-- a complete sweep) and everything (a complete sweep).
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
       f.last_follow_swept,
       w.last_window_at,
       now() - greatest(w.last_window_at, c.last_sweep_completed_at) AS recent_changes_age,
       w.pages AS window_pages
FROM erp.sync_checkpoints c
LEFT JOIN erp.sync_follow f ON f.source = c.source AND f.stream = c.stream AND f.login = c.login
LEFT JOIN erp.sync_window w ON w.source = c.source AND w.stream = c.stream AND w.login = c.login
LEFT JOIN LATERAL (
    SELECT status, finished_at FROM erp.sync_runs
    WHERE source = c.source AND stream = c.stream AND coalesce(login, '') = c.login ORDER BY id DESC LIMIT 1
) r ON true;

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_runtime') THEN
        -- The columns of its bookkeeping the daemon writes, and the
        -- bookkeeping it forgets (a reset, positions past their use).
        REVOKE UPDATE ON erp.sync_window, erp.change_positions FROM erpsync_runtime;
        GRANT SELECT, INSERT, DELETE ON erp.sync_window, erp.change_positions TO erpsync_runtime;
        GRANT UPDATE (pages, size_why, from_id, read_id, last_window_started_at, last_window_at, held_deletions, held_digest,
            held_sweeps, held_since, updated_at) ON erp.sync_window TO erpsync_runtime;
        GRANT UPDATE (pages_from_end) ON erp.change_positions TO erpsync_runtime;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_analyst') THEN
        GRANT SELECT ON erp.sync_window, erp.stream_freshness TO erpsync_analyst;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_scoped') THEN
        GRANT SELECT ON erp.sync_window, erp.stream_freshness TO erpsync_scoped;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_sensitive') THEN
        GRANT SELECT ON erp.sync_window, erp.change_positions, erp.stream_freshness TO erpsync_sensitive;
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
DROP FUNCTION erp.id_key(text);
DROP TABLE erp.change_positions, erp.sync_window;
DELETE FROM erp.deletion_candidates WHERE kind <> 'sweep';
ALTER TABLE erp.deletion_candidates DROP CONSTRAINT deletion_candidates_pkey, ADD PRIMARY KEY (source, stream, login, id);
ALTER TABLE erp.deletion_candidates DROP COLUMN kind;
DELETE FROM erp.sync_runs WHERE kind = 'window';
ALTER TABLE erp.sync_runs DROP CONSTRAINT sync_runs_kind,
    ADD CONSTRAINT sync_runs_kind CHECK (kind IN ('sweep', 'follow', 'reset'));
