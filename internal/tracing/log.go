package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// The keys of the ids in a log line.
const (
	TraceIDKey = "trace_id"
	SpanIDKey  = "span_id"
)

// LogHandler wraps h so that a log line written within a traced span
// carries trace_id and span_id: the span of the context it was logged
// with (the *Context calls: InfoContext...), or else the span its logger
// was bound to (Logger). Lines outside a sampled span are as h writes
// them.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{inner: h} }

// Logger returns log bound to the span in ctx: its lines carry that
// span's ids even when logged without a context, so that code which
// logs through a logger handed to it (a run's) needs no context at each
// call. A logger not built with LogHandler, or a ctx without a sampled
// span, gives log itself.
func Logger(ctx context.Context, log *slog.Logger) *slog.Logger {
	h, ok := log.Handler().(logHandler)
	sc := trace.SpanContextFromContext(ctx)
	if !ok || !sc.IsSampled() {
		return log
	}
	h.bound = sc
	return slog.New(h)
}

type logHandler struct {
	inner slog.Handler
	bound trace.SpanContext
}

func (h logHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsSampled() {
		sc = h.bound
	}
	if sc.IsSampled() {
		r.AddAttrs(slog.String(TraceIDKey, sc.TraceID().String()), slog.String(SpanIDKey, sc.SpanID().String()))
	}
	return h.inner.Handle(ctx, r)
}

func (h logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{inner: h.inner.WithAttrs(as), bound: h.bound}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{inner: h.inner.WithGroup(name), bound: h.bound}
}
