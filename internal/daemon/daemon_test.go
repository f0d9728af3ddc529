package daemon

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"go.uber.org/goleak"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	promodel "github.com/prometheus/common/model"

	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/metrics"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/sync/streams"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

// TestMain checks, after the tests, that no goroutine was left behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// panicStream is a copy of the cashboxes stream whose AfterWrite panics
// on its first call.
func panicStream(calls *atomic.Int64) sync.Stream {
	s := streams.Cashboxes()
	s.Stream = "test_panics"
	s.AfterWrite = func(context.Context, pgx.Tx, model.Scope, []string) error {
		if calls.Add(1) == 1 {
			panic("test_panics: deliberate panic in AfterWrite")
		}
		return nil
	}
	return s
}

// ---- harness -------------------------------------------------------------------

// logBuffer collects the daemon's log; it is read while the daemon writes.
type logBuffer struct {
	mu gosync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

const (
	goodUser     = "erpsync"
	goodPassword = "erpsync-demo-password"
	invoicesPath = "/sales/api/invoices/list/"
)

// source describes one source of a test daemon.
type source struct {
	name     string
	baseURL  string
	password string // default goodPassword
	streams  []string
	schedule string // default @every 1s
	pageSize int    // default 50
	// maxRequests is the source's max_concurrent_requests (default 2).
	maxRequests int
}

type harness struct {
	t      *testing.T
	dbURL  string // the test database (direct, not through any proxy)
	pool   *pgxpool.Pool
	d      *Daemon
	m      *metrics.Metrics
	logs   *logBuffer
	base   string // http://127.0.0.1:port of the endpoints
	ln     net.Listener
	http   *http.Client
	cancel context.CancelFunc
	exited chan struct{} // closed when Run has returned
	runErr error         // Run's result, once exited is closed
	// prefetch is the Daemon's Prefetch (`erpsync run`'s default is 1).
	prefetch int
	// extra streams are added to the product's catalog.
	extra []sync.Stream
	// maxRuns is the Daemon's MaxConcurrentRuns (default 8, as `erpsync run`'s).
	maxRuns int
}

// newHarness makes a fresh database and a pool on it for the test's own
// queries. The daemon is built by start.
func newHarness(t *testing.T) *harness {
	t.Helper()
	dbURL := testdb.New(t)
	pool := testdb.ObserverPool(t, dbURL)
	h := &harness{t: t, dbURL: dbURL, pool: pool, logs: &logBuffer{}, prefetch: 1, maxRuns: 8,
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", h.logs.String())
		}
	})
	return h
}

// newSim serves a simulator on httptest for the rest of the test.
func newSim(t *testing.T, opts erpsim.Options) (*erpsim.Sim, string) {
	t.Helper()
	sim := erpsim.New(opts)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return sim, srv.URL
}

// start builds the Daemon (dbURL "" means the harness's database) and
// runs it until the test ends or stop is called.
func (h *harness) start(dbURL string, grace time.Duration, srcs ...source) {
	t := h.t
	t.Helper()
	if dbURL == "" {
		dbURL = h.dbURL
	}
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.m = metrics.New()
	cfg := config.Config{
		DatabaseURL:       config.Secret(dbURL),
		LogFormat:         "text",
		LogLevel:          "debug",
		HTTPAddr:          "127.0.0.1:0",
		Shutdown:          config.ShutdownWithGrace(grace),
		Database:          config.Database{LockTimeout: 15 * time.Second, StatementTimeout: 5 * time.Minute, IdleInTxTimeout: time.Minute},
		Retention:         90 * 24 * time.Hour,
		MaxConcurrentRuns: h.maxRuns,
		AutoMigrate:       true,
	}
	targets := map[string]sync.Target{}
	for _, s := range srcs {
		pw := s.password
		if pw == "" {
			pw = goodPassword
		}
		ps := s.pageSize
		if ps == 0 {
			ps = 50
		}
		sched := s.schedule
		if sched == "" {
			sched = "@every 1s"
		}
		src := config.Source{Name: s.name, BaseURL: s.baseURL, PageSize: ps, Timeout: 30 * time.Second,
			Logins:                []config.Login{{Auth: "token", Username: goodUser, Password: config.Secret(pw)}},
			MaxConcurrentRequests: cmp.Or(s.maxRequests, config.DefaultMaxConcurrentRequests)}
		for _, st := range s.streams {
			src.Streams = append(src.Streams, config.StreamConfig{Name: st, Schedule: sched})
		}
		cfg.Sources = append(cfg.Sources, src)
		c, err := erp.New(erp.Options{BaseURL: s.baseURL, Username: goodUser, Password: pw, Timeout: 30 * time.Second,
			Observer: h.m.ERP(s.name), Logger: log.With("source", s.name)})
		if err != nil {
			t.Fatal(err)
		}
		targets[s.name] = sync.Target{Source: s.name, Logins: []sync.Login{{Name: "erpsync", Client: c}}, PageSize: ps, Prefixes: map[string]string{"messaging": "/messaging"}}
	}
	cat := streams.MustDefault()
	for _, st := range h.extra {
		if err := cat.Add(st); err != nil {
			t.Fatal(err)
		}
	}
	h.d = &Daemon{Cfg: cfg, Catalog: cat, Log: log, Metrics: h.m, Targets: targets, Prefetch: h.prefetch}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.ln = ln
	h.base = "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.exited = make(chan struct{})
	go func() {
		defer close(h.exited)
		h.runErr = h.d.Run(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.exited:
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return within 30 s of the cancellation")
		}
	})
}

// stop cancels Run's context and waits for it to return; it returns how
// long that took.
func (h *harness) stop(timeout time.Duration) time.Duration {
	h.t.Helper()
	start := time.Now()
	h.cancel()
	select {
	case <-h.exited:
	case <-time.After(timeout):
		h.t.Fatalf("Run did not return within %s of the cancellation", timeout)
	}
	return time.Since(start)
}

func (h *harness) running() bool {
	select {
	case <-h.exited:
		return false
	default:
		return true
	}
}

