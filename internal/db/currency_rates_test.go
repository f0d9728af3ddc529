package db_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/testdb"
)

// TestCurrencyRates documents erp.currency_rates, the periods of each
// currency's exchange rate: opened and closed by Postgres, whoever writes
// a currency, and written by no login.
func TestCurrencyRates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, url := testdb.Pool(t)
	runtime := testdb.PoolAs(t, url, testdb.Role(t, "erpsync_runtime"))

	// write runs statements as the runtime login in one transaction and
	// returns its now().
	write := func(t *testing.T, stmts ...string) time.Time {
		t.Helper()
		var at time.Time
		err := pgx.BeginFunc(ctx, runtime, func(tx pgx.Tx) error {
			for _, s := range stmts {
				if _, err := tx.Exec(ctx, s); err != nil {
					return err
				}
			}
			return tx.QueryRow(ctx, `SELECT now()`).Scan(&at)
		})
		if err != nil {
			t.Fatalf("%v: %v", stmts, err)
		}
		return at
	}
	periods := func(t *testing.T, id string) string {
		t.Helper()
		var s string
		if err := admin.QueryRow(ctx, `SELECT coalesce(string_agg(rate::text || ' [' || valid_from::text || ', ' || coalesce(valid_to::text, 'open') || ')', '; '
		ORDER BY valid_from), '') FROM erp.currency_rates WHERE source = 'main' AND currency_id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// period is a period as periods shows it, from times of Postgres.
	period := func(rate string, from time.Time, to *time.Time) string {
		var s string
		if err := admin.QueryRow(ctx, `SELECT $1 || ' [' || $2::timestamptz::text || ', ' || coalesce($3::timestamptz::text, 'open') || ')'`,
			rate, from, to).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	t.Run("AreOpenedAndClosedByPostgresWhenARateIsWritten", func(t *testing.T) {
		// As the daemon's login writes a currency (the columns a sync writes),
		// its first period opens at that transaction's now(), a new rate
		// closes it and opens the next at that instant, the same rate in other
		// digits, a rate gone NULL and a deletion change nothing, and a rate
		// written twice in one transaction opens one period with the last.
		t.Parallel()
		opened := write(t, `INSERT INTO erp.currencies (source, id, company_id, branch_id, code, exchange_rate, payload, payload_hash)
		VALUES ('main', 'eur', '1', '1', 'EUR', 0.921500, '{"id": "eur"}', '\x01')`)
		if got, want := periods(t, "eur"), period("0.921500", opened, nil); got != want {
			t.Fatalf("after the insert: %s, want %s", got, want)
		}
		changed := write(t, `UPDATE erp.currencies SET exchange_rate = 0.930000, payload = '{"id": "eur", "r": 1}' WHERE id = 'eur'`)
		write(t, `UPDATE erp.currencies SET exchange_rate = 0.93, payload = '{"id": "eur", "r": 2}' WHERE id = 'eur'`)
		write(t, `UPDATE erp.currencies SET exchange_rate = NULL WHERE id = 'eur'`)
		write(t, `UPDATE erp.currencies SET exchange_rate = 0.930000, deleted_at = now() WHERE id = 'eur'`)
		twice := write(t, `UPDATE erp.currencies SET exchange_rate = 0.95, deleted_at = NULL WHERE id = 'eur'`,
			`UPDATE erp.currencies SET exchange_rate = 0.96 WHERE id = 'eur'`)
		want := strings.Join([]string{period("0.921500", opened, &changed), period("0.930000", changed, &twice), period("0.96", twice, nil)}, "; ")
		if got := periods(t, "eur"); got != want {
			t.Errorf("periods:\n got %s\nwant %s", got, want)
		}
	})

	t.Run("RefusesTheRuntimeLoginAPeriodOfItsOwn", func(t *testing.T) {
		// The attack of a stolen runtime password: a period that never was,
		// rate 42 for 2025, slipped in before the open one (closed, the
		// planted period inserted and closed, the open one opened again), is
		// refused, and the rate in mid-2025 stays what it was (none: the
		// currency came later). Every write the runtime role could make to the
		// table, enumerated column by column from the catalog, is gone.
		t.Parallel()
		write(t, `INSERT INTO erp.currencies (source, id, company_id, branch_id, code, exchange_rate, payload, payload_hash)
		VALUES ('main', 'usd', '1', '1', 'USD', 1.000000, '{"id": "usd"}', '\x01')`)
		before := periods(t, "usd")
		attack := []string{
			`UPDATE erp.currency_rates SET valid_to = now() WHERE currency_id = 'usd' AND valid_to IS NULL`,
			`INSERT INTO erp.currency_rates (source, currency_id, code, rate, valid_from) VALUES ('main', 'usd', 'USD', 42, '2025-01-01')`,
			`UPDATE erp.currency_rates SET valid_to = '2026-01-01' WHERE currency_id = 'usd' AND valid_from = '2025-01-01'`,
			`UPDATE erp.currency_rates SET valid_to = NULL WHERE currency_id = 'usd' AND valid_to = now()`,
		}
		err := pgx.BeginFunc(ctx, runtime, func(tx pgx.Tx) error {
			for _, q := range attack {
				if _, err := tx.Exec(ctx, q); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("a period of rate 42 for 2025 planted as the runtime login: %v, want permission denied", err)
		}
		for _, q := range []string{`DELETE FROM erp.currency_rates WHERE currency_id = 'usd'`, `TRUNCATE erp.currency_rates`} {
			if _, err := runtime.Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "permission denied") {
				t.Errorf("%s as the runtime login: %v, want permission denied", q, err)
			}
		}
		if got := periods(t, "usd"); got != before {
			t.Errorf("periods after the attack: %s, before it %s", got, before)
		}
		var mid2025 string
		if err := admin.QueryRow(ctx, `SELECT coalesce(string_agg(rate::text, ','), 'none') FROM erp.currency_rates
		WHERE currency_id = 'usd' AND valid_from <= '2025-07-01' AND (valid_to IS NULL OR valid_to > '2025-07-01')`).Scan(&mid2025); err != nil {
			t.Fatal(err)
		}
		if mid2025 != "none" {
			t.Errorf("the rate of USD in mid-2025 is %s, want none", mid2025)
		}
		if granted := rateWrites(t, admin, "erpsync_runtime"); granted != "" {
			t.Errorf("the runtime role may still write erp.currency_rates: %s", granted)
		}
	})
}

// rateWrites lists what role may write in erp.currency_rates, enumerated
// from the catalog: each column it may insert or update, and the table if
// it may delete from or truncate it.
func rateWrites(t *testing.T, pool *pgxpool.Pool, role string) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), `
SELECT coalesce(string_agg(what, ', ' ORDER BY what), '') FROM (
    SELECT p || ' (' || a.attname || ')' AS what
    FROM pg_attribute a, unnest(ARRAY['INSERT', 'UPDATE']) p
    WHERE a.attrelid = 'erp.currency_rates'::regclass AND a.attnum > 0 AND NOT a.attisdropped
      AND has_column_privilege($1, a.attrelid, a.attnum, p)
    UNION ALL
    SELECT p FROM unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) p
    WHERE has_table_privilege($1, 'erp.currency_rates', p)) w`, role).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}
