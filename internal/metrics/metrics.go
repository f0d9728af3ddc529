// Package metrics exposes erpsync's Prometheus metrics: its own series,
// all named erpsync_*, beside the standard go_*, process_* and promhttp_*
// ones. Labels carry source, stream and route names, never secrets or ids
// of records.
package metrics

import (
	"net/http"
	"strconv"
	gosync "sync"
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
	lastFollow  *prometheus.GaugeVec
	followEvery *prometheus.GaugeVec
	lastWindow  *prometheus.GaugeVec
	windowEvery *prometheus.GaugeVec
	expected    *prometheus.GaugeVec
	budget      *prometheus.GaugeVec
	stretch     *prometheus.GaugeVec
	followSwept *prometheus.CounterVec
	missed      *prometheus.CounterVec
	drift       *prometheus.CounterVec
	driftFields driftFields
	lastFailed  *prometheus.GaugeVec
	held        *prometheus.GaugeVec
	skipped     *prometheus.CounterVec
	lockHeld    *prometheus.GaugeVec
	foreignLock *prometheus.CounterVec
	interval    *prometheus.GaugeVec
	pruned      *prometheus.CounterVec
	inFlight    *prometheus.GaugeVec
	budgetWait  *prometheus.CounterVec
	ready       prometheus.Gauge
}

