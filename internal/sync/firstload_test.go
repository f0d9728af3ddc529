package sync_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
)

// outcomes keeps the outcomes the engine reports to its observer.
type outcomes struct {
	driftObserver
	finished []model.RunOutcome
}

func (o *outcomes) RunFinished(_, _ string, out model.RunOutcome) {
	o.finished = append(o.finished, out)
}

// TestFirstLoad documents the first load: a login's first read of a list,
// before it has any complete sweep.
func TestFirstLoad(t *testing.T) {
	t.Parallel()
	// The daemon's first run of a list it follows is a follow run that must read
	// the whole list. It is labelled as the first load: its result, its summary
	// line (first_load=true, no swept_because) and its row of erp.sync_runs (a
	// note), and it is not counted as a follow run that could not follow. The
	// runs after it are no first load.
	t.Run("IsLabelledAsWhatItIs", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 120})
		logged := &guardLog{}
		h.runner.Log = slog.New(slog.NewJSONHandler(logged, nil))
		obs := &outcomes{driftObserver: driftObserver{counted: map[string]int64{}}}
		h.runner.Obs = obs
		res := h.follow("invoices")
		if res.Status != model.StatusSucceeded || !res.FirstLoad || res.Stats.Seen != 120 {
			t.Fatalf("first follow run: %s, first load %v, %d rows; want the whole list read as the first load", res.Status, res.FirstLoad, res.Stats.Seen)
		}
		line := logged.last(t, "sync finished")
		if line["first_load"] != true || line["swept_because"] != nil || line["kind"] != "follow" {
			t.Errorf("summary line %v, want first_load=true and no swept_because", line)
		}
		if first := logged.last(t, "first load: reading the whole list"); first == nil || logged.last(t, "follow run sweeps the whole list") != nil {
			t.Errorf("the run did not begin by saying it is the first load:\n%s", logged)
		}
		if note := h.text(`SELECT note FROM erp.sync_runs WHERE id = $1`, res.RunID); !strings.HasPrefix(note, "first load: ") {
			t.Errorf("the run's note %q, want it to say first load", note)
		}
		if len(obs.finished) != 1 || obs.finished[0].Swept {
			t.Errorf("outcome %+v, want the first load not counted as a follow run that swept", obs.finished)
		}
		if res := h.mustRun("invoices"); res.FirstLoad {
			t.Errorf("the sweep after the first load is labelled a first load")
		}
		if line := logged.last(t, "sync finished"); line["first_load"] != nil {
			t.Errorf("summary line of the sweep after the first load %v", line)
		}
	})
}