func (h *harness) get(path string) (int, string, error) {
	resp, err := h.http.Get(h.base + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitFor polls cond until it holds; the timeout is the assertion. Run
// returning meanwhile fails the test.
func (h *harness) waitFor(timeout time.Duration, what string, cond func() (bool, error)) {
	h.t.Helper()
	testutil.Eventually(h.t, timeout, 20*time.Millisecond, what, func() (bool, error) {
		if h.d != nil && !h.running() {
			return false, fmt.Errorf("Run returned (%v)", h.runErr)
		}
		return cond()
	})
}

func (h *harness) waitReady(timeout time.Duration) {
	h.t.Helper()
	h.waitFor(timeout, "/readyz to answer 200", func() (bool, error) {
		code, _, _ := h.get("/readyz")
		return code == http.StatusOK, nil
	})
}

type runInfo struct {
	id             int64
	source, stream string
	status         model.RunStatus
	errText        string
	started        time.Time
	finished       *time.Time
	pid            int32
	pages          int64
}

func (r runInfo) String() string {
	fin := "-"
	if r.finished != nil {
		fin = r.finished.Format("15:04:05.000000")
	}
	return fmt.Sprintf("#%d %s/%s %s [%s, %s) pid %d pages %d err %q", r.id, r.source, r.stream, r.status,
		r.started.Format("15:04:05.000000"), fin, r.pid, r.pages, r.errText)
}

func (h *harness) runs(source, stream string) []runInfo {
	h.t.Helper()
	rs, err := h.queryRuns(source, stream)
	if err != nil {
		h.t.Fatal(err)
	}
	return rs
}

func (h *harness) queryRuns(source, stream string) ([]runInfo, error) {
	rows, err := h.pool.Query(context.Background(), `
SELECT id, source, stream, status, coalesce(error, ''), started_at, finished_at, coalesce(pid, 0), pages
FROM erp.sync_runs WHERE source = $1 AND stream = $2 ORDER BY id`, source, stream)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (runInfo, error) {
		var x runInfo
		err := r.Scan(&x.id, &x.source, &x.stream, &x.status, &x.errText, &x.started, &x.finished, &x.pid, &x.pages)
		return x, err
	})
}

// checkNoOverlap: the runs of one (source, stream) never overlap; ticks
// that come during a run are skipped.
func (h *harness) checkNoOverlap(source string, streams ...string) {
	h.t.Helper()
	for _, s := range streams {
		rs := h.runs(source, s)
		slices.SortFunc(rs, func(a, b runInfo) int { return a.started.Compare(b.started) })
		for i := 1; i < len(rs); i++ {
			if prev := rs[i-1]; prev.finished == nil || prev.finished.After(rs[i].started) {
				h.t.Errorf("%s/%s: runs overlap: %v and %v", source, s, prev, rs[i])
			}
		}
	}
}

func countStatus(rs []runInfo, status model.RunStatus) int {
	n := 0
	for _, r := range rs {
		if r.status == status {
			n++
		}
	}
	return n
}

func (h *harness) count(sql string, args ...any) int64 {
	h.t.Helper()
	var n int64
	if err := h.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

type cpInfo struct {
	sweepID     *int64
	pages, rows int64
}

func (h *harness) checkpoint(source, stream string) (cpInfo, bool, error) {
	var cp cpInfo
	err := h.pool.QueryRow(context.Background(), `SELECT sweep_id, pages, rows FROM erp.sync_checkpoints
WHERE source = $1 AND stream = $2`, source, stream).Scan(&cp.sweepID, &cp.pages, &cp.rows)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, false, nil
	}
	return cp, err == nil, err
}

// ---- metrics -------------------------------------------------------------------

// scrape reads /metrics and parses it.
func (h *harness) scrape() (map[string]*dto.MetricFamily, string) {
	h.t.Helper()
	code, body, err := h.get("/metrics")
	if err != nil || code != http.StatusOK {
		h.t.Fatalf("GET /metrics: %d %v", code, err)
	}
	p := expfmt.NewTextParser(promodel.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		h.t.Fatalf("/metrics is not valid Prometheus text: %v\n%s", err, body)
	}
	return fams, body
}

// metricValue sums the series of a family whose labels include want; ok
// is false when no series matches.
func metricValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, found := fams[name]
	if !found {
		return 0, false
	}
	var sum float64
	ok := false
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		ok = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, ok
}

func (h *harness) metric(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	h.t.Helper()
	v, ok := metricValue(fams, name, want)
	if !ok {
		h.t.Errorf("/metrics has no series %s%v", name, want)
	}
	return v
}

// ---- tests ---------------------------------------------------------------------

// TestPanicInStreamIsRecordedAndRetried: a stream that panics once is a
// failed run mentioning the panic; the daemon lives on, runs the stream
// again on a later tick, and the other streams are not disturbed.
func TestPanicInStreamIsRecordedAndRetried(t *testing.T) {
	if testing.Short() {
		t.Skip("daemon test: skipped with -short")
	}
	var panicCalls atomic.Int64
	h := newHarness(t)
	h.extra = append(h.extra, panicStream(&panicCalls))
	if _, err := h.pool.Exec(context.Background(), `CREATE TABLE erp.test_panics (LIKE erp.cashboxes INCLUDING ALL)`); err != nil {
		t.Fatal(err)
	}
	_, simURL := newSim(t, erpsim.Options{Invoices: 120, PageSizeCap: 50})
	others := []string{"invoices", "currencies", "cashboxes"}
	h.start("", 10*time.Second, source{name: "default", baseURL: simURL, streams: append(slices.Clone(others), "test_panics")})

	var failedID int64
	h.waitFor(40*time.Second, "test_panics to fail once, then succeed, while the other streams succeed twice", func() (bool, error) {
		rs, err := h.queryRuns("default", "test_panics")
		if err != nil {
			return false, err
		}
		failedID = 0
		okAfter := false
		for _, r := range rs {
			if r.status == model.StatusFailed && failedID == 0 {
				failedID = r.id
			}
			if r.status == model.StatusSucceeded && failedID != 0 && r.id > failedID {
				okAfter = true
			}
		}
		if !okAfter {
			return false, nil
		}
		for _, s := range others {
			rs, err := h.queryRuns("default", s)
			if err != nil || countStatus(rs, model.StatusSucceeded) < 2 {
				return false, err
			}
		}
		return true, nil
	})

	rs := h.runs("default", "test_panics")
	first := rs[0]
	if first.id != failedID || first.status != model.StatusFailed || first.finished == nil ||
		!strings.Contains(first.errText, "panic") || !strings.Contains(first.errText, "deliberate panic") {
		t.Errorf("first test_panics run: %v; want failed, finished, with an error mentioning the panic", first)
	}
	if n := countStatus(rs, model.StatusFailed); n != 1 {
		t.Errorf("test_panics has %d failed runs, want 1 (only the first call panics): %v", n, rs)
	}
	if n := panicCalls.Load(); n < 2 {
		t.Errorf("AfterWrite called %d times, want >= 2", n)
	}
	if got := h.count(`SELECT count(*) FROM erp.test_panics WHERE source = 'default'`); got == 0 {
		t.Errorf("erp.test_panics is empty after a succeeded run")
	}
	for _, s := range others {
		for _, r := range h.runs("default", s) {
			if r.status != model.StatusSucceeded && r.status != model.StatusRunning {
				t.Errorf("stream %s: run %v; the panic of another stream must not disturb it", s, r)
			}
		}
	}
	if !h.running() {
		t.Fatalf("the daemon stopped after a stream panicked")
	}
	h.checkNoOverlap("default", append(slices.Clone(others), "test_panics")...)
	if code, body, err := h.get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after the panic: %d %q %v", code, body, err)
	}
	if code, body, err := h.get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after the panic: %d %q %v", code, body, err)
	}
	fams, _ := h.scrape()
	if v := h.metric(fams, "erpsync_runs_total", map[string]string{"stream": "test_panics", "status": "failed"}); v != 1 {
		t.Errorf("erpsync_runs_total{stream=test_panics,status=failed} = %v, want 1", v)
	}
	if v := h.metric(fams, "erpsync_runs_total", map[string]string{"stream": "test_panics", "status": "succeeded"}); v < 1 {
		t.Errorf("erpsync_runs_total{stream=test_panics,status=succeeded} = %v, want >= 1", v)
	}
	if !strings.Contains(h.logs.String(), "panic in stream") {
		t.Errorf("the daemon's log does not mention the panic")
	}
	h.stop(30 * time.Second)
	if h.runErr != nil {
		t.Errorf("Run returned %v, want nil", h.runErr)
	}
}

