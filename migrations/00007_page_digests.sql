-- +goose Up
-- What each request of a sweep was answered with (sha256 of the bytes),
-- by a digest of the request. A page the ERP answers byte for byte as in
-- the last complete sweep holds rows the warehouse already has as they
-- are, so it is checkpointed without comparing its rows one by one: the
-- unchanged re-sync costs little. UNLOGGED: after a Postgres crash the
-- next sweep simply compares every row again.
CREATE UNLOGGED TABLE erp.sweep_pages (
    source   text   NOT NULL,
    stream   text   NOT NULL,
    sweep_id bigint NOT NULL,
    request  bytea  NOT NULL,
    answer   bytea  NOT NULL,
    PRIMARY KEY (source, stream, sweep_id, request)
);

-- +goose Down
DROP TABLE erp.sweep_pages;
