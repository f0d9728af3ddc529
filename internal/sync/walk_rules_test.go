package sync_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
)

// The committer of a walk: a bulk load COPYs groups of pages that arrive
// back to back in one transaction, bounded in rows, so that a crash
// re-fetches at most one group; a group that fails fails with the pages
// it took named.
func TestTheCommitterOfABulkLoad(t *testing.T) {
	t.Parallel()

	t.Run("a group takes more than one page and at most 10000 rows", func(t *testing.T) {
		t.Parallel()
		// Six pages of 2500: the first four fill a group to its bound
		// exactly, a fifth would pass it.
		h := newHarness(t, erpsim.Options{Invoices: 15000, PageSizeCap: 2500})
		h.pages = 2500
		res := h.mustRun("invoices")
		if res.Stats.Inserted != 15000 {
			t.Fatalf("a bulk load of 15000 invoices inserted %d", res.Stats.Inserted)
		}
		if got := h.text(`SELECT bulk_load::text FROM erp.sync_checkpoints WHERE stream = 'invoices'`); got != "true" {
			t.Fatalf("the first sweep was no bulk load (bulk_load %s)", got)
		}
		// The rows a transaction wrote share its xmin.
		largest := h.count(`SELECT max(n) FROM (SELECT count(*) n FROM erp.invoices GROUP BY xmin::text) g`)
		if largest > 10000 {
			t.Errorf("one transaction wrote %d rows: a group is bounded at 10000", largest)
		}
		if largest <= 2500 {
			t.Errorf("no transaction wrote more than a page (%d rows at most): pages arriving back to back are not grouped", largest)
		}
	})

	t.Run("a failed COPY of a group names its pages and writes none of them", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 600, PageSizeCap: 100})
		h.pages = 100
		bad := h.sim.Invoices()[30].ID // on the first page
		ctx := context.Background()
		h.mustExec(ctx, `CREATE FUNCTION public.refuse_invoice() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.id = '`+itoa(bad)+`' THEN RAISE EXCEPTION 'invoice refused by the test'; END IF; RETURN NEW; END $$`)
		h.mustExec(ctx, `CREATE TRIGGER refuse_invoice BEFORE INSERT ON erp.invoices FOR EACH ROW EXECUTE FUNCTION public.refuse_invoice()`)
		res := h.run("invoices")
		if res.Err == nil || res.Status == model.StatusSucceeded {
			t.Fatalf("a bulk load whose COPY fails succeeded: %s %+v", res.Status, res.Stats)
		}
		msg := res.Err.Error()
		if !strings.Contains(msg, "invoice refused by the test") {
			t.Errorf("the error does not carry the COPY's: %v", res.Err)
		}
		m := regexp.MustCompile(`invoices pages 1-(\d+): `).FindStringSubmatch(msg)
		if m == nil {
			t.Errorf("the error does not name the group's pages (invoices pages 1-n): %v", res.Err)
		} else if m[1] == "0" || len(m[1]) > 1 {
			t.Errorf("the group's last page is named %s, of 6", m[1])
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices`); n != 0 {
			t.Errorf("%d invoices written by a group whose COPY failed", n)
		}
	})
}

func (h *harness) mustExec(ctx context.Context, sql string) {
	h.t.Helper()
	if _, err := h.pool.Exec(ctx, sql); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// A list's AfterWrite runs in the transaction of a page that inserted or
// updated rows: the currency rate history holds a new rate from the run
// that wrote it, a bulk load's rates included.
func TestAfterWriteRunsWithTheWritesOfAPage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{})
	h.mustRun("currencies")
	open := h.count(`SELECT count(*) FROM erp.currency_rates WHERE valid_to IS NULL`)
	if want := h.count(`SELECT count(*) FROM erp.currencies WHERE exchange_rate IS NOT NULL`); open == 0 || open != want {
		t.Errorf("after the first sweep %d open rates, want one per currency with a rate (%d)", open, want)
	}
	h.sim.SetCurrencyRate("EUR", "0.930000")
	h.mustRun("currencies")
	if got := h.text(`SELECT coalesce(string_agg(rate::text, ','), '') FROM erp.currency_rates WHERE code = 'EUR' AND valid_to IS NULL`); got != "0.930000" {
		t.Errorf("after the sweep that wrote EUR's new rate, its open rate is %q, want 0.930000", got)
	}
}