// TestFailingSourceIsIsolated: a source whose credentials are refused
// fails and backs off without hammering its ERP, while another source of
// the same daemon keeps syncing.
func TestFailingSourceIsIsolated(t *testing.T) {
	if testing.Short() {
		t.Skip("daemon test: skipped with -short")
	}
	h := newHarness(t)
	_, goodURL := newSim(t, erpsim.Options{Invoices: 120, PageSizeCap: 50})
	badSim, badURL := newSim(t, erpsim.Options{Invoices: 120, PageSizeCap: 50})
	core := streams.MustDefault().Core()
	started := time.Now()
	h.start("", 10*time.Second,
		source{name: "good", baseURL: goodURL, streams: core},
		source{name: "bad", baseURL: badURL, password: "not-the-password", streams: core})

	// ~5 s of 1-second ticks: long enough for a source that does not back
	// off to log in again and again.
	h.waitFor(45*time.Second, "5 s to pass and every stream of the good source to succeed 3 times", func() (bool, error) {
		if time.Since(started) < 5*time.Second {
			return false, nil
		}
		for _, s := range core {
			rs, err := h.queryRuns("good", s)
			if err != nil || countStatus(rs, model.StatusSucceeded) < 3 {
				return false, err
			}
		}
		return true, nil
	})

	for _, s := range core {
		for _, r := range h.runs("good", s) {
			if r.status != model.StatusSucceeded && r.status != model.StatusRunning {
				t.Errorf("good source: run %v; the other source's failures must not affect it", r)
			}
		}
		bad := h.runs("bad", s)
		if len(bad) == 0 {
			t.Errorf("bad source, stream %s: no run recorded; a refused login must be a failed run", s)
		}
		if len(bad) > 2 {
			t.Errorf("bad source, stream %s: %d runs in ~5 s of 1 s ticks; refused credentials must back off: %v", s, len(bad), bad)
		}
		for _, r := range bad {
			if r.status != model.StatusFailed || !strings.Contains(r.errText, "credentials were refused") {
				t.Errorf("bad source: run %v; want failed with \"credentials were refused\"", r)
			}
			if strings.Contains(r.errText, "not-the-password") {
				t.Errorf("bad source: the run's error shows the password: %q", r.errText)
			}
		}
	}
	logins, other := 0, 0
	for _, r := range badSim.Requests() {
		if r.Method == http.MethodPost && r.Path == "/api/auth/token/" {
			logins++
		} else {
			other++
		}
	}
	if logins < 1 || logins > 3 {
		t.Errorf("the bad source's ERP saw %d login attempts in ~5 s; want 1 to 3 (refusals remembered, runs backing off)", logins)
	}
	if other != 0 {
		t.Errorf("the bad source's ERP saw %d requests other than logins; without a token there is nothing to ask", other)
	}

	fams, body := h.scrape()
	for _, s := range core {
		if v := h.metric(fams, "erpsync_last_run_failed", map[string]string{"source": "bad", "stream": s}); v != 1 {
			t.Errorf("erpsync_last_run_failed{source=bad,stream=%s} = %v, want 1", s, v)
		}
		if v, ok := metricValue(fams, "erpsync_last_run_failed", map[string]string{"source": "good", "stream": s}); ok && v != 0 {
			t.Errorf("erpsync_last_run_failed{source=good,stream=%s} = %v, want 0", s, v)
		}
		if v := h.metric(fams, "erpsync_runs_total", map[string]string{"source": "bad", "stream": s, "status": "failed"}); v < 1 {
			t.Errorf("erpsync_runs_total{source=bad,stream=%s,status=failed} = %v, want >= 1", s, v)
		}
		if v := h.metric(fams, "erpsync_last_success_timestamp_seconds", map[string]string{"source": "good", "stream": s}); v <= 0 {
			t.Errorf("erpsync_last_success_timestamp_seconds{source=good,stream=%s} = %v, want > 0", s, v)
		}
	}
	if strings.Contains(body, "not-the-password") || strings.Contains(body, goodPassword) {
		t.Errorf("/metrics shows a password")
	}
	if code, _, err := h.get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d (%v); a source with bad credentials does not make the daemon unready", code, err)
	}
	if !strings.Contains(h.logs.String(), "backing off") {
		t.Errorf("the daemon's log does not say it backs off")
	}
	h.stop(30 * time.Second)
	if h.runErr != nil {
		t.Errorf("Run returned %v, want nil", h.runErr)
	}
}

