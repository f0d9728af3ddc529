package cli

import (
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/lmittmann/tint"
	"github.com/mattn/go-isatty"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/tracing"
)

// newLogger builds the process logger: tint (colour on a terminal) for
// text, slog's JSON handler otherwise, whose lines within a traced span
// carry its trace_id and span_id (see tracing.LogHandler).
func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	if cfg.LogFormat == "json" {
		return slog.New(tracing.LogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})))
	}
	return slog.New(tint.NewHandler(w, &tint.Options{
		Level:      level,
		TimeFormat: time.TimeOnly,
		NoColor:    !isTerminal(w),
	}))
}

func isTerminal(w any) bool {
	if t, ok := w.(*terminal); ok {
		return t.tty
	}
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// terminal is stderr shared by the log and the live progress line. On a
// terminal a log line first clears the progress line, so the two never
// run together on one line.
type terminal struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	shown bool // a progress line is on screen
}

func newTerminal(w io.Writer) *terminal { return &terminal{w: w, tty: isTerminal(w)} }

func (t *terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clearLocked()
	return t.w.Write(p)
}

// progress replaces the progress line (terminals only).
func (t *terminal) progress(line string) {
	if !t.tty {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clearLocked()
	io.WriteString(t.w, line)
	t.shown = true
}

// clear removes the progress line, if one is shown.
func (t *terminal) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clearLocked()
}

func (t *terminal) clearLocked() {
	if t.shown {
		io.WriteString(t.w, "\r\033[K")
		t.shown = false
	}
}
