package sync_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
)

// TestBulkLoad documents a list's first sweep, a bulk load, and its
// committer: pages that arrive back to back are COPYed as a group in one
// transaction, bounded in rows, so that a crash re-fetches at most one
// group; a group that fails fails with the pages it took named.
func TestBulkLoad(t *testing.T) {
	t.Parallel()

	t.Run("GroupsMoreThanOnePageAndAtMostTenThousandRows", func(t *testing.T) {
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

	t.Run("NamesThePagesOfAFailedCOPYAndWritesNoneOfThem", func(t *testing.T) {
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

	t.Run("CommitsAtMostTenThousandRowsAtOnce", func(t *testing.T) {
		// A bulk load groups pages arriving back to back in one COPY and one
		// transaction, but no more than 10,000 rows: a crash re-fetches at most
		// that many.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 12000, PageSizeCap: 1000})
		h.pages = 1000
		res := h.mustRun("invoices")
		if res.Stats.Pages != 12 || res.Stats.Inserted != 12000 {
			t.Fatalf("bulk load: %d pages, %d inserted; want 12 pages of 1000", res.Stats.Pages, res.Stats.Inserted)
		}
		// Rows written by one transaction share its xmin.
		var transactions, most int64
		if err := h.pool.QueryRow(context.Background(), `SELECT count(*), max(n) FROM
		(SELECT count(*) AS n FROM erp.invoices GROUP BY xmin::text) t`).Scan(&transactions, &most); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d transactions, the largest of %d rows", transactions, most)
		if most > 10000 {
			t.Errorf("one transaction wrote %d rows, want at most 10,000", most)
		}
		if transactions >= 12 {
			t.Errorf("%d transactions for 12 pages arriving back to back, want pages grouped", transactions)
		}
		h.wantInvoices(12000)
	})

	t.Run("FailsTheRunWhenAGroupedCOPYIsRefused", func(t *testing.T) {
		// During a bulk load, pages arriving back to back are COPYed as one
		// group. A COPY that Postgres refuses (not for a row written already)
		// fails the run with an error naming the stream and the group's pages;
		// nothing of the group is written, and the next run loads everything.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 300})
		refused := fmt.Sprint(h.sim.Invoices()[75].ID) // on the second page
		ctx := context.Background()
		if _, err := h.pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE erp.invoices ADD CONSTRAINT refuses_one CHECK (id <> '%s')`, refused)); err != nil {
			t.Fatal(err)
		}
		res := h.run("invoices")
		if res.Status != model.StatusFailed {
			t.Fatalf("a refused COPY: status %s, want failed", res.Status)
		}
		if got := fmt.Sprint(res.Err); !regexp.MustCompile(`invoices pages 1-[2-6]: .*refuses_one`).MatchString(got) {
			t.Errorf("error %q, want it to name the group's pages (1 to at least 2) and the constraint", got)
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices`); n != 0 {
			t.Errorf("%d rows written by a group whose COPY failed, want none", n)
		}
		if _, err := h.pool.Exec(ctx, `ALTER TABLE erp.invoices DROP CONSTRAINT refuses_one`); err != nil {
			t.Fatal(err)
		}
		h.mustRun("invoices")
		h.wantInvoices(300)
	})

	t.Run("FallsBackWhenARowMovesPages", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 120})
		// The ERP lists invoice 0 again on the second page, as it does when a
		// record changes while a sweep pages through the list.
		h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			moved := inv[0]
			moved.TotalBC = decimal.RequireFromString("7.77")
			out := append([]erpsim.Invoice{}, inv[:70]...)
			out = append(out, moved)
			return append(out, inv[70:]...)
		})
		res := h.mustRun("invoices")
		if res.Stats.Seen != 121 || res.Stats.Inserted != 120 || res.Stats.Updated != 1 {
			t.Errorf("stats %+v: want 121 seen, 120 inserted, 1 updated", res.Stats)
		}
		if got := h.text(`SELECT total_bc::text FROM erp.invoices WHERE id = $1`, fmt.Sprint(h.sim.Invoices()[0].ID)); got != "7.77" {
			t.Errorf("moved invoice total = %s, want its later version 7.77", got)
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NULL`); n != 120 {
			t.Errorf("live rows = %d, want 120", n)
		}
		if got := h.text(`SELECT bulk_load::text FROM erp.sync_checkpoints WHERE stream = 'invoices'`); got != "true" {
			t.Errorf("first sweep bulk_load = %s, want true", got)
		}
		// The next sweep is an ordinary one and still finds nothing deleted.
		res = h.mustRun("invoices")
		// Both listings of the duplicate differ from what the other left.
		if res.Stats.Deleted != 0 || res.Stats.Updated != 2 {
			t.Errorf("second sweep stats %+v: want 2 updated (the duplicate's two versions in turn), 0 deleted", res.Stats)
		}
	})

	t.Run("RefreshesThePlannerStatistics", func(t *testing.T) {
		// A bulk load leaves the planner statistics of what it loaded: without
		// them the next sweeps' lookups by id are planned for an empty table.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 300})
		h.mustRun("invoices")
		if n := h.count(`SELECT reltuples::bigint FROM pg_class WHERE oid = 'erp.invoices'::regclass`); n != 300 {
			t.Errorf("the planner believes erp.invoices holds %d rows after the bulk load, want 300", n)
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