// tcpProxy forwards connections to a target; cut drops every connection
// and refuses new ones until restore; setDelay holds every chunk sent
// back to the client for a while.
type tcpProxy struct {
	ln     net.Listener
	target string
	sent   atomic.Int64 // chunks forwarded from clients to the target

	mu       gosync.Mutex
	refusing bool
	closed   bool
	delay    time.Duration
	conns    map[net.Conn]struct{}
	wg       gosync.WaitGroup
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

// track registers c unless the proxy refuses connections now.
func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refusing || p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *tcpProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *tcpProxy) setDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *tcpProxy) currentDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// pipe copies src to dst until either fails.
func (p *tcpProxy) pipe(dst, src net.Conn, toClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if toClient {
				if d := p.currentDelay(); d > 0 {
					time.Sleep(d)
				}
			} else {
				p.sent.Add(1)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *tcpProxy) handle(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(up) {
		up.Close()
		return
	}
	defer p.untrack(up)
	done := make(chan struct{}, 2)
	go func() { p.pipe(up, c, false); done <- struct{}{} }()
	go func() { p.pipe(c, up, true); done <- struct{}{} }()
	<-done
	// One direction ended: closing both ends the other.
	up.Close()
	c.Close()
	<-done
}

// cut closes every connection and refuses new ones.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = true
	for c := range p.conns {
		c.Close()
	}
}

func (p *tcpProxy) restore() {
	p.mu.Lock()
	p.refusing = false
	p.mu.Unlock()
}

func (p *tcpProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// TestReadyzFollowsDatabase: with a proxy between the daemon and Postgres,
// /readyz is 200, turns 503 soon after the database goes away and 200
// again when it is back; /healthz answers 200 all along.
func TestReadyzFollowsDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("daemon test: skipped with -short")
	}
	h := newHarness(t)
	u, err := url.Parse(h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.addr()
	_, simURL := newSim(t, erpsim.Options{Invoices: 60, PageSizeCap: 50})
	// The database is away when the daemon starts: it serves /healthz,
	// says "starting" on /readyz and keeps trying.
	proxy.cut()
	h.start(u.String(), 10*time.Second, source{name: "default", baseURL: simURL, streams: []string{"currencies"}})
	// /healthz is polled all along, from the start (the listener exists
	// before Run is called, so connections queue until it serves).
	var healthOK, healthBad atomic.Int64
	var healthErr atomic.Value
	pollStop := make(chan struct{})
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for {
			select {
			case <-pollStop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			resp, err := c.Get(h.base + "/healthz")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if err != nil || resp.StatusCode != http.StatusOK {
				healthBad.Add(1)
				healthErr.Store(fmt.Sprintf("%v %v", err, resp))
				continue
			}
			healthOK.Add(1)
		}
	}()
	stopPoll := gosync.OnceFunc(func() { close(pollStop); <-pollDone })
	t.Cleanup(stopPoll)

	h.waitFor(10*time.Second, "/healthz to answer 200 while the database is away", func() (bool, error) {
		code, _, _ := h.get("/healthz")
		return code == http.StatusOK, nil
	})
	h.waitFor(10*time.Second, "the daemon to log that the database is unreachable", func() (bool, error) {
		return strings.Contains(h.logs.String(), "database unreachable; retrying"), nil
	})
	if code, b, _ := h.get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(b, "starting") {
		t.Errorf("/readyz = %d %q before the database was reached; want 503 saying it is starting", code, b)
	}
	if fams, _ := h.scrape(); h.metric(fams, "erpsync_ready", nil) != 0 {
		t.Errorf("erpsync_ready = %v before the database was reached, want 0", h.metric(fams, "erpsync_ready", nil))
	}
	proxy.restore()

	h.waitReady(30 * time.Second)
	fams, _ := h.scrape()
	if v := h.metric(fams, "erpsync_ready", nil); v != 1 {
		t.Errorf("erpsync_ready = %v while /readyz is 200, want 1", v)
	}

	proxy.cut()
	cutAt := time.Now()
	var body string
	h.waitFor(8*time.Second, "/readyz to answer 503 after the database connection was cut", func() (bool, error) {
		code, b, _ := h.get("/readyz")
		body = b
		return code == http.StatusServiceUnavailable, nil
	})
	t.Logf("/readyz turned 503 %s after the cut: %q", time.Since(cutAt).Round(time.Millisecond), strings.TrimSpace(body))
	if !strings.Contains(body, "database") {
		t.Errorf("/readyz body %q does not say the database is the problem", body)
	}
	if strings.Contains(body, proxy.addr()) || strings.Contains(body, "postgres://") {
		t.Errorf("/readyz body %q shows the database address", body)
	}
	fams, _ = h.scrape()
	if v := h.metric(fams, "erpsync_ready", nil); v != 0 {
		t.Errorf("erpsync_ready = %v while /readyz is 503, want 0", v)
	}
	// It stays 503 while the database is away (watched for 2 s, while
	// /healthz is polled).
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if code, b, _ := h.get("/readyz"); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz = %d %q while the database is still away, want 503", code, b)
		}
	}
	if !h.running() {
		t.Fatalf("Run returned (%v) while the database was away", h.runErr)
	}

	proxy.restore()
	restoredAt := time.Now()
	h.waitFor(15*time.Second, "/readyz to answer 200 after the database came back", func() (bool, error) {
		code, _, _ := h.get("/readyz")
		return code == http.StatusOK, nil
	})
	t.Logf("/readyz back to 200 %s after the database came back", time.Since(restoredAt).Round(time.Millisecond))
	fams, _ = h.scrape()
	if v := h.metric(fams, "erpsync_ready", nil); v != 1 {
		t.Errorf("erpsync_ready = %v after /readyz is 200 again, want 1", v)
	}

	stopPoll()
	if n := healthBad.Load(); n != 0 {
		t.Errorf("/healthz failed %d times (last: %v); liveness must not depend on the database", n, healthErr.Load())
	}
	if n := healthOK.Load(); n < 5 {
		t.Errorf("/healthz answered only %d times", n)
	}
	h.stop(30 * time.Second)
	if h.runErr != nil {
		t.Errorf("Run returned %v, want nil", h.runErr)
	}
}

