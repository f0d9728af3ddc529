package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
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
	"go.uber.org/goleak"

	"github.com/erpsync/erpsync/internal/config"
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

// testLog is a logger writing into a buffer the test can read.
func testLog() (*slog.Logger, *testutil.Buffer) {
	b := &testutil.Buffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// returnsWithin calls f and fails the test if it has not returned after d
// (a Stop that hangs would otherwise hang the whole package).
func returnsWithin(t *testing.T, d time.Duration, what string, f func()) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
	}
	return time.Since(start)
}

func count(t *testing.T, q *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

const (
	goodUser     = "erpsync"
	goodPassword = "erpsync-demo-password"
	invoicesPath = "/sales/api/invoices/list/"
)

// branchUsers are two users of one installation, one per branch.
var branchUsers = []erpsim.User{
	{Username: "sync-riyadh", Password: "riyadh-pw", CompanyID: 1, BranchID: 1},
	{Username: "sync-jeddah", Password: "jeddah-pw", CompanyID: 1, BranchID: 2},
}

// newSim serves a simulator on httptest for the rest of the test.
func newSim(t *testing.T, opts erpsim.Options) (*erpsim.Sim, string) {
	t.Helper()
	sim := erpsim.New(opts)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return sim, srv.URL
}

// ---- the whole daemon ----------------------------------------------------------------

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
	logs   *testutil.Buffer
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
	// progressEvery is the Daemon's ProgressEvery (0: the product's).
	progressEvery time.Duration
}

// newHarness makes a fresh database and a pool on it for the test's own
// queries. The daemon is built by start.
func newHarness(t *testing.T) *harness {
	t.Helper()
	dbURL := testdb.New(t)
	pool := testdb.ObserverPool(t, dbURL)
	h := &harness{t: t, dbURL: dbURL, pool: pool, logs: &testutil.Buffer{}, prefetch: 1, maxRuns: 8,
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", h.logs.String())
		}
	})
	return h
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
	h.d = &Daemon{Cfg: cfg, Catalog: cat, Log: log, Metrics: h.m, Targets: targets, Prefetch: h.prefetch, ProgressEvery: h.progressEvery}
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

// ---- a proxy between the daemon and Postgres -------------------------------------------

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

// ---- a clock the test moves --------------------------------------------------------------

// fakeClock is a Clock the test moves by hand: Now stands still until
// Advance, and a channel from After(d) fires once Advance has moved the
// clock d past the moment After was called. Services driven by it never
// sleep for real, and a test can tell that a service is waiting (Waiting)
// before it moves time.
type fakeClock struct {
	mu      gosync.Mutex
	now     time.Time
	waiters []clockWaiter
	asked   []time.Duration // every d passed to After, in order
}

type clockWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the clock's time once it has
// moved d on; d <= 0 fires at once, as time.After does. The channel is
// buffered, so a waiter that gave up leaves no goroutine behind.
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, d)
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, clockWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock d on and fires every waiter whose time came.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// Waiting is the number of After channels that have not fired yet.
func (c *fakeClock) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// Asked returns every duration passed to After so far.
func (c *fakeClock) Asked() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.asked...)
}

// NextWait is how long until the earliest pending waiter fires (0 when
// none is pending).
func (c *fakeClock) NextWait() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Duration
	for i, w := range c.waiters {
		if d := w.at.Sub(c.now); i == 0 || d < next {
			next = d
		}
	}
	return next
}

// waitForWaiters polls until at least n After channels are pending: the
// service under test is then blocked on the clock, and moving it is what
// happens next.
func (c *fakeClock) waitForWaiters(t *testing.T, n int, what string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, what, func() (bool, error) {
		return c.Waiting() >= n, nil
	})
}

// TestFakeClock holds the fixture the services' tests lean on to its rule.
func TestFakeClock(t *testing.T) {
	// It fires exactly when moved far enough, never before, and at once for d <= 0.
	t.Run("FiresWhenMovedFarEnoughNeverBeforeAndAtOnceForNoWait", func(t *testing.T) {
		c := newFakeClock()
		start := c.Now()
		now := c.After(0)
		select {
		case got := <-now:
			if !got.Equal(start) {
				t.Errorf("After(0) fired with %s, want %s", got, start)
			}
		default:
			t.Fatal("After(0) did not fire at once")
		}
		a, b := c.After(time.Minute), c.After(time.Hour)
		fired := func(ch <-chan time.Time) bool {
			select {
			case <-ch:
				return true
			default:
				return false
			}
		}
		c.Advance(time.Minute - time.Nanosecond)
		if fired(a) || fired(b) || c.Waiting() != 2 {
			t.Fatalf("fired before its time (waiting %d)", c.Waiting())
		}
		if d := c.NextWait(); d != time.Nanosecond {
			t.Errorf("NextWait = %s, want 1ns", d)
		}
		c.Advance(time.Nanosecond)
		if !fired(a) || fired(b) || c.Waiting() != 1 {
			t.Fatalf("After(1m) did not fire at 1m, or After(1h) did (waiting %d)", c.Waiting())
		}
		c.Advance(2 * time.Hour)
		if !fired(b) || c.Waiting() != 0 {
			t.Fatalf("After(1h) did not fire after 2h")
		}
		if got := c.Now().Sub(start); got != 2*time.Hour+time.Minute {
			t.Errorf("the clock moved %s, want 2h1m", got)
		}
		if got := c.Asked(); len(got) != 3 || got[0] != 0 || got[1] != time.Minute || got[2] != time.Hour {
			t.Errorf("Asked = %v, want [0 1m 1h]", got)
		}
	})
}
