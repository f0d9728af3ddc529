-- +goose Up
-- What a login has learnt of a list is kept in one place, erp.sync_follow:
-- the highest id its follow runs had read when its sweep in progress
-- began moves there from the sweep's checkpoint (a record the sweep
-- inserts at or below it is one the follow runs missed). The sweep's
-- checkpoint keeps only where the sweep stands.
ALTER TABLE erp.sync_follow ADD COLUMN sweep_followed_key text COLLATE "C";
UPDATE erp.sync_follow f SET sweep_followed_key = c.sweep_followed_key
FROM erp.sync_checkpoints c
WHERE c.source = f.source AND c.stream = f.stream AND c.login = f.login AND c.sweep_id IS NOT NULL;
ALTER TABLE erp.sync_checkpoints DROP COLUMN sweep_followed_key;

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_runtime') THEN
        GRANT UPDATE (sweep_followed_key) ON erp.sync_follow TO erpsync_runtime;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE erp.sync_checkpoints ADD COLUMN sweep_followed_key text COLLATE "C";
UPDATE erp.sync_checkpoints c SET sweep_followed_key = f.sweep_followed_key
FROM erp.sync_follow f
WHERE c.source = f.source AND c.stream = f.stream AND c.login = f.login AND c.sweep_id IS NOT NULL;
ALTER TABLE erp.sync_follow DROP COLUMN sweep_followed_key;
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'erpsync_runtime') THEN
        GRANT UPDATE (sweep_followed_key) ON erp.sync_checkpoints TO erpsync_runtime;
    END IF;
END
$$;
-- +goose StatementEnd