// New registers every collector on a fresh registry.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runs: counter("erpsync_runs_total",
			"Stream runs by outcome (succeeded, failed, cancelled).",
			"source", "stream", "status"),
		rows: counter("erpsync_rows_total",
			"Records written by what happened to them (inserted, updated, unchanged, rejected).",
			"source", "stream", "op"),
		pages: counter("erpsync_pages_total",
			"Pages committed to the warehouse.",
			"source", "stream"),
		requests: counter("erpsync_erp_requests_total",
			"HTTP exchanges with the ERP by route and status code (0: no answer), and by the stream and kind of run they served (kind: sweep, follow, window, probe, verify, login for the login's own token, revocation and identity, other; stream empty where none).",
			"source", "stream", "kind", "route", "code"),
		retries: counter("erpsync_erp_retries_total",
			"ERP requests retried, by reason (rate_limited, server_error, network, token_renewal).",
			"source", "route", "reason"),
		rateWait: counter("erpsync_rate_limit_wait_seconds_total",
			"Seconds spent waiting on the ERP's Retry-After.",
			"source"),
		duration: histogram("erpsync_run_duration_seconds",
			"Duration of stream runs.",
			[]float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}, "source", "stream"),
		lastSuccess: gauge("erpsync_last_success_timestamp_seconds",
			"Unix time the stream's data read through the login were last complete (its last completed sweep), as erp.stream_freshness has it.",
			"source", "stream", "login"),
		lastFollow: gauge("erpsync_last_follow_timestamp_seconds",
			"Unix time a follow run of the paged list through the login last read everything new (found something or not), as erp.stream_freshness has it.",
			"source", "stream", "login"),
		followEvery: gauge("erpsync_follow_interval_seconds",
			"Seconds between two scheduled follow runs of a paged list (its schedule; erpsync_schedule_interval_seconds is then its complete sweeps'). Only streams that are followed have it.",
			"source", "stream"),
		lastWindow: gauge("erpsync_last_window_timestamp_seconds",
			"Unix time a window run of the paged list through the login last re-read its newest pages (changed or not), as erp.stream_freshness has it.",
			"source", "stream", "login"),
		windowEvery: gauge("erpsync_window_interval_seconds",
			"Seconds between two scheduled window runs of a paged list (its window schedule, stretched by the request budget if it must be). Only streams with a window have it.",
			"source", "stream"),
		expected: gauge("erpsync_erp_requests_expected_per_hour",
			"ERP requests an hour the source's schedules are expected to ask, by kind of run (follow, window, sweep), from the sizes the warehouse last saw, after any stretch to fit requests_per_hour.",
			"source", "kind"),
		budget: gauge("erpsync_erp_requests_budget_per_hour",
			"The source's requests_per_hour (0: no budget).",
			"source"),
		stretch: gauge("erpsync_schedule_stretch_ratio",
			"How many times their configured interval the source's window runs and complete sweeps are apart, to fit its requests_per_hour (1: not stretched).",
			"source"),
		followSwept: counter("erpsync_follow_sweeps_total",
			"Follow runs that read the whole list instead (the list not in a strict order of ids, continuity not proved), as erp.sync_runs.note says why; a login's first load is not one.",
			"source", "stream", "login"),
		missed: counter("erpsync_follow_missed_total",
			"Records a complete sweep inserted at or below the highest id follow runs had read: records the follows missed (the login's list is then swept, not followed, until reset).",
			"source", "stream", "login"),
		drift: counter("erpsync_schema_drift_total",
			"Records that differed from what the stream expects, by field and change: added, missing, type (another JSON kind), scale (money), duplicate, unusable (a typed column could not read it and is NULL). Fields past the first 100 of a stream are counted as field=\"(other)\".",
			"source", "stream", "field", "change"),
		lastFailed: gauge("erpsync_last_run_failed",
			"1 if the last run of the stream through the login failed, else 0.",
			"source", "stream", "login"),
		held: gauge("erpsync_deletions_held",
			"Rows the login's last complete sweep found gone but the deletion guard did not mark (0: none held).",
			"source", "stream", "login"),
		skipped: counter("erpsync_runs_skipped_total",
			"Scheduled runs not made, by reason: locked (another process holds the stream's lock), capacity (no run slot free before the next tick), budget (no slot of the source's request budget free before it).",
			"source", "stream", "reason"),
		lockHeld: gauge("erpsync_lock_held_by_other_seconds",
			"How long another session has held the stream's lock, as this process last found it: since its run began for an erpsync run, else since this process first found it holding the lock (0: it ran the stream itself, or found its data fresh).",
			"source", "stream"),
		foreignLock: counter("erpsync_lock_held_by_foreign_total",
			"Scheduled runs skipped because a session whose role is not erpsync's (neither the runtime role nor the schema's owner) held the stream's lock.",
			"source", "stream"),
		interval: gauge("erpsync_schedule_interval_seconds",
			"Seconds between two scheduled runs of the stream that read it whole (complete sweeps; for cron specs, the next interval).",
			"source", "stream"),
		pruned: counter("erpsync_pruned_rows_total",
			"Bookkeeping rows removed by retention, by table (sync_runs, rejected_records, change_positions).",
			"table"),
		inFlight: gauge("erpsync_erp_requests_in_flight",
			"Requests this process has in flight to the installation (at most its max_concurrent_requests).",
			"source"),
		budgetWait: counter("erpsync_erp_budget_wait_seconds_total",
			"Seconds runs and requests waited for the installation's request budget (max_concurrent_requests, max_requests_per_second).",
			"source"),
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
		m.lastSuccess, m.lastFollow, m.followEvery, m.lastWindow, m.windowEvery, m.expected, m.budget, m.stretch, m.followSwept, m.missed, m.drift, m.lastFailed, m.held, m.skipped, m.lockHeld, m.foreignLock, m.interval, m.pruned, m.inFlight, m.budgetWait, m.ready, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// counter, gauge and histogram make a collector of that kind with its