// TestMetricsAfterSync checks /metrics after known syncs: 230 invoices in
// 5 pages of 50 and the currency list, with the ERP rate-limiting.
// TestFreshnessHasOneDefinition: `erpsync status`, the analysts' view
// erp.stream_freshness and the metric tell the same time for a list
// stream and for a snapshot stream: when their data were last complete.
func TestFreshnessHasOneDefinition(t *testing.T) {
	if testing.Short() {
		t.Skip("daemon test: skipped with -short")
	}
	h := newHarness(t)
	_, simURL := newSim(t, erpsim.Options{Invoices: 120, PageSizeCap: 50})
	streamNames := []string{"invoices", "balance_sheet"}
	h.start("", 10*time.Second, source{name: "default", baseURL: simURL, streams: streamNames, schedule: "@every 1h"})
	h.waitFor(30*time.Second, "a succeeded run of each stream", func() (bool, error) {
		for _, s := range streamNames {
			if rs, err := h.queryRuns("default", s); err != nil || countStatus(rs, model.StatusSucceeded) < 1 {
				return false, err
			}
		}
		return true, nil
	})
	fams, _ := h.scrape()
	h.stop(30 * time.Second)

	status, err := db.LoadStatus(context.Background(), h.pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range streamNames {
		var view float64
		if err := h.pool.QueryRow(context.Background(), `SELECT extract(epoch FROM last_sweep_completed_at)::float8
			FROM erp.stream_freshness WHERE source = 'default' AND stream = $1`, s).Scan(&view); err != nil {
			t.Fatalf("%s: erp.stream_freshness: %v", s, err)
		}
		metric := h.metric(fams, "erpsync_last_success_timestamp_seconds", map[string]string{"source": "default", "stream": s})
		var fromStatus float64
		for _, st := range status {
			if st.Source == "default" && st.Stream == s && st.LastSuccess != nil {
				fromStatus = float64(st.LastSuccess.UnixNano()) / 1e9
			}
		}
		if math.Abs(view-metric) > 1e-3 || math.Abs(view-fromStatus) > 1e-3 {
			t.Errorf("%s: freshness differs: view %.6f, metric %.6f, status %.6f", s, view, metric, fromStatus)
		}
	}
}

func TestMetricsAfterSync(t *testing.T) {
	if testing.Short() {
		t.Skip("daemon test: skipped with -short")
	}
	h := newHarness(t)
	sim, simURL := newSim(t, erpsim.Options{Invoices: 230, PageSizeCap: 50,
		Faults: erpsim.Faults{RateLimitEvery: 4, RetryAfter: time.Second}})
	h.start("", 10*time.Second, source{name: "default", baseURL: simURL, streams: []string{"invoices", "currencies"}})

	h.waitFor(45*time.Second, "a succeeded run of each stream and a rate-limited retry", func() (bool, error) {
		code, body, err := h.get("/metrics")
		if err != nil || code != http.StatusOK {
			return false, nil
		}
		p := expfmt.NewTextParser(promodel.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			return false, err
		}
		inv, _ := metricValue(fams, "erpsync_runs_total", map[string]string{"stream": "invoices", "status": "succeeded"})
		cur, _ := metricValue(fams, "erpsync_runs_total", map[string]string{"stream": "currencies", "status": "succeeded"})
		rl, _ := metricValue(fams, "erpsync_erp_retries_total", map[string]string{"reason": "rate_limited"})
		return inv >= 1 && cur >= 1 && rl > 0, nil
	})

	fams, text := h.scrape()
	src := map[string]string{"source": "default"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range src {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, s := range []string{"invoices", "currencies"} {
		if v := h.metric(fams, "erpsync_runs_total", with("stream", s, "status", "succeeded")); v < 1 {
			t.Errorf("erpsync_runs_total{stream=%s,status=succeeded} = %v, want >= 1", s, v)
		}
		if v := h.metric(fams, "erpsync_runs_total", with("stream", s, "status", "failed")); v != 0 {
			t.Errorf("erpsync_runs_total{stream=%s,status=failed} = %v, want 0 (rate limits are waited out)", s, v)
		}
		if v := h.metric(fams, "erpsync_last_success_timestamp_seconds", with("stream", s)); v < float64(time.Now().Add(-time.Minute).Unix()) || v > float64(time.Now().Add(time.Minute).Unix()) {
			t.Errorf("erpsync_last_success_timestamp_seconds{stream=%s} = %v, want about now", s, v)
		}
		if v := h.metric(fams, "erpsync_run_duration_seconds", with("stream", s)); v < 1 {
			t.Errorf("erpsync_run_duration_seconds{stream=%s} has %v observations, want >= 1", s, v)
		}
		if v := h.metric(fams, "erpsync_last_run_failed", with("stream", s)); v != 0 {
			t.Errorf("erpsync_last_run_failed{stream=%s} = %v, want 0", s, v)
		}
	}
	if v := h.metric(fams, "erpsync_rows_total", with("stream", "invoices", "op", "inserted")); v != 230 {
		t.Errorf("erpsync_rows_total{stream=invoices,op=inserted} = %v, want 230", v)
	}
	if v := h.metric(fams, "erpsync_rows_total", with("stream", "invoices", "op", "rejected")); v != 0 {
		t.Errorf("erpsync_rows_total{stream=invoices,op=rejected} = %v, want 0", v)
	}
	// scope=all lists the active currencies.
	active := 0
	for _, c := range sim.Currencies() {
		if c.Active {
			active++
		}
	}
	curRows := h.count(`SELECT count(*) FROM erp.currencies WHERE source = 'default'`)
	if v := h.metric(fams, "erpsync_rows_total", with("stream", "currencies", "op", "inserted")); v != float64(curRows) || curRows != int64(active) || active != 5 {
		t.Errorf("erpsync_rows_total{stream=currencies,op=inserted} = %v; erp.currencies has %d rows; the ERP has %d active currencies (5 expected)", v, curRows, active)
	}
	if v := h.metric(fams, "erpsync_pages_total", with("stream", "invoices")); v < 5 {
		t.Errorf("erpsync_pages_total{stream=invoices} = %v, want >= 5", v)
	}
	if v := h.metric(fams, "erpsync_erp_requests_total", with("route", invoicesPath, "code", "200")); v < 5 {
		t.Errorf("erpsync_erp_requests_total{route=%s,code=200} = %v, want >= 5", invoicesPath, v)
	}
	if v := h.metric(fams, "erpsync_erp_requests_total", with("code", "429")); v < 1 {
		t.Errorf("erpsync_erp_requests_total{code=429} = %v, want >= 1", v)
	}
	if v := h.metric(fams, "erpsync_erp_retries_total", with("reason", "rate_limited")); v <= 0 {
		t.Errorf("erpsync_erp_retries_total{reason=rate_limited} = %v, want > 0", v)
	}
	if v := h.metric(fams, "erpsync_rate_limit_wait_seconds_total", src); v <= 0 {
		t.Errorf("erpsync_rate_limit_wait_seconds_total = %v, want > 0", v)
	}
	if v := h.metric(fams, "erpsync_ready", nil); v != 1 {
		t.Errorf("erpsync_ready = %v, want 1", v)
	}
	if v := h.metric(fams, "erpsync_build_info", nil); v != 1 {
		t.Errorf("erpsync_build_info = %v, want 1", v)
	}
	// Names: erpsync_ for erpsync's own; go_ and process_ are the standard
	// collectors, promhttp_ the handler's own error counter (registered by
	// promhttp.HandlerFor because HandlerOpts.Registry is set).
	for name := range fams {
		if !strings.HasPrefix(name, "erpsync_") && !strings.HasPrefix(name, "go_") &&
			!strings.HasPrefix(name, "process_") && !strings.HasPrefix(name, "promhttp_") {
			t.Errorf("metric %s does not start with erpsync_", name)
		}
	}
	// No secret in the exposition.
	if strings.Contains(text, goodPassword) {
		t.Errorf("/metrics shows the ERP password")
	}
	for _, r := range sim.Requests() {
		if tok, ok := strings.CutPrefix(r.Authorization, "Bearer "); ok && tok != "" && strings.Contains(text, tok) {
			t.Errorf("/metrics shows a bearer token")
			break
		}
	}
	// Invoice sweeps often outlast the 1 s schedule here (429 waits).
	h.checkNoOverlap("default", "invoices", "currencies")
	t.Run("promtool", func(t *testing.T) {
		cmd := exec.Command(testutil.RequireTool(t, "promtool", "prometheus"), "check", "metrics")
		cmd.Stdin = strings.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	})
	h.stop(30 * time.Second)
	if h.runErr != nil {
		t.Errorf("Run returned %v, want nil", h.runErr)
	}
}

// readyzSample is one answer of /readyz during a shutdown.
type readyzSample struct {
	at   time.Time // when the request was sent
	code int       // 0: no answer
}

// pollReadyz asks /readyz every few milliseconds until the returned stop
// is called; stop returns the answers.
func (h *harness) pollReadyz() (stop func() []readyzSample) {
	var mu gosync.Mutex
	var out []readyzSample
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for {
			select {
			case <-quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
			at := time.Now()
			code := 0
			if resp, err := c.Get(h.base + "/readyz"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			mu.Lock()
			out = append(out, readyzSample{at: at, code: code})
			mu.Unlock()
		}
	}()
	stopFn := gosync.OnceValue(func() []readyzSample {
		close(quit)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return out
	})
	h.t.Cleanup(func() { stopFn() })
	return stopFn
}

// hangingRoute makes sim hold every request for path without answering,
// until the client gives up or the test ends (before the simulator's
// server closes: its Close waits for handlers).
func hangingRoute(t *testing.T, sim *erpsim.Sim, path string) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != path {
			return false
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
		return true
	})
}

// checkpointRow is a stream's checkpoint as a page commit leaves it.
type checkpointRow struct {
	sweepID     *int64
	pages, rows int64
	cursor      string
}

func (c checkpointRow) String() string {
	sweep := "-"
	if c.sweepID != nil {
		sweep = fmt.Sprint(*c.sweepID)
	}
	return fmt.Sprintf("sweep %s, %d pages, %d rows, cursor %q", sweep, c.pages, c.rows, c.cursor)
}

const checkpointQuery = `SELECT sweep_id, pages, rows, coalesce(cursor, '') FROM erp.sync_checkpoints
WHERE source = 'default' AND stream = 'invoices'`

// TestShutdownLetsPageCommit cancels the daemon while an invoice page is
// being committed: that page commits, no page after it does, the run
// ends cancelled, the token is revoked, Run returns nil without the grace
// period running out, and /readyz says 503 as soon as shutdown begins.
//
// To have a page surely in flight when the cancellation comes, the test
// holds the invoices checkpoint row (FOR UPDATE): the next page's commit
// waits on it. The test lets it go once the stop has reached the runs,
// which another stream shows: its run, waiting on an ERP that does not
// answer, ends cancelled at once when the runs are told to stop.
//
// The sweep is the second one, as in a running daemon (the first, into an
// empty table, is a bulk load whose group commits take several pages at
// a time).
func TestShutdownLetsPageCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("daemon test: skipped with -short")
	}
	const (
		pageSize = 50
		invoices = 2000 // 40 pages of ~150 ms each
		grace    = 4 * time.Second
	)
	ctx := context.Background()
	h := newHarness(t)
	sim, simURL := newSim(t, erpsim.Options{Invoices: invoices, PageSizeCap: pageSize})
	all := sim.Invoices()
	sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice { return inv[:pageSize] })
	hangingRoute(t, sim, "/accounts/api/cashboxes/")
	// Two requests at once: the hanging cashboxes run must not hold up the
	// invoice runs.
	h.start("", grace, source{name: "default", baseURL: simURL, pageSize: pageSize, maxRequests: 2,
		streams: []string{"invoices", "cashboxes"}})
	h.waitReady(30 * time.Second)
	h.waitFor(30*time.Second, "the first (one-page) invoice sweep to complete", func() (bool, error) {
		rs, err := h.queryRuns("default", "invoices")
		return err == nil && countStatus(rs, model.StatusSucceeded) >= 1, err
	})
	sim.MutateInvoices(func([]erpsim.Invoice) []erpsim.Invoice { return all })
	sim.SetLatency(150 * time.Millisecond)
	stopPoll := h.pollReadyz()
	h.waitFor(40*time.Second, "the second invoice sweep to commit 3 pages", func() (bool, error) {
		cp, ok, err := h.checkpoint("default", "invoices")
		return ok && cp.sweepID != nil && cp.pages >= 3, err
	})

	// Hold the checkpoint row; what it says now is what was committed
	// when the cancellation comes.
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var at checkpointRow
	if err := tx.QueryRow(ctx, checkpointQuery+` FOR UPDATE`).Scan(&at.sweepID, &at.pages, &at.rows, &at.cursor); err != nil {
		t.Fatal(err)
	}
	holder := tx.Conn().PgConn().PID()
	h.waitFor(30*time.Second, "the next page's commit to wait on the checkpoint row", func() (bool, error) {
		var n int
		err := h.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, holder).Scan(&n)
		return n > 0, err
	})
	if at.sweepID == nil || at.pages < 3 || at.pages >= invoices/pageSize {
		t.Fatalf("checkpoint at the cancellation: %v; want the second sweep under way", at)
	}
	cancelAt := time.Now()
	h.cancel()
	h.waitFor(30*time.Second, "the stop to reach the runs (the hanging cashboxes run cancelled)", func() (bool, error) {
		rs, err := h.queryRuns("default", "cashboxes")
		return err == nil && countStatus(rs, model.StatusCancelled) == 1, err
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	h.stop(grace + 15*time.Second)
	took := time.Since(cancelAt)
	samples := stopPoll()
	t.Logf("Run returned %s after the cancellation; checkpoint then: %v", took.Round(time.Millisecond), at)
	if h.runErr != nil {
		t.Errorf("Run returned %v, want nil", h.runErr)
	}
	// The page commits within the grace period, so Run returns well
	// within it; 2 s of slack for a loaded CI machine under -race.
	if took > grace+2*time.Second {
		t.Errorf("Run took %s to return; the grace period is %s", took, grace)
	}
	if strings.Contains(h.logs.String(), "grace period over") {
		t.Errorf("the grace period ran out: the page in flight was aborted, not committed")
	}

	// The page in flight committed, and no page after it.
	var after checkpointRow
	if err := h.pool.QueryRow(ctx, checkpointQuery).Scan(&after.sweepID, &after.pages, &after.rows, &after.cursor); err != nil {
		t.Fatal(err)
	}
	if after.sweepID == nil || *after.sweepID != *at.sweepID || after.pages != at.pages+1 || after.rows != at.rows+pageSize ||
		after.cursor == at.cursor || after.cursor == "" {
		t.Errorf("checkpoint after the shutdown: %v; at the cancellation: %v; want the same sweep one page (%d rows) on, with the next page's cursor",
			after, at, pageSize)
	}
	// The one-page sweep may have run more than once before the ERP grew.
	rs := h.runs("default", "invoices")
	if len(rs) < 2 || countStatus(rs[:len(rs)-1], model.StatusSucceeded) != len(rs)-1 {
		t.Fatalf("invoices runs %v; want the one-page sweeps, succeeded, then the interrupted one", rs)
	}
	run := rs[len(rs)-1]
	if run.status != model.StatusCancelled || run.finished == nil || run.pages != after.pages {
		t.Errorf("invoices run %v; want cancelled and finished, with the checkpoint's %d pages", run, after.pages)
	}
	// The first page of the second sweep holds the first sweep's rows.
	if n := h.count(`SELECT count(*) FROM erp.invoices WHERE source = 'default'`); n != after.rows || n != after.pages*pageSize {
		t.Errorf("erp.invoices has %d rows; want the %d of the checkpoint's %d whole pages", n, after.rows, after.pages)
	}
	if got := sim.Revocations(); got != 1 {
		t.Errorf("the ERP saw %d token revocations, want 1", got)
	}
	if got := sim.ActiveTokens(); got != 0 {
		t.Errorf("%d tokens still active after the shutdown", got)
	}
	for _, s := range []string{"invoices", "cashboxes"} {
		for _, r := range h.runs("default", s) {
			if r.status == model.StatusRunning || r.status == model.StatusFailed {
				t.Errorf("run %v after a graceful shutdown", r)
			}
		}
	}

	// /readyz: 200 before, 503 once shutdown began, never 200 again.
	var before200, after503 int
	first503 := -1
	for i, s := range samples {
		if s.at.Before(cancelAt) && s.code == http.StatusOK {
			before200++
		}
		if !s.at.Before(cancelAt) && s.code == http.StatusServiceUnavailable {
			after503++
			if first503 < 0 {
				first503 = i
			}
		}
	}
	if before200 == 0 {
		t.Errorf("/readyz never answered 200 before the shutdown")
	}
	if after503 == 0 {
		t.Errorf("/readyz never answered 503 between the cancellation and Run's return (%d samples)", len(samples))
	}
	if first503 >= 0 {
		for _, s := range samples[first503:] {
			if s.code == http.StatusOK {
				t.Errorf("/readyz answered 200 at %s, after it had said 503 for the shutdown", s.at.Format("15:04:05.000"))
				break
			}
		}
	}
	// Read from the registry: the server is gone.
	mfs, err := h.m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, f := range mfs {
		fams[f.GetName()] = f
	}
	// (erpsync_ready is not checked here: a /readyz check in flight when
	// shutdown begins can set it back to 1, see
	// TestReadyMetricDuringShutdown.)
	if v, _ := metricValue(fams, "erpsync_runs_total", map[string]string{"stream": "invoices", "status": "cancelled"}); v != 1 {
		t.Errorf("erpsync_runs_total{stream=invoices,status=cancelled} = %v, want 1", v)
	}
	logs := h.logs.String()
	for _, want := range []string{"shutting down", "erpsync stopped"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log has no %q line", want)
		}
	}
}

