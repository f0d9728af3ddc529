-- +goose Up
-- Core schema of the warehouse. Money and rates are numeric without a
-- precision cap so nothing the ERP sends is ever rounded; ids are text
-- because the ERP types some of them as strings.
CREATE SCHEMA IF NOT EXISTS erp;

-- Columns shared by every mirrored entity table:
--   source, id          the key: configured installation name and ERP id
--   company_id, branch_id  context of the token that read the row
--   payload             the record exactly as received
--   payload_hash        sha256 of the received bytes: lets an unchanged
--                       re-sync skip a row without touching it (no lock, no WAL)
--   first_seen_at       first time erpsync saw the row
--   synced_at           last time the row changed (not last time it was seen)
--   deleted_at          set when a completed sweep no longer saw the row
CREATE TABLE erp.invoices (
    source        text        NOT NULL,
    id            text        NOT NULL,
    company_id    text        NOT NULL,
    branch_id     text        NOT NULL,
    total_bc      numeric,
    payload       jsonb       NOT NULL,
    payload_hash  bytea       NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    synced_at     timestamptz NOT NULL DEFAULT now(),
    deleted_at    timestamptz,
    PRIMARY KEY (source, id)
);

CREATE TABLE erp.currencies (
    source                 text        NOT NULL,
    id                     text        NOT NULL,
    company_id             text        NOT NULL,
    branch_id              text        NOT NULL,
    code                   text,
    name                   text,
    exchange_rate          numeric,
    has_exchange_rate      boolean,
    requires_exchange_rate boolean,
    is_base_currency       boolean,
    is_system_enabled      boolean,
    payload                jsonb       NOT NULL,
    payload_hash           bytea       NOT NULL,
    first_seen_at          timestamptz NOT NULL DEFAULT now(),
    synced_at              timestamptz NOT NULL DEFAULT now(),
    deleted_at             timestamptz,
    PRIMARY KEY (source, id)
);

-- One row per (source, currency, rate period); a new row is appended only
-- when the rate changes, and the open period has valid_to NULL.
CREATE TABLE erp.currency_rates (
    source      text        NOT NULL,
    currency_id text        NOT NULL,
    code        text,
    rate        numeric     NOT NULL,
    valid_from  timestamptz NOT NULL,
    valid_to    timestamptz,
    PRIMARY KEY (source, currency_id, valid_from),
    CHECK (valid_to IS NULL OR valid_to > valid_from)
);
CREATE UNIQUE INDEX currency_rates_open ON erp.currency_rates (source, currency_id) WHERE valid_to IS NULL;

CREATE TABLE erp.cashboxes (
    source        text        NOT NULL,
    id            text        NOT NULL,
    company_id    text        NOT NULL,
    branch_id     text        NOT NULL,
    name          text,
    balance       numeric,
    payload       jsonb       NOT NULL,
    payload_hash  bytea       NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    synced_at     timestamptz NOT NULL DEFAULT now(),
    deleted_at    timestamptz,
    PRIMARY KEY (source, id)
);

CREATE TABLE erp.cashbox_reconciliations (
    source           text        NOT NULL,
    id               text        NOT NULL,
    company_id       text        NOT NULL,
    branch_id        text        NOT NULL,
    cashbox_id       text,
    status           text,
    expected_balance numeric,
    counted_balance  numeric,
    difference       numeric,
    payload          jsonb       NOT NULL,
    payload_hash     bytea       NOT NULL,
    first_seen_at    timestamptz NOT NULL DEFAULT now(),
    synced_at        timestamptz NOT NULL DEFAULT now(),
    deleted_at       timestamptz,
    PRIMARY KEY (source, id)
);

CREATE SEQUENCE erp.sweep_id_seq;

-- Where each (source, stream) stands. A sweep in progress has sweep_id set;
-- cursor is the cursor of the next page to fetch (NULL: the first page).
-- bulk_load: the sweep started with no row of the source in the table, so
-- its pages are COPYed straight into the table and, at its end, every row
-- there was seen by it (nothing to mark deleted).
CREATE TABLE erp.sync_checkpoints (
    source                  text        NOT NULL,
    stream                  text        NOT NULL,
    sweep_id                bigint,
    sweep_started_at        timestamptz,
    cursor                  text,
    pages                   bigint      NOT NULL DEFAULT 0,
    rows                    bigint      NOT NULL DEFAULT 0,
    bulk_load               boolean     NOT NULL DEFAULT false,
    last_sweep_id           bigint,
    last_sweep_started_at   timestamptz,
    last_sweep_completed_at timestamptz,
    last_sweep_rows         bigint,
    updated_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, stream)
);

-- Ids seen by the sweep in progress, to mark unseen rows deleted when it
-- completes. UNLOGGED: it is scratch space and must not cost WAL on every
-- sweep. Postgres empties it after a crash; the sweep then notices that
-- count(*) no longer matches sync_checkpoints.rows and marks nothing
-- deleted rather than too much. No index: it is read only once, whole,
-- by the anti-join at the end of the sweep.
CREATE UNLOGGED TABLE erp.sweep_seen (
    sweep_id bigint NOT NULL,
    id       text   NOT NULL
);

CREATE TABLE erp.sync_runs (
    id             bigserial   PRIMARY KEY,
    source         text        NOT NULL,
    stream         text        NOT NULL,
    started_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    status         text        NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
    sweep_id       bigint,
    pages          bigint      NOT NULL DEFAULT 0,
    rows_seen      bigint      NOT NULL DEFAULT 0,
    rows_inserted  bigint      NOT NULL DEFAULT 0,
    rows_updated   bigint      NOT NULL DEFAULT 0,
    rows_unchanged bigint      NOT NULL DEFAULT 0,
    rows_rejected  bigint      NOT NULL DEFAULT 0,
    rows_deleted   bigint      NOT NULL DEFAULT 0,
    error          text,
    -- what happened that was handled but worth knowing (a refused cursor
    -- that restarted the sweep, drift, deletions skipped)
    note           text,
    host           text,
    pid            integer
);
CREATE INDEX sync_runs_stream ON erp.sync_runs (source, stream, started_at DESC);

CREATE TABLE erp.rejected_records (
    id          bigserial   PRIMARY KEY,
    source      text        NOT NULL,
    stream      text        NOT NULL,
    run_id      bigint,
    record_id   text,
    reason      text        NOT NULL,
    record      text        NOT NULL,
    rejected_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX rejected_records_stream ON erp.rejected_records (source, stream, rejected_at DESC);

-- Differences between what a stream expects and what the ERP sends:
-- change is 'added' (unexpected field), 'missing', 'type' (other JSON
-- type than expected) or 'scale' (a decimal with an unexpected scale).
CREATE TABLE erp.schema_drift (
    source     text        NOT NULL,
    stream     text        NOT NULL,
    field      text        NOT NULL,
    change     text        NOT NULL,
    detail     text        NOT NULL DEFAULT '',
    example    text,
    first_seen timestamptz NOT NULL DEFAULT now(),
    last_seen  timestamptz NOT NULL DEFAULT now(),
    count      bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (source, stream, field, change, detail)
);

-- +goose Down
DROP SCHEMA erp CASCADE;
