package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/erpsync/erpsync/internal/tracing"
	"github.com/erpsync/erpsync/internal/tracing/otlptest"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestStart(t *testing.T) {
	t.Run("IsOffWithoutAnEndpoint", func(t *testing.T) {
		defer goleak.VerifyNone(t)
		otlptest.ClearEnv(t)
		before := otel.GetTracerProvider()
		p, err := tracing.Start(t.Context(), "test", discard())
		if err != nil || p != nil {
			t.Fatalf("Start without an endpoint = %v, %v; want nil, nil", p, err)
		}
		if otel.GetTracerProvider() != before {
			t.Error("the global tracer provider changed")
		}
		if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok {
			t.Error("the global tracer provider is the SDK's")
		}
		_, span := otel.Tracer("test").Start(t.Context(), "span")
		defer span.End()
		if span.IsRecording() {
			t.Error("a span records with tracing off")
		}
		if err := p.Shutdown(t.Context()); err != nil {
			t.Errorf("Shutdown of tracing off: %v", err)
		}
	})

	t.Run("IsOffWhenTheSDKIsDisabled", func(t *testing.T) {
		otlptest.ClearEnv(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
		t.Setenv("OTEL_SDK_DISABLED", "true")
		if p, err := tracing.Start(t.Context(), "test", discard()); err != nil || p != nil {
			t.Fatalf("Start with OTEL_SDK_DISABLED=true = %v, %v; want nil, nil", p, err)
		}
	})

	t.Run("ExportsToTheEndpointWithTheHeadersAndServiceName", func(t *testing.T) {
		rcv := otlptest.New(t)
		rcv.Use(t)
		t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme%20corp")
		t.Setenv("OTEL_SERVICE_NAME", "erpsync-eu")
		spans := exportOneSpan(t, rcv)
		if got := spans[0].Resource["service.name"]; got != "erpsync-eu" {
			t.Errorf("service.name = %q; want OTEL_SERVICE_NAME's erpsync-eu", got)
		}
		if got := spans[0].Resource["service.version"]; got != "v9.9.9" {
			t.Errorf("service.version = %q", got)
		}
		if got := rcv.Headers()[0].Get("x-tenant"); got != "acme corp" {
			t.Errorf("header x-tenant = %q; want OTEL_EXPORTER_OTLP_HEADERS's", got)
		}
	})

	t.Run("SendsToATracesEndpointAsGiven", func(t *testing.T) {
		otlptest.ClearEnv(t)
		rcv := otlptest.New(t)
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rcv.URL()+"/v1/traces")
		if got := exportOneSpan(t, rcv)[0].Resource["service.name"]; got != "erpsync" {
			t.Errorf("service.name = %q; want erpsync by default", got)
		}
	})

	t.Run("NamesTheVariableThatIsWrong", func(t *testing.T) {
		const secret = "tok-S3CRET-value"
		for _, c := range []struct{ key, value, want string }{
			{"OTEL_EXPORTER_OTLP_ENDPOINT", "otel-collector:4318", "OTEL_EXPORTER_OTLP_ENDPOINT"},
			{"OTEL_EXPORTER_OTLP_ENDPOINT", "grpc://otel-collector:4317", "OTEL_EXPORTER_OTLP_ENDPOINT"},
			{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://%zz", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
			{"OTEL_EXPORTER_OTLP_HEADERS", "Authorization Bearer " + secret, "OTEL_EXPORTER_OTLP_HEADERS: entry 1 has no '='"},
			{"OTEL_EXPORTER_OTLP_HEADERS", "a=b,Author ization=" + secret, "OTEL_EXPORTER_OTLP_HEADERS: entry 2 has no valid header name"},
			{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "Authorization=" + secret + "%zz", "OTEL_EXPORTER_OTLP_TRACES_HEADERS: the value of Authorization"},
		} {
			otlptest.ClearEnv(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv(c.key, c.value)
			p, err := tracing.Start(t.Context(), "test", discard())
			if err == nil {
				p.Shutdown(t.Context())
				t.Errorf("%s=%s: no error", c.key, c.value)
				continue
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), secret) {
				t.Errorf("%s=%s: error %q; want it to say %q and not quote the header's value", c.key, c.value, err, c.want)
			}
		}
	})
}

// exportOneSpan starts tracing from the environment, ends a span and
// shuts down, and returns what rcv received: that one span.
func exportOneSpan(t *testing.T, rcv *otlptest.Receiver) []otlptest.Span {
	t.Helper()
	before := otel.GetTracerProvider()
	p, err := tracing.Start(t.Context(), "v9.9.9", discard())
	if err != nil || p == nil {
		t.Fatalf("Start = %v, %v", p, err)
	}
	_, span := otel.Tracer("test").Start(t.Context(), "work")
	span.End()
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != before {
		t.Error("Shutdown did not put the global provider back")
	}
	spans := rcv.Spans()
	if len(spans) != 1 || spans[0].Name != "work" {
		t.Fatalf("received %+v; want the one span", spans)
	}
	return spans
}

// sampled is a context carrying a sampled span with fixed ids.
func sampled(traceID, spanID byte) context.Context {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{traceID}, SpanID: trace.SpanID{spanID},
		TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(context.Background(), sc)
}

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(&buf, nil))).With("source", "main")
	// lines are the n lines logged since the last call; a subtest passes
	// its own t, so that other lines, or as many that are not JSON, fail it.
	lines := func(t *testing.T, n int) []map[string]any {
		t.Helper()
		var out []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if l == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("not JSON: %s", l)
			}
			out = append(out, m)
		}
		buf.Reset()
		if len(out) != n {
			t.Fatalf("%d lines logged, want %d: %v", len(out), n, out)
		}
		return out
	}
	run, page := sampled(1, 2), sampled(1, 3)
	runID := trace.SpanContextFromContext(run)

	t.Run("AddsTheIdsOfTheSpanALineIsLoggedWith", func(t *testing.T) {
		log.InfoContext(page, "within a span")
		l := lines(t, 1)[0]
		if l["trace_id"] != runID.TraceID().String() || l["span_id"] != trace.SpanContextFromContext(page).SpanID().String() || l["source"] != "main" {
			t.Errorf("line %v; want the page span's ids and the logger's attributes", l)
		}
	})
	t.Run("AddsNothingOutsideASpan", func(t *testing.T) {
		log.InfoContext(context.Background(), "no span")
		log.Info("no context")
		unsampled := trace.ContextWithSpanContext(context.Background(),
			trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}}))
		log.InfoContext(unsampled, "a span not sampled")
		for _, l := range lines(t, 3) {
			if _, ok := l["trace_id"]; ok {
				t.Errorf("line %v has a trace_id", l)
			}
		}
	})
	t.Run("ABoundLoggerCarriesItsSpanWithoutAContext", func(t *testing.T) {
		bound := tracing.Logger(run, log).With("stream", "invoices")
		bound.Info("summary")
		bound.InfoContext(page, "a page's line")
		got := lines(t, 2)
		if got[0]["span_id"] != runID.SpanID().String() || got[0]["stream"] != "invoices" {
			t.Errorf("line without a context %v; want the run span's ids", got[0])
		}
		if got[1]["span_id"] != trace.SpanContextFromContext(page).SpanID().String() {
			t.Errorf("line with the page's context %v; want the page span's id", got[1])
		}
	})
	t.Run("BindingNeedsASpanAndTheHandler", func(t *testing.T) {
		if tracing.Logger(context.Background(), log) != log {
			t.Error("Logger without a span did not return the logger itself")
		}
		text := slog.New(slog.NewTextHandler(&buf, nil))
		if tracing.Logger(run, text) != text {
			t.Error("Logger of a logger without LogHandler did not return it itself")
		}
	})
}
