package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/common/expfmt"
	promodel "github.com/prometheus/common/model"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

// TestEndpoints documents the endpoints: /healthz, /readyz with what it waits for
// and the scheduler's warnings, /metrics, and the erpsync_ready gauge. The first
// rules hold for the service on its own, built from its deps as Run builds it; the
// later ones for a whole daemon.
func TestEndpoints(t *testing.T) {
	// Walked through a daemon's life (starting, serving, the database away and back,
	// warnings, draining), /healthz says 200 throughout; /readyz and the erpsync_ready
	// gauge follow the state, and the deps' Ready is not even asked while starting or
	// draining.
	t.Run("FollowTheDaemonsLifeOnReadyzAndAnswerHealthzThroughout", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := "http://" + ln.Addr().String()
		log, _ := testLog()
		gauge := &readyGauge{}
		state := &readiness{}
		var waiting atomic.Value // what the start waits for
		waiting.Store("")
		web := newEndpoints(endpointsDeps{Listener: ln, Log: log, Metrics: gauge, Ready: state.ready, Warnings: state.warn,
			Waiting: func() string { return waiting.Load().(string) }, ShutdownTimeout: 5 * time.Second})
		if err := web.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(web.Stop)
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

		steps := []struct {
			name      string
			do        func()
			code      int
			body      string // exactly
			ready     bool   // the gauge after the /readyz answer
			asksReady bool   // whether /readyz consults the deps' Ready
		}{
			{"before Serving", nil,
				http.StatusServiceUnavailable, "not ready: starting\n", false, false},
			{"before Serving, the database not reached", func() { waiting.Store(`database "warehouse" does not exist`) },
				http.StatusServiceUnavailable, "not ready: starting: database \"warehouse\" does not exist; retrying\n", false, false},
			{"serving, database fine", func() { waiting.Store(""); web.Serving() },
				http.StatusOK, "ready\n", true, true},
			{"database away", func() { state.set(errors.New("database unreachable")) },
				http.StatusServiceUnavailable, "not ready: database unreachable\n", false, true},
			{"database back, with warnings", func() {
				state.set(nil, "default/invoices: lock held by other-host (pid 4242) for 1h0m0s", "second warning")
			},
				http.StatusOK, "ready\nwarning: default/invoices: lock held by other-host (pid 4242) for 1h0m0s\nwarning: second warning\n", true, true},
			{"draining", web.Drain,
				http.StatusServiceUnavailable, "not ready: shutting down\n", false, false},
			// Serving called late (a start that raced a stop) must not make a
			// draining process ready again.
			{"Serving after Drain", web.Serving,
				http.StatusServiceUnavailable, "not ready: shutting down\n", false, false},
		}
		for _, st := range steps {
			if st.do != nil {
				st.do()
			}
			before := state.calls()
			code, body, err := httpGet(c, base+"/readyz")
			if err != nil || code != st.code || body != st.body {
				t.Errorf("%s: /readyz = %d %q (%v), want %d %q", st.name, code, body, err, st.code, st.body)
			}
			if asked := state.calls() > before; asked != st.asksReady {
				t.Errorf("%s: /readyz consulted Ready: %v, want %v", st.name, asked, st.asksReady)
			}
			if set, ready := gauge.value(); (st.ready && !set) || ready != st.ready {
				t.Errorf("%s: erpsync_ready = %v (set %v), want %v", st.name, ready, set, st.ready)
			}
			if code, body, err := httpGet(c, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
				t.Errorf("%s: /healthz = %d %q (%v), want 200 \"ok\\n\": liveness does not depend on readiness", st.name, code, body, err)
			}
		}
		if code, body, err := httpGet(c, base+"/metrics"); code != http.StatusOK || body != "fake_metric 1\n" {
			t.Errorf("/metrics = %d %q (%v), want the Metrics handler's answer", code, body, err)
		}

		returnsWithin(t, 10*time.Second, "endpoints Stop", web.Stop)
		returnsWithin(t, time.Second, "a second endpoints Stop", web.Stop)
		// Stop closed the listener: nothing accepts on it any more.
		if conn, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
			if conn != nil {
				conn.Close()
			}
			t.Errorf("Accept on the listener after Stop: %v, want net.ErrClosed", err)
		}
		if code, _, err := httpGet(c, base+"/healthz"); err == nil {
			t.Errorf("/healthz answered %d after Stop", code)
		}
		// A shutdown asked for is not a failure of the server.
		select {
		case err := <-web.Failed():
			t.Errorf("Failed delivered %v after a normal Stop", err)
		default:
		}
	})

	// A server that stops on its own (its listener closed under it) reports it on
	// Failed, which is what makes Run stop the daemon; Stop after that still returns.
	t.Run("ReportAServerThatStopsOnItsOwnOnFailed", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		log, _ := testLog()
		state := &readiness{}
		web := newEndpoints(endpointsDeps{Listener: ln, Log: log, Metrics: &readyGauge{}, Ready: state.ready, Warnings: state.warn,
			ShutdownTimeout: time.Second})
		if err := web.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		ln.Close()
		select {
		case err := <-web.Failed():
			if err == nil || !strings.Contains(err.Error(), "http server") {
				t.Errorf("Failed delivered %v, want the server's error", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Failed delivered nothing after the listener was closed")
		}
		returnsWithin(t, 5*time.Second, "endpoints Stop after a failure", web.Stop)
		returnsWithin(t, time.Second, "a second endpoints Stop", web.Stop)
	})

	// Readiness as Run wires it (databaseReady): not before the pools exist, not on a
	// schema this binary cannot use, yes on a current one.
	t.Run("AreReadyOnlyOnPoolsAtACurrentSchema", func(t *testing.T) {
		ctx := context.Background()
		if err := databaseReady(ctx, nil); err == nil || !strings.Contains(err.Error(), "starting") {
			t.Errorf("without pools: %v, want a starting error", err)
		}
		for _, tt := range []struct {
			name    string
			url     string
			wantErr string // "" when ready; else what the *db.SchemaError says
		}{
			{"MigratedDatabase", testdb.New(t), ""},
			{"DatabaseWithoutTheSchema", testdb.Empty(t), "run `erpsync migrate`"},
			// A rolling upgrade migrated past this binary: it writes nothing
			// there, and says so.
			{"SchemaNewerThanTheBinary", newerSchema(t), "newer than this binary's"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				pools, err := db.OpenPools(ctx, tt.url, 1)
				if err != nil {
					t.Fatal(err)
				}
				defer pools.Close()
				err = databaseReady(ctx, pools)
				var se *db.SchemaError
				if tt.wantErr == "" && err != nil || tt.wantErr != "" && (!errors.As(err, &se) || !strings.Contains(err.Error(), tt.wantErr)) {
					t.Errorf("databaseReady = %v; want a *db.SchemaError saying %q (none when empty)", err, tt.wantErr)
				}
				pools.Close()
				if err := databaseReady(ctx, pools); err == nil || !strings.Contains(err.Error(), "unreachable") {
					t.Errorf("on closed pools: %v, want database unreachable", err)
				}
			})
		}
	})

	// With a proxy between the daemon and Postgres, /readyz is 200, turns 503 soon
	// after the database goes away and 200 again when it is back; /healthz answers 200
	// all along.
	t.Run("TurnReadyzTo503WhileTheDatabaseIsAwayAndBackTo200After", func(t *testing.T) {
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
	})

	// /metrics after known syncs: 230 invoices in 5 pages of 50 and the currency list,
	// with the ERP rate-limiting.
	t.Run("ServeMetricsThatTellWhatTheSyncsDid", func(t *testing.T) {
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
		// Each request is counted with the stream and kind of run it served.
		if v := h.metric(fams, "erpsync_erp_requests_total", with("route", invoicesPath, "stream", "invoices")); v < 5 {
			t.Errorf("erpsync_erp_requests_total{route=%s,stream=invoices} = %v, want >= 5", invoicesPath, v)
		}
		if v, ok := metricValue(fams, "erpsync_erp_requests_total", with("kind", "other")); ok && v > 0 {
			t.Errorf("erpsync_erp_requests_total{kind=other} = %v: requests no run said it served", v)
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
		t.Run("PromtoolAcceptsTheExposition", func(t *testing.T) {
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
	})

	// A /readyz check that is in flight when shutdown begins must not leave
	// erpsync_ready at 1 while the daemon shuts down.
	t.Run("KeepErpsyncReadyAt0OnceShutdownBegins", func(t *testing.T) {
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
	})
}

// readyGauge is the endpoints' Metrics: a /metrics handler and the
// erpsync_ready gauge, recorded.
type readyGauge struct {
	mu   gosync.Mutex
	set  bool // SetReady was called at least once
	last bool
}

func (g *readyGauge) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "fake_metric 1") })
}

func (g *readyGauge) SetReady(ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.set, g.last = true, ok
}

func (g *readyGauge) value() (set, ready bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.set, g.last
}

// readiness is what the endpoints' Ready and Warnings report, as the test
// sets it.
type readiness struct {
	mu       gosync.Mutex
	err      error
	warnings []string
	checks   int // Ready calls
}

func (r *readiness) ready(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks++
	return r.err
}

func (r *readiness) warn() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.warnings)
}

func (r *readiness) set(err error, warnings ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err, r.warnings = err, warnings
}

func (r *readiness) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checks
}

func httpGet(c *http.Client, u string) (int, string, error) {
	resp, err := c.Get(u)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// newerSchema is a warehouse migrated one version past this binary.
func newerSchema(t *testing.T) string {
	t.Helper()
	url := testdb.New(t)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	_, target, err := db.SchemaVersions(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(context.Background(), `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, target+1); err != nil {
		t.Fatal(err)
	}
	return url
}
