package sync_test

import (
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// driftObserver counts the drift the engine reports.
type driftObserver struct {
	counted map[string]int64 // field/change
}

func (o *driftObserver) PageCommitted(string, string, model.RunStats) {}
func (o *driftObserver) RunFinished(string, string, model.RunOutcome) {}
func (o *driftObserver) FollowMissed(string, string, string, int64)   {}
func (o *driftObserver) DriftCounted(_, _, field, change string, n int64) {
	o.counted[field+"/"+change] += n
}

// TestDriftPolicy documents a stream's drift policy: what a run does with a
// field it cannot read as expected.
func TestDriftPolicy(t *testing.T) {
	t.Parallel()
	// An installation that renamed the invoice date: every invoice's
	// invoice_date cannot be read.
	renamed := func(h *harness) {
		h.sim.SetFieldDrift("/sales/api/invoices/list/", map[string]json.RawMessage{"issued_on": json.RawMessage(`"2026-11-01"`)}, []string{"date"})
	}

	t.Run("RecordWritesNULLRecordsTheDriftAndCountsIt", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 60})
		obs := &driftObserver{counted: map[string]int64{}}
		h.runner.Obs = obs
		renamed(h)
		h.mustRun("invoices")
		if n := h.count(`SELECT count(*) FROM erp.invoices WHERE invoice_date IS NULL`); n != 60 {
			t.Errorf("%d invoices with a NULL date, want 60", n)
		}
		if obs.counted["date/unusable"] != 60 || obs.counted["issued_on/added"] != 60 {
			t.Errorf("drift counted %v, want 60 unusable dates and 60 added issued_on", obs.counted)
		}
	})

	// An installation that stopped sending the date of every invoice, with
	// drift: record: the run succeeds, and says so where an operator looks.
	// Its summary line is at WARN with the drift and its counts, its result
	// carries the warning (sync --strict fails it), and the login's standing
	// warning (erpsync status) says it without counts. A follow run that
	// meets it again adds nothing twice; the first complete sweep that reads
	// every date again clears it, at INFO.
	t.Run("RecordIsHeardInTheSummaryLineAndTheStandingWarning", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 1000})
		logged := &guardLog{}
		h.runner.Log = slog.New(slog.NewJSONHandler(logged, nil))
		h.sim.SetFieldDrift("/sales/api/invoices/list/", nil, []string{"date"})
		res := h.mustRun("invoices")
		want := "drift: date missing in 1000 records, date unreadable in 1000 records (invoice_date is NULL: the field is absent); see erp.schema_drift"
		if !slices.Equal(res.Warnings, []string{want}) {
			t.Errorf("warnings %q, want %q", res.Warnings, want)
		}
		if line := logged.last(t, "sync finished"); line["level"] != "WARN" || line["warnings"] != want {
			t.Errorf("summary line %v, want it at WARN with the warning", line)
		}
		standing := "drift: date missing; drift: date unreadable (invoice_date is NULL: the field is absent)"
		warning := func() string { return h.text(`SELECT warning FROM erp.sync_checkpoints WHERE stream = 'invoices'`) }
		if got := warning(); got != standing {
			t.Errorf("standing warning %q, want %q", got, standing)
		}
		// A second sweep: its pages are known (answered as in the first), so
		// their columns are not read again, only their fields compared.
		h.mustRun("invoices")
		if got := warning(); got != "drift: date missing" {
			t.Errorf("standing warning after a sweep of known pages %q", got)
		}
		h.sim.AddInvoices(3)
		res = h.follow("invoices")
		if want := strings.ReplaceAll(want, "1000", strconv.FormatInt(res.Stats.Seen, 10)); res.Status != model.StatusSucceeded ||
			res.Swept != "" || !slices.Equal(res.Warnings, []string{want}) {
			t.Errorf("a follow run of 3 new dateless invoices: %s, swept %q, warnings %q, want %q", res.Status, res.Swept, res.Warnings, want)
		}
		if got := warning(); got != standing {
			t.Errorf("standing warning after the follow run %q, want %q once", got, standing)
		}
		h.sim.SetFieldDrift("/sales/api/invoices/list/", nil, nil)
		if res := h.mustRun("invoices"); len(res.Warnings) != 0 {
			t.Errorf("a sweep that read every date: warnings %q", res.Warnings)
		}
		if line := logged.last(t, "sync finished"); line["level"] != "INFO" || line["warnings"] != nil {
			t.Errorf("summary line of a clean sweep %v, want it at INFO without warnings", line)
		}
		if got := warning(); got != "<null>" {
			t.Errorf("standing warning after a clean sweep %q, want none", got)
		}
	})

	// A field the stream does not expect is counted but not warned of: the record
	// is kept whole and every column reads (the built-in simulator's currencies
	// carry two). A record that cannot be used is warned of.
	t.Run("WarnsOfRejectedRecordsNotOfAFieldAdded", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 10})
		obs := &driftObserver{counted: map[string]int64{}}
		h.runner.Obs = obs
		if res := h.mustRun("currencies"); len(res.Warnings) != 0 || obs.counted["is_active/added"] == 0 {
			t.Errorf("currencies with fields added: warnings %q, drift counted %v", res.Warnings, obs.counted)
		}
		h.sim.SetFieldDrift("/accounts/api/cashboxes/", map[string]json.RawMessage{"balance": json.RawMessage(`"a lot"`)}, nil)
		res := h.mustRun("cashboxes")
		if want := []string{"4 records rejected; see erp.rejected_records"}; !slices.Equal(res.Warnings, want) {
			t.Errorf("cashboxes with unreadable balances: warnings %q, want %q", res.Warnings, want)
		}
	})

	t.Run("StopFailsTheRunBeforeItWritesNamingTheFieldAndTheShape", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 60})
		h.mustRun("invoices")
		renamed(h)
		h.sim.MutateInvoices(func(cur []erpsim.Invoice) []erpsim.Invoice { cur[0].Status = "changed"; return cur })
		h.driftStop = map[string]bool{"invoices": true}
		res := h.run("invoices")
		var stop *sync.DriftStopError
		if res.Status != model.StatusFailed || !errors.As(res.Err, &stop) || stop.Field != "date" ||
			!strings.Contains(res.Err.Error(), "the field is absent") {
			t.Fatalf("want a failed run naming the date field and its shape: %s %v", res.Status, res.Err)
		}
		if n := h.count(`SELECT count(*) FROM erp.invoices WHERE status = 'changed' OR invoice_date IS NULL`); n != 0 {
			t.Errorf("%d rows written by the page that stopped", n)
		}
		if n := h.count(`SELECT count(*) FROM erp.schema_drift WHERE change = 'unusable'`); n != 0 {
			t.Errorf("%d drift rows stored by a page that was not written", n)
		}
		// Other streams carry on, and the stream goes on once the policy
		// is record again.
		h.mustRun("currencies")
		h.driftStop = nil
		h.mustRun("invoices")
		if n := h.count(`SELECT count(*) FROM erp.invoices WHERE status = 'changed'`); n != 1 {
			t.Errorf("after drift: record, the change was written %d times, want 1", n)
		}
	})
}
