package cli

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/model"
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
		progress("sync-riyadh", model.RunStats{Pages: 100, Seen: 20000})
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

	t.Run("ShowsNoProgressLineOffATerminal", func(t *testing.T) {
		var out bytes.Buffer
		if p := progressPrinter(&terminal{w: &out}, "default", "invoices", false); p != nil {
			t.Error("a progress printer off a terminal")
		}
	})
}
