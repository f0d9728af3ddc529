-- +goose Up
-- Journal entries and vouchers. Their fields are "not
-- shown" in the reference: the typed columns are what installations
-- send in practice; everything is in payload either way. Their ids are
-- strings at the ERP.

CREATE TABLE erp.journal_entries (
    source        text        NOT NULL,
    id            text        NOT NULL,
    company_id    text        NOT NULL,
    branch_id     text        NOT NULL,
    status        text,
    total_debit   numeric,
    total_credit  numeric,
    payload       jsonb       NOT NULL,
    payload_hash  bytea       NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    synced_at     timestamptz NOT NULL DEFAULT now(),
    deleted_at    timestamptz,
    PRIMARY KEY (source, id)
);

CREATE TABLE erp.payment_vouchers (
    source        text        NOT NULL,
    id            text        NOT NULL,
    company_id    text        NOT NULL,
    branch_id     text        NOT NULL,
    status        text,
    amount        numeric,
    payload       jsonb       NOT NULL,
    payload_hash  bytea       NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    synced_at     timestamptz NOT NULL DEFAULT now(),
    deleted_at    timestamptz,
    PRIMARY KEY (source, id)
);

CREATE TABLE erp.receipt_vouchers (LIKE erp.payment_vouchers INCLUDING ALL);

-- The analyst role reads these too (default privileges cover tables
-- created by the same user; grant explicitly for any other case).
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_analyst') THEN
        GRANT SELECT ON erp.journal_entries, erp.payment_vouchers, erp.receipt_vouchers TO erpsync_analyst;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE erp.receipt_vouchers;
DROP TABLE erp.payment_vouchers;
DROP TABLE erp.journal_entries;
