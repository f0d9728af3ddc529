package cli

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// TestTerminal documents the terminal a command writes its log and live
// progress to.
func TestTerminal(t *testing.T) {
	// On a terminal, a log line first clears the live progress line: one
	// stream's progress never runs into the next line.
	t.Run("ClearsTheProgressLineBeforeALogLine", func(t *testing.T) {
		var out bytes.Buffer
		term := &terminal{w: &out, tty: true}
		progress := progressPrinter(term, "default", "invoices", true)
		progress("sync-riyadh", sync.Progress{RunStats: model.RunStats{Pages: 100, Seen: 20000}, Elapsed: 10 * time.Second})
		log := slog.New(slog.NewTextHandler(term, nil))
		log.Info("sync finished")
		got := out.String()
		if !strings.Contains(got, "default/invoices (sync-riyadh): 100 pages, 20000 rows") {
			t.Errorf("the progress line does not name the source, stream and login: %q", got)
		}
		i, j := strings.Index(got, "20000 rows"), strings.Index(got, "msg=\"sync finished\"")
		if i < 0 || j < 0 || !strings.Contains(got[i:j], "\r\033[K") {
			t.Errorf("the progress line is not cleared before the log line: %q", got)
		}
	})

	// Where the read's length is known (the ERP states it, or the last complete
	// sweep found it), the line gives it and the time left at the run's rate;
	// where not, pages, rows and the rate only.
	t.Run("ShowsTheTotalAndTheTimeLeftWhereTheyAreKnown", func(t *testing.T) {
		var out bytes.Buffer
		term := &terminal{w: &out, tty: true}
		progress := progressPrinter(term, "default", "invoices", false)
		progress("erpsync", sync.Progress{RunStats: model.RunStats{Pages: 40, Seen: 20000}, Elapsed: 10 * time.Second,
			Done: 50000, Total: 200000, FirstLoad: true})
		if want := "default/invoices, first load: 40 pages, 20000 rows, 2000 rows/s; 50000 of 200000 rows (25%), 1m15s left"; !strings.Contains(out.String(), want) {
			t.Errorf("progress line %q, want %q", out.String(), want)
		}
		out.Reset()
		progress("erpsync", sync.Progress{RunStats: model.RunStats{Pages: 40, Seen: 20000}, Elapsed: 10 * time.Second})
		if got := out.String(); !strings.HasSuffix(got, "default/invoices: 40 pages, 20000 rows, 2000 rows/s") {
			t.Errorf("progress line of a read of unknown length %q", got)
		}
	})

	t.Run("ShowsNoProgressLineOffATerminal", func(t *testing.T) {
		var out bytes.Buffer
		if p := progressPrinter(&terminal{w: &out}, "default", "invoices", false); p != nil {
			t.Error("a progress printer off a terminal")
		}
	})
}
