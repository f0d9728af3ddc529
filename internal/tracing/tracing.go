// Package tracing turns OpenTelemetry traces on when the standard OTEL_*
// variables name an OTLP/HTTP collector, and puts the ids of a span in
// the JSON log lines written within it. Off, nothing of the SDK runs: the
// instrumented packages start their spans on OpenTelemetry's global
// no-op provider.
//
// The variables are the SDK's own, read from the process environment by
// the SDK and the exporter: OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, OTEL_BSP_*. This
// package reads only what decides whether tracing is on (an endpoint, and
// OTEL_SDK_DISABLED, which the Go SDK does not read), and checks the
// endpoints and headers so that a mistake is an error naming the variable
// rather than spans sent elsewhere, or a header value in a log line.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// The variables that name the collector; either turns tracing on.
var endpointVars = []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}

// SettingError is an OTEL_* variable that cannot be used; its message
// names the variable.
type SettingError struct{ msg string }

func (e *SettingError) Error() string { return e.msg }

func settingErrorf(format string, args ...any) error {
	return &SettingError{msg: fmt.Sprintf(format, args...)}
}

// Provider is the tracing of one process. A nil *Provider is tracing off.
type Provider struct {
	sdk  *sdktrace.TracerProvider
	prev trace.TracerProvider
}

// Start turns tracing on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set and OTEL_SDK_DISABLED is not
// true: spans are batched and exported over OTLP/HTTP, and the SDK's own
// errors go to log. Otherwise it returns nil and changes nothing. version
// is the service.version of the spans' resource; service.name is
// "erpsync" unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say
// otherwise. An error is a *SettingError naming the variable that is
// wrong.
func Start(ctx context.Context, version string, log *slog.Logger) (*Provider, error) {
	if !on() {
		return nil, nil
	}
	if err := checkEnv(); err != nil {
		return nil, err
	}
	otel.SetLogger(logr.FromSlogHandler(log.Handler()))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("traces: could not export", "err", err)
	}))
	// Later sources win: the environment over the defaults.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("erpsync"), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil {
		return nil, settingErrorf("OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES: %v", err)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, settingErrorf("the OTLP trace exporter's OTEL_EXPORTER_OTLP_* variables: %v", err)
	}
	p := &Provider{
		sdk:  sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)),
		prev: otel.GetTracerProvider(),
	}
	otel.SetTracerProvider(p.sdk)
	return p, nil
}

// Shutdown exports the spans not yet sent and stops, within ctx; the
// global provider is again what it was before Start. On a nil Provider
// it does nothing.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	otel.SetTracerProvider(p.prev)
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("traces: flushing to the collector: %w", err)
	}
	return nil
}

// on reports whether the environment asks for traces.
func on() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	for _, k := range endpointVars {
		if os.Getenv(k) != "" {
			return true
		}
	}
	return false
}

// checkEnv refuses an endpoint that is not an http(s) URL (the exporter
// would quietly send to localhost instead) and a header list the
// exporter cannot parse (its complaint would quote the value, which may be
// a credential). The messages never quote a header value.
func checkEnv() error {
	for _, k := range endpointVars {
		v := os.Getenv(k)
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil {
			return settingErrorf("%s: not a URL; want the collector's http:// or https:// address, e.g. http://otel-collector:4318", k)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return settingErrorf("%s %s: want the collector's http:// or https:// address, e.g. http://otel-collector:4318", k, u.Redacted())
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if err := checkHeaders(os.Getenv(k)); err != nil {
			return settingErrorf("%s: %v; want key=value pairs separated by commas, values URL-encoded", k, err)
		}
	}
	return nil
}

func checkHeaders(v string) error {
	if v == "" {
		return nil
	}
	for i, pair := range strings.Split(v, ",") {
		key, value, ok := strings.Cut(pair, "=")
		switch {
		case !ok:
			return fmt.Errorf("entry %d has no '='", i+1)
		case strings.TrimSpace(key) == "" || strings.ContainsAny(strings.TrimSpace(key), " \t\"(),/:;<=>?@[\\]{}"):
			return fmt.Errorf("entry %d has no valid header name", i+1)
		}
		if _, err := url.PathUnescape(value); err != nil {
			return errors.New("the value of " + strings.TrimSpace(key) + " is not URL-encoded")
		}
	}
	return nil
}
