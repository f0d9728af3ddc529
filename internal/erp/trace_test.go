package erp

import (
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/tracing"
	"github.com/erpsync/erpsync/internal/tracing/otlptest"
)

// TestTrace documents the span of each request. Not parallel: it sets the
// process environment.
func TestTrace(t *testing.T) {
	// Requests sent with traces on, to a real OTLP/HTTP receiver: a wait
	// for the request budget, a token renewed after a 401 and a request
	// refused with 404 are each recorded on the request's span, and no span
	// holds the password, a token, the query (a cursor) or an answer's body.
	t.Run("RecordsEachRequestOnItsSpanWithoutASecret", func(t *testing.T) {
		rcv := otlptest.New(t)
		rcv.Use(t)
		ctx := testCtx(t)
		p, err := tracing.Start(ctx, "test", slog.New(slog.DiscardHandler))
		if err != nil || p == nil {
			t.Fatalf("tracing.Start = %v, %v", p, err)
		}
		defer p.Shutdown(ctx)
		const body, cursor = "no-such-thing-BODY-7d1", "CURSOR-91ab"
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/slow/":
				time.Sleep(150 * time.Millisecond)
				writeResp(w, http.StatusOK, `[]`)
			case "/missing/":
				writeResp(w, http.StatusNotFound, `{"detail":"`+body+`"}`)
			default:
				writeResp(w, http.StatusOK, `[]`)
			}
		})
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.Budget = NewBudget(1, 0, nil) })
		if _, err := c.Get(ctx, "/accounts/api/currencies/", url.Values{"cursor": {cursor}}); f.note(err) != nil {
			t.Fatal(err)
		}
		var wg gosync.WaitGroup
		for range 2 {
			wg.Go(func() {
				_, err := c.Get(ctx, "/slow/", nil)
				f.note(err)
			})
		}
		wg.Wait()
		f.invalidateTokens()
		if _, err := c.Get(ctx, "/accounts/api/currencies/", nil); f.note(err) != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, "/missing/", nil); f.note(err) == nil {
			t.Fatal("GET /missing/: no error")
		}
		if err := p.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}

		var budgetWaits, renewals, refused int
		secrets := append([]string{testPassword, cursor, body}, f.issued...)
		for _, s := range rcv.Spans() {
			for _, e := range s.Events {
				switch {
				case e.Name == "erp.wait.budget" && s.Attrs["url.template"] == "/slow/":
					budgetWaits++
					if secs, _ := strconv.ParseFloat(e.Attrs["erp.wait.seconds"], 64); secs < 0.1 {
						t.Errorf("budget wait of %s s; want the other request's 150 ms", e.Attrs["erp.wait.seconds"])
					}
				case e.Name == "erp.retry" && e.Attrs["erp.retry.reason"] == "token_renewal":
					renewals++
					if s.Attrs["http.request.resend_count"] != "1" || s.Attrs["http.response.status_code"] != "200" {
						t.Errorf("renewed request %v", s.Attrs)
					}
				}
			}
			if s.Attrs["url.template"] == "/missing/" {
				refused++
				if !s.Failed || s.Message != "404" || s.Attrs["error.type"] != "404" || s.Attrs["http.response.status_code"] != "404" {
					t.Errorf("refused request: failed %v, message %q, %v", s.Failed, s.Message, s.Attrs)
				}
			}
			text := s.Name + s.Message + strings.Join(values(s.Attrs), " ") + strings.Join(values(s.Resource), " ")
			for _, e := range s.Events {
				text += e.Name + strings.Join(values(e.Attrs), " ")
			}
			for _, secret := range secrets {
				if strings.Contains(text, secret) {
					t.Errorf("span %s holds %q", s.Name, secret)
				}
			}
		}
		if budgetWaits != 1 || renewals != 1 || refused != 1 {
			t.Errorf("%d budget waits, %d renewals, %d refused requests recorded; want one of each", budgetWaits, renewals, refused)
		}
	})
}

func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
