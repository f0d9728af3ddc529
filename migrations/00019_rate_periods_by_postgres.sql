-- +goose Up
-- Exchange-rate periods opened and closed by Postgres.
--
-- erp.currency_rates holds each currency's rate periods [valid_from,
-- valid_to), the open one with valid_to NULL. Until now the daemon's role
-- wrote them, and so could insert a period with any valid_from and set any
-- valid_to: a rate that never was (42 for last year) would be answered to
-- every reader asking about that time, with no version or trace. From
-- here on a trigger owned by the schema's owner writes them, whoever
-- writes a currency: when a currency row is inserted, or its exchange_rate
-- changes, it closes the open period with now() and opens one with now().
-- The daemon's role no longer writes erp.currency_rates at all, so every
-- time in it is Postgres's clock.
--
-- Periods already there that no sync can have written are found, reported
-- in erp.upgrade_findings (and as notices) and set right; see the
-- repair below for what each finding means.

-- What an upgrade found and set right, for the operator to read once it
-- ran: when, which migration, in which table, the row's key, and what was
-- found and done.
CREATE TABLE IF NOT EXISTS erp.upgrade_findings (
    found_at   timestamptz NOT NULL DEFAULT now(),
    migration  bigint      NOT NULL,
    table_name text        NOT NULL,
    key        text        NOT NULL,
    what       text        NOT NULL
);
COMMENT ON TABLE erp.upgrade_findings IS 'what a migration found wrong in the warehouse and set right, one row per finding';
CALL erp.apply_access('upgrade_findings', 'withheld');
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'erpsync_sensitive') THEN
        GRANT SELECT ON erp.upgrade_findings TO erpsync_sensitive;
    END IF;
END
$$;
-- +goose StatementEnd

-- erp.keep_rate_periods(), after every statement that inserts or updates
-- currencies, for the rows it wrote (its transition table): a currency
-- whose rate differs from its open period's gets the period closed and a
-- new one opened, both at now(); a currency with a rate and no open period
-- (new, or its rate was NULL) gets one opened. A period opened earlier in
-- the same transaction, which nobody else saw, takes the new rate instead
-- of being closed the instant it began. Rates compare as numbers: 0.7893
-- and 0.789300 are one rate. A currency whose rate becomes NULL, or that
-- is marked deleted, keeps its open period.
-- +goose StatementBegin
CREATE FUNCTION erp.keep_rate_periods() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE erp.currency_rates r SET rate = w.exchange_rate, code = w.code
    FROM written w
    WHERE r.source = w.source AND r.currency_id = w.id AND r.valid_to IS NULL
      AND r.valid_from = pg_catalog.now() AND r.rate <> w.exchange_rate;
    UPDATE erp.currency_rates r SET valid_to = pg_catalog.now()
    FROM written w
    WHERE r.source = w.source AND r.currency_id = w.id AND r.valid_to IS NULL
      AND r.valid_from < pg_catalog.now() AND r.rate <> w.exchange_rate;
    INSERT INTO erp.currency_rates (source, currency_id, code, rate, valid_from)
    SELECT w.source, w.id, w.code, w.exchange_rate, pg_catalog.now() FROM written w
    WHERE w.exchange_rate IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM erp.currency_rates r
                      WHERE r.source = w.source AND r.currency_id = w.id AND r.valid_to IS NULL);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION erp.keep_rate_periods() FROM PUBLIC;
CREATE TRIGGER keep_rate_periods_inserted AFTER INSERT ON erp.currencies
    REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION erp.keep_rate_periods();
CREATE TRIGGER keep_rate_periods_updated AFTER UPDATE ON erp.currencies
    REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION erp.keep_rate_periods();

-- The daemon's role reads the periods and writes none.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'erpsync_runtime') THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON erp.currency_rates FROM erpsync_runtime;
    END IF;
END
$$;
-- +goose StatementEnd

