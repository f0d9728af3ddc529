package erp

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// A span per request: the route label (never the URL, which carries the
// cursor), the method, the last status, how often it was sent again, and
// each wait as an event, with OpenTelemetry's names where it has one.
// Nothing the request or its answer carries goes in: no credential,
// header, query or body.
const (
	attrWait     = attribute.Key("erp.wait.seconds")
	attrReason   = attribute.Key("erp.retry.reason")
	attrAttempts = attribute.Key("erp.attempt")
)

// The events of a request's span.
const (
	eventBudget     = "erp.wait.budget"      // waiting for the source's request budget
	eventRetryAfter = "erp.wait.retry_after" // waiting as a 429's Retry-After says
	eventBackoff    = "erp.wait.backoff"     // waiting before sending again
	eventRenewal    = "erp.retry"            // sending again at once (a token renewed)
)

// tracer is looked up at each request, so that it is the global provider
// of the moment (the no-op one when tracing is off).
func tracer() trace.Tracer { return otel.Tracer("github.com/erpsync/erpsync/internal/erp") }

// startRequest starts the span of one request, its retries included.
// Off, it costs no attribute: they are set only on a recording span.
func startRequest(ctx context.Context, method, route string) (context.Context, trace.Span) {
	ctx, span := tracer().Start(ctx, "erp request", trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetName(method + " " + route)
		span.SetAttributes(semconv.HTTPRequestMethodKey.String(method), semconv.URLTemplate(route))
	}
	return ctx, span
}

// endRequest records how the request ended and ends its span: the last
// status answered (0: none), how many times it was sent again, and, if
// it failed, the kind of failure. An error's text is not recorded: it
// may quote the ERP's answer.
func endRequest(span trace.Span, status, resends int, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if status > 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	}
	if resends > 0 {
		span.SetAttributes(semconv.HTTPRequestResendCount(resends))
	}
	if err != nil {
		kind := failureKind(status, err)
		span.SetAttributes(semconv.ErrorTypeKey.String(kind))
		span.SetStatus(codes.Error, kind)
	}
}

// failureKind names a failure without its text: the status for an
// answer that ended the request, else what kind of no-answer it was.
func failureKind(status int, err error) string {
	var he *HTTPError
	var ae *AuthError
	var tl *TooLargeError
	switch {
	case errors.As(err, &he):
		return strconv.Itoa(he.Status)
	case errors.As(err, &ae):
		return strconv.Itoa(ae.Status)
	case errors.As(err, &tl):
		return "too_large"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case status == 429:
		return "rate_limited"
	case status > 0:
		return strconv.Itoa(status)
	}
	return "no_answer"
}

// waitEvent records on ctx's span a wait that began at start.
func waitEvent(ctx context.Context, name string, start time.Time, wait time.Duration, attrs ...attribute.KeyValue) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent(name, trace.WithTimestamp(start), trace.WithAttributes(append(attrs, attrWait.Float64(wait.Seconds()))...))
}
