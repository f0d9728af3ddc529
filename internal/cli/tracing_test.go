package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/tracing/otlptest"
)

// TestTraces documents the traces a command sends when the OTEL_* variables name a
// collector. Not parallel: it sets the process environment, as the SDK reads it.
func TestTraces(t *testing.T) {
	// `erpsync sync` run as an operator would turn traces on, with
	// OTEL_EXPORTER_OTLP_ENDPOINT in the environment, against a real OTLP/HTTP
	// receiver, through two logins of a simulator that answers some requests 429 and
	// some 503. The receiver must get a run span per login, its pages and commits
	// under it, the ERP requests under those with their route and status, the waits
	// for Retry-After and the backoffs as events, and nothing secret; the JSON log's
	// summary line of each run carries that run's trace id.
	t.Run("CoverEveryRunOfASyncWithItsPagesAndRequests", func(t *testing.T) {
		users := []erpsim.User{
			{Username: "sync-riyadh", Password: "riyadh-Trace-pw-58", CompanyID: 1, BranchID: 1},
			{Username: "sync-jeddah", Password: "jeddah-Trace-pw-26", CompanyID: 1, BranchID: 2},
		}
		const invoices = 160
		sim, simURL := newSim(t, erpsim.Options{Users: users, ListScope: erpsim.ScopeBranch, RecordLabels: erpsim.LabelsIDs,
			Invoices: invoices, PageSizeCap: 40,
			Faults: erpsim.Faults{RateLimitEvery: 4, RetryAfter: time.Second, ServerErrorEvery: 3}})
		cfg := loginsConfig(t, testdb.New(t), simURL, 40, users)
		rcv := otlptest.New(t)
		rcv.Use(t)

		r := runMain(t, environ("ERPSYNC_CONFIG="+cfg, "ERPSYNC_LOG_FORMAT=json"), "sync", "invoices")
		if r.code != exitOK {
			t.Fatalf("sync: %s", r)
		}
		spans := rcv.Spans()
		byID := map[string]otlptest.Span{}
		for _, s := range spans {
			byID[s.SpanID] = s
		}
		parent := func(s otlptest.Span) otlptest.Span { return byID[s.ParentID] }

		t.Run("EverySpanHangsOnASpanOfItsTrace", func(t *testing.T) {
			for _, s := range spans {
				if s.ParentID == "" {
					continue
				}
				p, ok := byID[s.ParentID]
				if !ok || p.TraceID != s.TraceID {
					t.Errorf("span %s %v: its parent %s was not received in its trace", s.Name, s.Attrs, s.ParentID)
				}
			}
		})

		runs := map[string]otlptest.Span{} // by login
		for _, s := range spans {
			if s.Name == "run invoices" {
				runs[s.Attrs["erpsync.login"]] = s
			}
		}
		t.Run("ARunSpanPerLogin", func(t *testing.T) {
			for _, u := range users {
				run, ok := runs[u.Username]
				if !ok {
					t.Fatalf("no run span of login %s (runs: %v)", u.Username, runs)
				}
				if run.ParentID != "" || run.Attrs["erpsync.source"] != "main" || run.Attrs["erpsync.stream"] != "invoices" ||
					run.Attrs["erpsync.status"] != "succeeded" || run.Attrs["erpsync.run_id"] == "" || run.Attrs["erpsync.sweep_id"] == "" ||
					run.Attrs["erpsync.rows.inserted"] != fmt.Sprint(invoices/2) {
					t.Errorf("run span of %s: %+v", u.Username, run)
				}
			}
			if len(runs) != len(users) {
				t.Errorf("%d run spans; want one per login", len(runs))
			}
		})

		t.Run("PagesAndCommitsUnderTheirRun", func(t *testing.T) {
			pages, inserted := map[string]int{}, map[string]int{}
			for _, s := range spans {
				switch s.Name {
				case "page", "commit":
					p := parent(s)
					if p.Name != "run invoices" {
						t.Errorf("%s span %v hangs on %q, not a run", s.Name, s.Attrs, p.Name)
						continue
					}
					if s.Attrs["erpsync.sweep_id"] != p.Attrs["erpsync.sweep_id"] {
						t.Errorf("%s span of sweep %s under the run of sweep %s", s.Name, s.Attrs["erpsync.sweep_id"], p.Attrs["erpsync.sweep_id"])
					}
					login := p.Attrs["erpsync.login"]
					if s.Name == "page" {
						pages[login]++
					} else {
						var n int
						fmt.Sscan(s.Attrs["erpsync.rows.inserted"], &n)
						inserted[login] += n
					}
				}
			}
			for _, u := range users {
				// 80 invoices of the branch in pages of 40: two pages, and the
				// empty answer that ends the list, or the last page says so.
				if pages[u.Username] < 2 || inserted[u.Username] != invoices/2 {
					t.Errorf("login %s: %d page spans, commits inserting %d rows; want at least 2 pages and %d rows", u.Username, pages[u.Username], inserted[u.Username], invoices/2)
				}
			}
		})

		t.Run("RequestsWithRouteStatusAndWaits", func(t *testing.T) {
			var listGets, retryAfter, backoff, tokens int
			for _, s := range spans {
				if s.Kind != tracepb.Span_SPAN_KIND_CLIENT {
					continue
				}
				route := s.Attrs["url.template"]
				if s.Name != s.Attrs["http.request.method"]+" "+route || strings.ContainsAny(route, "?=") {
					t.Errorf("request span %q with route %q", s.Name, route)
				}
				if s.Attrs["http.response.status_code"] != "200" {
					t.Errorf("request span %s ended with status %q", s.Name, s.Attrs["http.response.status_code"])
				}
				switch route {
				case "/sales/api/invoices/list/":
					listGets++
					if parent(s).Name != "page" {
						t.Errorf("list request under %q, not a page", parent(s).Name)
					}
				case "/api/auth/token/":
					tokens++
				}
				for _, e := range s.Events {
					switch e.Name {
					case "erp.wait.retry_after":
						retryAfter++
						if e.Attrs["erp.wait.seconds"] != "1" || s.Attrs["http.request.resend_count"] == "" {
							t.Errorf("Retry-After wait %v on a request with %v", e.Attrs, s.Attrs)
						}
					case "erp.wait.backoff":
						backoff++
						if e.Attrs["erp.retry.reason"] != "server_error" || e.Attrs["erp.wait.seconds"] == "" {
							t.Errorf("backoff %v", e.Attrs)
						}
					}
				}
			}
			if listGets < 4 || retryAfter == 0 || backoff == 0 || tokens != len(users) {
				t.Errorf("%d list requests, %d Retry-After waits, %d backoffs, %d logins; want at least 4 requests, a wait of each kind and a login per user",
					listGets, retryAfter, backoff, tokens)
			}
		})

		t.Run("NoSecretInAnySpan", func(t *testing.T) {
			secrets := issuedTokens(sim)
			if len(secrets) != len(users) {
				t.Fatalf("the simulator saw %d tokens; want one per login", len(secrets))
			}
			for _, u := range users {
				secrets = append(secrets, u.Password)
			}
			for _, s := range spans {
				text := []string{s.Name, s.Message}
				for _, m := range []map[string]string{s.Attrs, s.Resource} {
					for k, v := range m {
						text = append(text, k, v)
					}
				}
				for _, e := range s.Events {
					text = append(text, e.Name)
					for k, v := range e.Attrs {
						text = append(text, k, v)
					}
				}
				for _, secret := range secrets {
					if strings.Contains(strings.Join(text, "\n"), secret) {
						t.Errorf("span %s holds a secret (%d chars)", s.Name, len(secret))
					}
				}
			}
		})

		t.Run("TheRunsLogLinesCarryTheirTraceID", func(t *testing.T) {
			found := 0
			for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
				var l map[string]any
				if err := json.Unmarshal([]byte(line), &l); err != nil || l["msg"] != "sync finished" {
					continue
				}
				login, _ := l["login"].(string)
				run := runs[login]
				if l["trace_id"] != run.TraceID || l["span_id"] != run.SpanID {
					t.Errorf("summary of login %s: trace_id %v span_id %v; want the run span's %s %s", login, l["trace_id"], l["span_id"], run.TraceID, run.SpanID)
				}
				found++
			}
			if found != len(users) {
				t.Errorf("%d summary lines; want one per login\n%s", found, r.stderr)
			}
		})
	})

	// An OTEL_* variable that cannot be used stops the command before it does
	// anything, as any configuration error does.
	t.Run("StopTheCommandWhenAnOTELSettingCannotBeUsed", func(t *testing.T) {
		otlptest.ClearEnv(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "otel-collector:4318")
		_, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword})
		r := runMain(t, erpEnv(simURL, "postgres://127.0.0.1:1/never", goodPassword), "sync")
		if r.code != exitUsage || !strings.Contains(r.stderr, "OTEL_EXPORTER_OTLP_ENDPOINT") {
			t.Errorf("want exit 2 naming OTEL_EXPORTER_OTLP_ENDPOINT; got %s", r)
		}
	})
}