-- The repair. A sync wrote a currency's periods as one chain: the first
-- opened in the transaction that first wrote the currency with a rate
-- (never before its first_seen_at), each closed at the very instant the
-- next opened, the last one open and holding the currency's rate, none in
-- the future. A period off that chain was written by hand, as the
-- daemon's role could. In this order:
--   1. a period of a currency erp.currencies has no row of, one that
--      begins in the future, or one that begins before its currency was
--      first synced, is deleted;
--   2. of two periods that overlap, one that begins at no instant its
--      currency was written at (first_seen_at, synced_at, the bounds of a
--      version in erp.currencies_history) is deleted when the other
--      begins at one: a sync opens a period in the transaction that writes
--      the currency;
--   3. walking each currency's periods in order: a period that begins
--      before the one kept before it ends is deleted (the earlier one is
--      kept); a period that ends in the future, or before the next one
--      begins, ends where the next begins; a period that repeats the rate
--      of the one before it is merged into it; the last one is open;
--   4. an open period whose rate is not its currency's is closed now,
--      and the currency's rate opened now (as the trigger does).
-- Each step is a row of erp.upgrade_findings (migration 19) and a notice.
-- +goose StatementBegin
DO $$
DECLARE
    p     record;
    prev  record;
    keys  text[] := '{}';
    whats text[] := '{}';
    have  boolean := false;  -- prev holds the period kept before p
    i     int;
