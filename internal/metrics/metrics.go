// Package metrics exposes erpsync's Prometheus metrics: its own series,
// all named erpsync_*, beside the standard go_*, process_* and promhttp_*
// ones. Labels carry source, stream and route names, never secrets or ids
// of records.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/erpsync/erpsync/internal/buildinfo"
	"github.com/erpsync/erpsync/internal/model"
)

// Metrics is the registry and the collectors erpsync updates.
type Metrics struct {
	reg         *prometheus.Registry
	runs        *prometheus.CounterVec
	rows        *prometheus.CounterVec
	pages       *prometheus.CounterVec
	requests    *prometheus.CounterVec
	retries     *prometheus.CounterVec
	rateWait    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	lastSuccess *prometheus.GaugeVec
	lastFailed  *prometheus.GaugeVec
	ready       prometheus.Gauge
}

// New registers every collector on a fresh registry.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "erpsync_runs_total", Help: "Stream runs by outcome (succeeded, failed, cancelled).",
		}, []string{"source", "stream", "status"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "erpsync_rows_total", Help: "Records written by what happened to them (inserted, updated, unchanged, rejected).",
		}, []string{"source", "stream", "op"}),
		pages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "erpsync_pages_total", Help: "Pages committed to the warehouse.",
		}, []string{"source", "stream"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "erpsync_erp_requests_total", Help: "HTTP exchanges with the ERP by route and status code (0: no answer).",
		}, []string{"source", "route", "code"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "erpsync_erp_retries_total", Help: "ERP requests retried, by reason (rate_limited, server_error, network, token_renewal).",
		}, []string{"source", "route", "reason"}),
		rateWait: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "erpsync_rate_limit_wait_seconds_total", Help: "Seconds spent waiting on the ERP's Retry-After.",
		}, []string{"source"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "erpsync_run_duration_seconds", Help: "Duration of stream runs.",
			Buckets: []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
		}, []string{"source", "stream"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "erpsync_last_success_timestamp_seconds",
			Help: "Unix time the stream's data were last complete (its last completed sweep), as erp.stream_freshness has it.",
		}, []string{"source", "stream"}),
		lastFailed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "erpsync_last_run_failed", Help: "1 if the last run of the stream failed, else 0.",
		}, []string{"source", "stream"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "erpsync_ready", Help: "1 while /readyz answers ready.",
		}),
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "erpsync_build_info", Help: "Always 1; the version is a label.",
		ConstLabels: prometheus.Labels{"version": buildinfo.Version},
	})
	info.Set(1)
	m.reg.MustRegister(m.runs, m.rows, m.pages, m.requests, m.retries, m.rateWait, m.duration,
		m.lastSuccess, m.lastFailed, m.ready, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is exposed for tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Declare creates a stream's series at zero, so dashboards and alerts see
// them before the first run.
func (m *Metrics) Declare(source, stream string) {
	for _, st := range model.FinalStatuses {
		m.runs.WithLabelValues(source, stream, string(st))
	}
	for _, op := range []string{"inserted", "updated", "unchanged", "rejected"} {
		m.rows.WithLabelValues(source, stream, op)
	}
	m.pages.WithLabelValues(source, stream)
	m.rateWait.WithLabelValues(source)
}

// SetReady mirrors /readyz.
func (m *Metrics) SetReady(ok bool) {
	if ok {
		m.ready.Set(1)
	} else {
		m.ready.Set(0)
	}
}

// PageCommitted implements ingest.Observer.
func (m *Metrics) PageCommitted(source, stream string, p model.RunStats) {
	m.pages.WithLabelValues(source, stream).Add(float64(p.Pages))
	m.rows.WithLabelValues(source, stream, "inserted").Add(float64(p.Inserted))
	m.rows.WithLabelValues(source, stream, "updated").Add(float64(p.Updated))
	m.rows.WithLabelValues(source, stream, "unchanged").Add(float64(p.Unchanged))
	m.rows.WithLabelValues(source, stream, "rejected").Add(float64(p.Rejected))
}

// RunFinished implements ingest.Observer.
func (m *Metrics) RunFinished(source, stream string, status model.RunStatus, elapsed time.Duration, freshAt time.Time) {
	m.runs.WithLabelValues(source, stream, string(status)).Inc()
	m.duration.WithLabelValues(source, stream).Observe(elapsed.Seconds())
	if !freshAt.IsZero() {
		m.lastSuccess.WithLabelValues(source, stream).Set(float64(freshAt.UnixNano()) / 1e9)
	}
	switch status {
	case model.StatusSucceeded:
		m.lastFailed.WithLabelValues(source, stream).Set(0)
	case model.StatusFailed:
		m.lastFailed.WithLabelValues(source, stream).Set(1)
	}
}

// ERP returns the observer of one source's ERP client (an erp.Observer).
func (m *Metrics) ERP(source string) ERPObserver { return ERPObserver{m: m, source: source} }

// ERPObserver counts one source's ERP requests, retries and waits.
type ERPObserver struct {
	m      *Metrics
	source string
}

func (o ERPObserver) Request(route string, code int, _ time.Duration) {
	o.m.requests.WithLabelValues(o.source, route, strconv.Itoa(code)).Inc()
}

func (o ERPObserver) Retry(route, reason string) {
	o.m.retries.WithLabelValues(o.source, route, reason).Inc()
}

func (o ERPObserver) RateLimitWait(d time.Duration) {
	o.m.rateWait.WithLabelValues(o.source).Add(d.Seconds())
}