// TestShutdownDuringTickStartedSweep: like TestShutdownLetsPageCommit, but
// the sweep in flight was started by a cron tick instead of the start-up
// run. The grace period must bound the shutdown all the same.
func TestShutdownDuringTickStartedSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("daemon test: skipped with -short")
	}
	const (
		pageSize = 50
		grace    = 2 * time.Second
	)
	h := newHarness(t)
	sim, simURL := newSim(t, erpsim.Options{Invoices: pageSize, PageSizeCap: pageSize})
	h.start("", grace, source{name: "default", baseURL: simURL, pageSize: pageSize, streams: []string{"invoices"}})
	// The start-up run syncs the one page at once.
	h.waitFor(30*time.Second, "the start-up invoices run to succeed", func() (bool, error) {
		rs, err := h.queryRuns("default", "invoices")
		return err == nil && countStatus(rs, model.StatusSucceeded) >= 1, err
	})
	// Now the ERP has 40 slow pages: the next sweep is started by a tick.
	big := erpsim.New(erpsim.Options{Invoices: 40 * pageSize, Seed: 7}).Invoices()
	sim.MutateInvoices(func([]erpsim.Invoice) []erpsim.Invoice { return big })
	sim.SetLatency(150 * time.Millisecond)
	h.waitFor(30*time.Second, "a tick-started sweep to commit 3 pages", func() (bool, error) {
		cp, ok, err := h.checkpoint("default", "invoices")
		return ok && cp.sweepID != nil && cp.pages >= 3, err
	})
	took := h.stop(60 * time.Second)
	t.Logf("Run returned %s after the cancellation", took.Round(time.Millisecond))
	if h.runErr != nil {
		t.Errorf("Run returned %v, want nil", h.runErr)
	}
	if took > grace+time.Second {
		t.Errorf("Run took %s to return; the grace period is %s", took, grace)
	}
	rs := h.runs("default", "invoices")
	if last := rs[len(rs)-1]; last.status != model.StatusCancelled {
		t.Errorf("the tick-started run ended %v; want cancelled", last)
	}
	if got := sim.Revocations(); got != 1 {
		t.Errorf("the ERP saw %d token revocations, want 1", got)
	}
}