BEGIN
    -- 1.
    FOR p IN
        SELECT r.*, CASE
            WHEN c.id IS NULL THEN 'its currency has no row in erp.currencies'
            WHEN r.valid_from > pg_catalog.now() THEN 'it begins in the future'
            ELSE pg_catalog.format('it begins before its currency was first synced (%s)', c.first_seen_at)
        END AS why
        FROM erp.currency_rates r LEFT JOIN erp.currencies c ON c.source = r.source AND c.id = r.currency_id
        WHERE c.id IS NULL OR r.valid_from > pg_catalog.now() OR r.valid_from < c.first_seen_at
    LOOP
        DELETE FROM erp.currency_rates WHERE source = p.source AND currency_id = p.currency_id AND valid_from = p.valid_from;
        keys := keys || pg_catalog.concat_ws('/', p.source, p.currency_id, p.valid_from);
        whats := whats || pg_catalog.format('deleted the period [%s, %s) of rate %s: %s', p.valid_from, coalesce(p.valid_to::text, 'open'), p.rate, p.why);
    END LOOP;

    -- 2.
    FOR p IN
        WITH written AS (
            SELECT c.source, c.id, c.first_seen_at AS at FROM erp.currencies c
            UNION SELECT c.source, c.id, c.synced_at FROM erp.currencies c
            UNION SELECT h.source, h.id, h.valid_from FROM erp.currencies_history h
            UNION SELECT h.source, h.id, h.valid_to FROM erp.currencies_history h
        )
        SELECT a.*, b.valid_from AS other FROM erp.currency_rates a
        JOIN LATERAL (
            SELECT b.valid_from FROM erp.currency_rates b
            WHERE b.source = a.source AND b.currency_id = a.currency_id AND b.valid_from <> a.valid_from
              AND pg_catalog.tstzrange(a.valid_from, a.valid_to) OPERATOR(pg_catalog.&&) pg_catalog.tstzrange(b.valid_from, b.valid_to)
              AND EXISTS (SELECT 1 FROM written w WHERE w.source = b.source AND w.id = b.currency_id AND w.at = b.valid_from)
            ORDER BY b.valid_from LIMIT 1
        ) b ON true
        WHERE NOT EXISTS (SELECT 1 FROM written w WHERE w.source = a.source AND w.id = a.currency_id AND w.at = a.valid_from)
    LOOP
        DELETE FROM erp.currency_rates WHERE source = p.source AND currency_id = p.currency_id AND valid_from = p.valid_from;
        keys := keys || pg_catalog.concat_ws('/', p.source, p.currency_id, p.valid_from);
        whats := whats || pg_catalog.format('deleted the period [%s, %s) of rate %s: it overlaps the period from %s, which began when the currency was written, and it did not',
            p.valid_from, coalesce(p.valid_to::text, 'open'), p.rate, p.other);
    END LOOP;

    -- 3.
    FOR p IN
        SELECT r.*, lead(r.valid_from) OVER (PARTITION BY r.source, r.currency_id ORDER BY r.valid_from) IS NULL AS last
        FROM erp.currency_rates r ORDER BY r.source, r.currency_id, r.valid_from
    LOOP
        IF NOT have THEN  -- (a record not yet assigned has no fields to compare)
            prev := p;
            have := true;
        ELSIF (prev.source, prev.currency_id) <> (p.source, p.currency_id) THEN
            prev := p;
        ELSIF prev.valid_to IS NULL OR (p.valid_from < prev.valid_to AND prev.valid_to <= pg_catalog.now()) THEN
            DELETE FROM erp.currency_rates WHERE source = p.source AND currency_id = p.currency_id AND valid_from = p.valid_from;
            keys := keys || pg_catalog.concat_ws('/', p.source, p.currency_id, p.valid_from);
            whats := whats || pg_catalog.format('deleted the period [%s, %s) of rate %s: it overlaps the period from %s, which began before it',
                p.valid_from, coalesce(p.valid_to::text, 'open'), p.rate, prev.valid_from);
        ELSE
            IF prev.valid_to <> p.valid_from THEN
                UPDATE erp.currency_rates SET valid_to = p.valid_from
                WHERE source = prev.source AND currency_id = prev.currency_id AND valid_from = prev.valid_from;
                keys := keys || pg_catalog.concat_ws('/', prev.source, prev.currency_id, prev.valid_from);
                whats := whats || pg_catalog.format('the period of rate %s ended at %s, %s: it ends where the next one begins, at %s',
                    prev.rate, prev.valid_to, CASE WHEN prev.valid_to > pg_catalog.now() THEN 'in the future' ELSE 'before the next one began' END,
                    p.valid_from);
                prev.valid_to := p.valid_from;
            END IF;
            IF prev.rate = p.rate THEN
                DELETE FROM erp.currency_rates WHERE source = p.source AND currency_id = p.currency_id AND valid_from = p.valid_from;
                UPDATE erp.currency_rates SET valid_to = p.valid_to
                WHERE source = prev.source AND currency_id = prev.currency_id AND valid_from = prev.valid_from;
                keys := keys || pg_catalog.concat_ws('/', p.source, p.currency_id, p.valid_from);
                whats := whats || pg_catalog.format('deleted the period [%s, %s) of rate %s: it repeats the rate of the period before it, from %s, which ends where it ended',
                    p.valid_from, coalesce(p.valid_to::text, 'open'), p.rate, prev.valid_from);
                prev.valid_to := p.valid_to;
            ELSE
                prev := p;
            END IF;
        END IF;
        IF p.last AND prev.valid_to IS NOT NULL THEN
            UPDATE erp.currency_rates SET valid_to = NULL
            WHERE source = prev.source AND currency_id = prev.currency_id AND valid_from = prev.valid_from;
            keys := keys || pg_catalog.concat_ws('/', prev.source, prev.currency_id, prev.valid_from);
            whats := whats || pg_catalog.format('the last period of the currency, of rate %s, ended at %s: a sync closes a period only when it opens the next; it is open now',
                prev.rate, prev.valid_to);
        END IF;
    END LOOP;

    -- 4.
    FOR p IN
        SELECT r.source, r.currency_id, r.valid_from, r.rate, c.exchange_rate, c.code
        FROM erp.currency_rates r JOIN erp.currencies c ON c.source = r.source AND c.id = r.currency_id
        WHERE r.valid_to IS NULL AND r.rate <> c.exchange_rate
    LOOP
        UPDATE erp.currency_rates SET valid_to = pg_catalog.now()
        WHERE source = p.source AND currency_id = p.currency_id AND valid_from = p.valid_from;
        INSERT INTO erp.currency_rates (source, currency_id, code, rate, valid_from)
        VALUES (p.source, p.currency_id, p.code, p.exchange_rate, pg_catalog.now());
        keys := keys || pg_catalog.concat_ws('/', p.source, p.currency_id, p.valid_from);
        whats := whats || pg_catalog.format('the open period''s rate %s is not the currency''s, %s: it is closed now, and %s opened now',
            p.rate, p.exchange_rate, p.exchange_rate);
    END LOOP;

    FOR i IN 1 .. pg_catalog.cardinality(keys) LOOP
        INSERT INTO erp.upgrade_findings (migration, table_name, key, what) VALUES (19, 'currency_rates', keys[i], whats[i]);
        RAISE NOTICE 'erp.currency_rates %: %', keys[i], whats[i];
    END LOOP;
    IF pg_catalog.cardinality(keys) > 0 THEN
        RAISE WARNING 'erp.currency_rates: % rate period(s) no sync wrote were set right; SELECT * FROM erp.upgrade_findings WHERE migration = 19 says what was found',
            pg_catalog.cardinality(keys);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER keep_rate_periods_inserted ON erp.currencies;
DROP TRIGGER keep_rate_periods_updated ON erp.currencies;
DROP FUNCTION erp.keep_rate_periods();
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'erpsync_runtime') THEN
        GRANT INSERT (source, currency_id, code, rate, valid_from), UPDATE (valid_to) ON erp.currency_rates TO erpsync_runtime;
    END IF;
END
$$;
-- +goose StatementEnd
