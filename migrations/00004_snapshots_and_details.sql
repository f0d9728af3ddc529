-- +goose Up
-- The streams that are not one (source, id) list.

-- One balance-sheet tree per (source, as_of): a node per row, flattened
-- with its parent and depth; balance exact.
CREATE TABLE erp.balance_sheet_snapshots (
    source       text        NOT NULL,
    as_of        date        NOT NULL,
    node         text        NOT NULL,
    parent       text,
    depth        integer     NOT NULL,
    company_id   text        NOT NULL,
    branch_id    text        NOT NULL,
    code         text,
    name         text,
    balance      numeric,
    payload      jsonb       NOT NULL,
    payload_hash bytea       NOT NULL,
    synced_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, as_of, node)
);

-- Who may use each cashbox.
CREATE TABLE erp.cashbox_access (
    source        text        NOT NULL,
    cashbox_id    text        NOT NULL,
    "user"        text        NOT NULL,
    company_id    text        NOT NULL,
    branch_id     text        NOT NULL,
    payload       jsonb       NOT NULL,
    payload_hash  bytea       NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    synced_at     timestamptz NOT NULL DEFAULT now(),
    deleted_at    timestamptz,
    PRIMARY KEY (source, cashbox_id, "user")
);

-- The journal lines of journal entries and vouchers, from their
-- journal-preview; document_kind is journal_entry, payment_voucher or
-- receipt_voucher.
CREATE TABLE erp.journal_lines (
    source        text        NOT NULL,
    document_kind text        NOT NULL,
    document_id   text        NOT NULL,
    line          text        NOT NULL,
    company_id    text        NOT NULL,
    branch_id     text        NOT NULL,
    account_code  text,
    debit         numeric,
    credit        numeric,
    payload       jsonb       NOT NULL,
    synced_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, document_kind, document_id, line)
);

-- Which version of each document the lines were read for: a document
-- whose payload_hash differs (new or changed) is read again.
CREATE TABLE erp.journal_line_documents (
    source        text        NOT NULL,
    document_kind text        NOT NULL,
    document_id   text        NOT NULL,
    document_hash bytea       NOT NULL,
    synced_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, document_kind, document_id)
);

-- Messaging lists; their fields are not shown by the reference, so all
-- is in payload.
CREATE TABLE erp.messaging_conversations (LIKE erp.payment_vouchers INCLUDING ALL);
ALTER TABLE erp.messaging_conversations DROP COLUMN status, DROP COLUMN amount;
CREATE TABLE erp.messaging_messages (LIKE erp.messaging_conversations INCLUDING ALL);
CREATE TABLE erp.messaging_templates (LIKE erp.messaging_conversations INCLUDING ALL);
CREATE TABLE erp.messaging_queue (LIKE erp.messaging_conversations INCLUDING ALL);

-- Messaging statistics: a snapshot appended whenever it changed.
CREATE TABLE erp.messaging_stats (
    source       text        NOT NULL,
    taken_at     timestamptz NOT NULL DEFAULT now(),
    company_id   text        NOT NULL,
    branch_id    text        NOT NULL,
    payload      jsonb       NOT NULL,
    payload_hash bytea       NOT NULL,
    PRIMARY KEY (source, taken_at)
);

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_analyst') THEN
        GRANT SELECT ON ALL TABLES IN SCHEMA erp TO erpsync_analyst;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE erp.messaging_stats, erp.messaging_queue, erp.messaging_templates, erp.messaging_messages,
    erp.messaging_conversations, erp.journal_line_documents, erp.journal_lines, erp.cashbox_access,
    erp.balance_sheet_snapshots;
