package sync_test

import (
	"encoding/json"
	"errors"
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
