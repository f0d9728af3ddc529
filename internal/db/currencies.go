package db

import (
	"context"
	"fmt"
)

// The currencies' rate history (erp.currency_rates); the currencies
// themselves are a list (erp.currencies, written by Table).

// RecordCurrencyRates keeps erp.currency_rates in step with the
// currencies of ids, as they now are in erp.currencies: it closes the open
// period of every currency whose rate changed and opens a new one (also
// for a currency seen for the first time). It runs in the transaction
// that wrote them and returns the periods opened.
func RecordCurrencyRates(ctx context.Context, tx Tx, source string, ids []string) (int64, error) {
	// Two statements, not one CTE: the parts of a CTE run in no fixed
	// order, and the unique index on open periods needs the close first.
	_, err := tx.Exec(ctx, `
UPDATE erp.currency_rates r SET valid_to = now()
FROM erp.currencies c
WHERE c.source = $1 AND c.id = ANY ($2::text[]) AND r.source = c.source AND r.currency_id = c.id
  AND r.valid_to IS NULL AND r.rate <> c.exchange_rate`, source, ids)
	if err != nil {
		return 0, fmt.Errorf("closing changed currency rates: %w", Describe(err))
	}
	tag, err := tx.Exec(ctx, `
INSERT INTO erp.currency_rates (source, currency_id, code, rate, valid_from)
SELECT c.source, c.id, c.code, c.exchange_rate, now() FROM erp.currencies c
WHERE c.source = $1 AND c.id = ANY ($2::text[]) AND c.exchange_rate IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM erp.currency_rates r
                  WHERE r.source = c.source AND r.currency_id = c.id AND r.valid_to IS NULL)`, source, ids)
	if err != nil {
		return 0, fmt.Errorf("opening currency rates: %w", Describe(err))
	}
	return tag.RowsAffected(), nil
}
