package cli

import (
	"context"
	"log/slog"
	gosync "sync"
	"time"

	"github.com/erpsync/erpsync/internal/buildinfo"
	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/tracing"
)

// traces are the traces of a command that runs streams: on when the
// OTEL_* variables name a collector (internal/tracing), and flushed at
// exit for at most maxFlush, and never past the shutdown timeout counted
// from when the stop began (the first signal, or else the end of the
// command's work). A nil *traces is tracing off.
type traces struct {
	provider *tracing.Provider
	timeout  time.Duration
	log      *slog.Logger

	mu    gosync.Mutex
	began time.Time
}

// maxFlush bounds the flush at exit: a collector that does not answer
// would otherwise hold the exit for as long as it is allowed (the
// exporter retries until its deadline), and spans are not worth that.
const maxFlush = 5 * time.Second

// startTraces starts the command's traces; a mistake in the OTEL_*
// variables is a configuration error (see Main).
func startTraces(cfg config.Config, log *slog.Logger) (*traces, error) {
	p, err := tracing.Start(context.Background(), buildinfo.Version, log)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, nil
	}
	return &traces{provider: p, timeout: cfg.Shutdown.Timeout, log: log}, nil
}

// stopBegins marks the start of the stop, once.
func (t *traces) stopBegins() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.began.IsZero() {
		t.began = time.Now()
	}
}

// flush exports the spans not yet sent, by the stop's deadline.
func (t *traces) flush() {
	if t == nil {
		return
	}
	t.stopBegins()
	t.mu.Lock()
	deadline := t.began.Add(t.timeout)
	t.mu.Unlock()
	if limit := time.Now().Add(maxFlush); limit.Before(deadline) {
		deadline = limit
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		t.log.Warn("traces not all exported", "err", err)
	}
}