// TestShutdownGraceExpires: with no prefetch, the page in flight is a
// fetch the ERP does not answer; the grace period bounds the wait, then
// the run is aborted, recorded as cancelled, and nothing half-written
// stays behind.
func TestShutdownGraceExpires(t *testing.T) {
	if testing.Short() {
		t.Skip("daemon test: skipped with -short")
	}
	const (
		pageSize = 50
		grace    = 700 * time.Millisecond
	)
	h := newHarness(t)
	h.prefetch = 0
	sim, simURL := newSim(t, erpsim.Options{Invoices: 10 * pageSize, PageSizeCap: pageSize})
	// Every invoice page after the first hangs for 30 s (or until the
	// client gives up).
	sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == invoicesPath && r.URL.Query().Get("cursor") != "" {
			select {
			case <-time.After(30 * time.Second):
			case <-r.Context().Done():
				return true
			}
		}
		return false
	})
	h.start("", grace, source{name: "default", baseURL: simURL, pageSize: pageSize, streams: []string{"invoices"}})
	h.waitFor(30*time.Second, "the first invoice page to commit and the second to be asked for", func() (bool, error) {
		cp, ok, err := h.checkpoint("default", "invoices")
		if err != nil || !ok || cp.sweepID == nil || cp.pages < 1 {
			return false, err
		}
		return slices.ContainsFunc(sim.Requests(), func(r erpsim.Request) bool {
			return r.Path == invoicesPath && strings.Contains(r.RawQuery, "cursor=")
		}), nil
	})
	took := h.stop(grace + 15*time.Second)
	t.Logf("Run returned %s after the cancellation (grace %s)", took.Round(time.Millisecond), grace)
	if h.runErr != nil {
		t.Errorf("Run returned %v, want nil", h.runErr)
	}
	if took < grace || took > grace+3*time.Second {
		t.Errorf("Run took %s to return; want the grace period (%s), then an abort", took, grace)
	}
	rs := h.runs("default", "invoices")
	if len(rs) != 1 || rs[0].status != model.StatusCancelled || rs[0].finished == nil {
		t.Errorf("invoices runs %v; want one, cancelled and finished", rs)
	}
	cp, _, err := h.checkpoint("default", "invoices")
	if err != nil {
		t.Fatal(err)
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices WHERE source = 'default'`); n != pageSize || cp.rows != pageSize || cp.pages != 1 {
		t.Errorf("erp.invoices has %d rows, checkpoint %d pages / %d rows; want the one committed page", n, cp.pages, cp.rows)
	}
	if got := sim.Revocations(); got != 1 {
		t.Errorf("the ERP saw %d revocations, want 1", got)
	}
	if !strings.Contains(h.logs.String(), "grace period over") {
		t.Errorf("the log does not say the grace period ran out")
	}
}

// TestReadyMetricDuringShutdown: a /readyz check that is in flight when
// shutdown begins must not leave erpsync_ready at 1 while the daemon shuts
// down.
func TestReadyMetricDuringShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("daemon test: skipped with -short")
	}
	h := newHarness(t)
	u, err := url.Parse(h.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.addr()
	sim, simURL := newSim(t, erpsim.Options{Invoices: 10, PageSizeCap: 50})
	h.start(u.String(), 10*time.Second, source{name: "default", baseURL: simURL, streams: []string{"currencies"}, schedule: "@every 1h"})
	h.waitReady(30 * time.Second)
	h.waitFor(30*time.Second, "the start-up currencies run to succeed", func() (bool, error) {
		rs, err := h.queryRuns("default", "currencies")
		return err == nil && countStatus(rs, model.StatusSucceeded) == 1, err
	})

	// A slow database makes the next readiness check last ~1 s; a slow ERP
	// keeps Run busy revoking its token for 3 s after the cancellation.
	sim.SetLatency(3 * time.Second)
	proxy.setDelay(300 * time.Millisecond)
	sent := proxy.sent.Load()
	answered := make(chan int, 1)
	go func() {
		code, _, _ := h.get("/readyz")
		answered <- code
	}()
	h.waitFor(10*time.Second, "the readiness check to reach the database", func() (bool, error) {
		return proxy.sent.Load() > sent, nil
	})
	h.cancel() // shutdown begins while the check is in flight
	var code int
	select {
	case code = <-answered:
	case <-time.After(20 * time.Second):
		t.Fatal("/readyz did not answer")
	}
	t.Logf("the readiness check in flight at the cancellation answered %d", code)
	if !h.running() {
		t.Fatal("Run returned before the check could be observed; the ERP latency should keep it revoking")
	}
	fams, _ := h.scrape()
	if v := h.metric(fams, "erpsync_ready", nil); v != 0 {
		t.Errorf("erpsync_ready = %v while the daemon shuts down, want 0", v)
	}
	if c, _, _ := h.get("/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d while the daemon shuts down, want 503", c)
	}
	select {
	case <-h.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
}

// TestHTTPServerFailureStopsEverything: when the endpoints' server fails,
// Run returns an error; it must not leave the scheduler running behind it
// nor the ERP token unrevoked.
func TestHTTPServerFailureStopsEverything(t *testing.T) {
	if testing.Short() {
		t.Skip("daemon test: skipped with -short")
	}
	h := newHarness(t)
	sim, simURL := newSim(t, erpsim.Options{Invoices: 10, PageSizeCap: 50})
	h.start("", 5*time.Second, source{name: "default", baseURL: simURL, streams: []string{"currencies"}})
	h.waitReady(30 * time.Second)
	h.waitFor(30*time.Second, "a succeeded currencies run", func() (bool, error) {
		rs, err := h.queryRuns("default", "currencies")
		return err == nil && countStatus(rs, model.StatusSucceeded) >= 1, err
	})
	h.ln.Close() // the server's Serve fails
	select {
	case <-h.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after its HTTP server failed")
	}
	if h.runErr == nil {
		t.Errorf("Run returned nil after its HTTP server failed, want an error")
	}
	runsTotal := func() float64 {
		mfs, err := h.m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		fams := map[string]*dto.MetricFamily{}
		for _, f := range mfs {
			fams[f.GetName()] = f
		}
		v, _ := metricValue(fams, "erpsync_runs_total", nil)
		return v
	}
	before := runsTotal()
	// Observation window: two ticks of the 1 s schedule.
	time.Sleep(2500 * time.Millisecond)
	if after := runsTotal(); after != before {
		t.Errorf("%v runs finished after Run had returned: the scheduler is still running", after-before)
	}
	if got := sim.Revocations(); got != 1 {
		t.Errorf("the ERP saw %d revocations after Run returned, want 1", got)
	}
}