// name, help and labels.
func counter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is exposed for tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Declare creates a stream's series at zero (and its schedule's
// interval), so dashboards and alerts see them before the first run.
func (m *Metrics) Declare(source, stream string, logins []string, interval time.Duration) {
	m.interval.WithLabelValues(source, stream).Set(interval.Seconds())
	for _, reason := range []string{SkipLocked, SkipCapacity, SkipBudget} {
		m.skipped.WithLabelValues(source, stream, reason)
	}
	m.lockHeld.WithLabelValues(source, stream)
	m.foreignLock.WithLabelValues(source, stream)
	for _, table := range []string{"sync_runs", "rejected_records", "change_positions"} {
		m.pruned.WithLabelValues(table)
	}
	for _, st := range model.FinalStatuses {
		m.runs.WithLabelValues(source, stream, string(st))
	}
	for _, op := range []string{"inserted", "updated", "unchanged", "rejected"} {
		m.rows.WithLabelValues(source, stream, op)
	}
	m.pages.WithLabelValues(source, stream)
	m.rateWait.WithLabelValues(source)
	m.inFlight.WithLabelValues(source)
	m.budgetWait.WithLabelValues(source)
	for _, l := range logins {
		m.held.WithLabelValues(source, stream, l)
	}
}

// DeclareFollow creates the series of a stream that is followed, with its
// follow schedule's interval.
func (m *Metrics) DeclareFollow(source, stream string, logins []string, interval time.Duration) {
	m.followEvery.WithLabelValues(source, stream).Set(interval.Seconds())
	for _, l := range logins {
		m.followSwept.WithLabelValues(source, stream, l)
		m.missed.WithLabelValues(source, stream, l)
	}
}

// DeclareWindow creates the series of a stream that has a window, with
// its window schedule's interval.
func (m *Metrics) DeclareWindow(source, stream string, logins []string, interval time.Duration) {
	m.windowEvery.WithLabelValues(source, stream).Set(interval.Seconds())
}

// Budget reports what a source's schedules are expected to ask of its
// ERP an hour, by kind of run, its budget (0: none) and how far its
// window runs and sweeps are stretched to fit it (1: not at all).
func (m *Metrics) Budget(source string, expected map[model.RunKind]float64, budget int, stretch float64) {
	for kind, n := range expected {
		m.expected.WithLabelValues(source, string(kind)).Set(n)
	}
	m.budget.WithLabelValues(source).Set(float64(budget))
	m.stretch.WithLabelValues(source).Set(stretch)
}

// Reasons a scheduled run is skipped: another process holds the
// stream's lock; no run slot of the process came free before the next
// tick; no slot of the source's request budget did.
const (
	SkipLocked   = "locked"
	SkipCapacity = "capacity"
	SkipBudget   = "budget"
)

// BudgetWait counts a run's wait for its source's request budget.
func (m *Metrics) BudgetWait(source string, d time.Duration) { m.ERP(source).BudgetWait(d) }

// Skipped counts a scheduled run not made.
func (m *Metrics) Skipped(source, stream, reason string) {
	m.skipped.WithLabelValues(source, stream, reason).Inc()
}

// LockHeldByOther records how long another process has held a stream's
// lock (0 once this process ran it).
func (m *Metrics) LockHeldByOther(source, stream string, d time.Duration) {
	m.lockHeld.WithLabelValues(source, stream).Set(d.Seconds())
}

// LockHeldByForeign counts a run skipped because a session that is not
// erpsync's held the stream's lock.
func (m *Metrics) LockHeldByForeign(source, stream string) {
	m.foreignLock.WithLabelValues(source, stream).Inc()
}

// Pruned counts bookkeeping rows removed by retention.
func (m *Metrics) Pruned(table string, n int64) {
	m.pruned.WithLabelValues(table).Add(float64(n))
}

// SetReady mirrors /readyz.
func (m *Metrics) SetReady(ok bool) {
	if ok {
		m.ready.Set(1)
	} else {
		m.ready.Set(0)
	}
}

// PageCommitted implements sync.Observer.
func (m *Metrics) PageCommitted(source, stream string, p model.RunStats) {
	m.pages.WithLabelValues(source, stream).Add(float64(p.Pages))
	m.rows.WithLabelValues(source, stream, "inserted").Add(float64(p.Inserted))
	m.rows.WithLabelValues(source, stream, "updated").Add(float64(p.Updated))
	m.rows.WithLabelValues(source, stream, "unchanged").Add(float64(p.Unchanged))
	m.rows.WithLabelValues(source, stream, "rejected").Add(float64(p.Rejected))
}

// RunFinished implements sync.Observer.
func (m *Metrics) RunFinished(source, stream string, o model.RunOutcome) {
	m.runs.WithLabelValues(source, stream, string(o.Status)).Inc()
	m.duration.WithLabelValues(source, stream).Observe(o.Elapsed.Seconds())
	if !o.FreshAt.IsZero() {
		m.lastSuccess.WithLabelValues(source, stream, o.Login).Set(float64(o.FreshAt.UnixNano()) / 1e9)
		m.held.WithLabelValues(source, stream, o.Login).Set(float64(o.HeldDeletions))
	}
	if !o.FollowedAt.IsZero() {
		m.lastFollow.WithLabelValues(source, stream, o.Login).Set(float64(o.FollowedAt.UnixNano()) / 1e9)
	}
	if !o.WindowedAt.IsZero() {
		m.lastWindow.WithLabelValues(source, stream, o.Login).Set(float64(o.WindowedAt.UnixNano()) / 1e9)
	}
	if o.Swept {
		m.followSwept.WithLabelValues(source, stream, o.Login).Inc()
	}
	switch o.Status {
	case model.StatusSucceeded:
		m.lastFailed.WithLabelValues(source, stream, o.Login).Set(0)
	case model.StatusFailed:
		m.lastFailed.WithLabelValues(source, stream, o.Login).Set(1)
	}
}

// DriftCounted implements sync.Observer.
func (m *Metrics) DriftCounted(source, stream, field, change string, n int64) {
	m.drift.WithLabelValues(source, stream, m.driftFields.label(source, stream, field), change).Add(float64(n))
}

// maxDriftFields bounds the fields a stream's drift is counted under: the
// fields come from the ERP's records, and an installation that adds a
// field per record must not make a series per record.
const maxDriftFields = 100

// driftFields remembers, per stream, the fields drift was counted under.
type driftFields struct {
	mu   gosync.Mutex
	seen map[[2]string]map[string]bool
}

// label is field, or "(other)" once the stream has maxDriftFields others.
func (d *driftFields) label(source, stream, field string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil {
		d.seen = map[[2]string]map[string]bool{}
	}
	k := [2]string{source, stream}
	fields := d.seen[k]
	if fields == nil {
		fields = map[string]bool{}
		d.seen[k] = fields
	}
	if !fields[field] && len(fields) >= maxDriftFields {
		return "(other)"
	}
	fields[field] = true
	return field
}

// FollowMissed implements sync.Observer.
func (m *Metrics) FollowMissed(source, stream, login string, n int64) {
	m.missed.WithLabelValues(source, stream, login).Add(float64(n))
}

// ERP returns the observer of one source's ERP client (an erp.Observer).
func (m *Metrics) ERP(source string) ERPObserver { return ERPObserver{m: m, source: source} }

// ERPObserver counts one source's ERP requests, retries and waits.
type ERPObserver struct {
	m      *Metrics
	source string
}

func (o ERPObserver) Request(route, stream, kind string, code int, _ time.Duration) {
	o.m.requests.WithLabelValues(o.source, stream, kind, route, strconv.Itoa(code)).Inc()
}

func (o ERPObserver) Retry(route, reason string) {
	o.m.retries.WithLabelValues(o.source, route, reason).Inc()
}

func (o ERPObserver) RateLimitWait(d time.Duration) {
	o.m.rateWait.WithLabelValues(o.source).Add(d.Seconds())
}

// InFlight follows the requests in flight to the source (erp.BudgetObserver).
func (o ERPObserver) InFlight(delta int) {
	o.m.inFlight.WithLabelValues(o.source).Add(float64(delta))
}

// BudgetWait counts a wait for the source's request budget, by a request
// or by a run the scheduler held back (erp.BudgetObserver).
func (o ERPObserver) BudgetWait(d time.Duration) {
	o.m.budgetWait.WithLabelValues(o.source).Add(d.Seconds())
}
