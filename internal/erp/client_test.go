package erp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/shopspring/decimal"
)

const (
	testUser     = "integration-user"
	testPassword = "pw-S3cr3t+/=&x" // must never appear in an error
)

// ---- a small fake ERP ---------------------------------------------------------

// fakeERP answers logins (POST /api/auth/token/), revokes and authorised
// GETs, which it hands to data. It remembers what it saw and, at cleanup,
// checks that no error noted with note() contains the password or any token
// it issued.
type fakeERP struct {
	t   *testing.T
	srv *httptest.Server

	mu          sync.Mutex
	expiresIn   any // written as expires_in; nil leaves it out
	loginHook   func(w http.ResponseWriter, r *http.Request, n int) bool
	data        http.HandlerFunc
	logins      int
	loginTimes  []time.Time
	loginBodies []map[string]any
	tokens      map[string]bool // valid tokens
	issued      []string
	revoked     []string
	gets        int
	unauth      int // GETs answered 401 by the fake itself
	errs        []error
}

func newFakeERP(t *testing.T, data http.HandlerFunc) *fakeERP {
	t.Helper()
	f := &fakeERP{t: t, expiresIn: 3600, tokens: map[string]bool{}, data: data}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	t.Cleanup(f.checkSecrets)
	return f
}

func (f *fakeERP) set(fn func(f *fakeERP)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// note records an error so that checkSecrets can inspect it; it returns err.
func (f *fakeERP) note(err error) error {
	if err != nil {
		f.mu.Lock()
		f.errs = append(f.errs, err)
		f.mu.Unlock()
	}
	return err
}

func (f *fakeERP) checkSecrets() {
	f.mu.Lock()
	defer f.mu.Unlock()
	secrets := append([]string{testPassword}, f.issued...)
	for _, err := range f.errs {
		for _, s := range secrets {
			if strings.Contains(err.Error(), s) || strings.Contains(fmt.Sprintf("%+v %#v", err, err), s) {
				f.t.Errorf("error %q contains a secret", err)
			}
		}
	}
}

func (f *fakeERP) invalidateTokens() {
	f.set(func(f *fakeERP) { clear(f.tokens) })
}

func (f *fakeERP) counts() (logins, gets, unauth int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logins, f.gets, f.unauth
}

func (f *fakeERP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/api/auth/token/":
		f.login(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/api/auth/revoke/":
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		f.mu.Lock()
		f.revoked = append(f.revoked, tok)
		delete(f.tokens, tok)
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case r.Method != http.MethodGet:
		f.t.Errorf("unexpected %s %s: the client may only GET (and POST token/revoke)", r.Method, r.URL.Path)
		http.Error(w, "no", http.StatusMethodNotAllowed)
	default:
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		f.mu.Lock()
		f.gets++
		valid := ok && f.tokens[tok]
		if !valid {
			f.unauth++
		}
		data := f.data
		f.mu.Unlock()
		if !valid {
			writeResp(w, http.StatusUnauthorized, `{"detail":"token missing, invalid or expired"}`)
			return
		}
		if data == nil {
			writeResp(w, http.StatusOK, `{"ok":true,"data":[]}`)
			return
		}
		data(w, r)
	}
}

func (f *fakeERP) login(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		f.t.Errorf("login Content-Type = %q, want application/json", ct)
	}
	if a := r.Header.Get("Authorization"); a != "" {
		f.t.Errorf("login sent Authorization %q", a)
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		f.t.Errorf("login body is not JSON: %v", err)
		writeResp(w, http.StatusBadRequest, `{"detail":"malformed JSON body"}`)
		return
	}
	f.mu.Lock()
	f.logins++
	n := f.logins
	f.loginTimes = append(f.loginTimes, time.Now())
	f.loginBodies = append(f.loginBodies, body)
	hook := f.loginHook
	f.mu.Unlock()
	if hook != nil && hook(w, r, n) {
		return
	}
	if body["username"] != testUser || body["password"] != testPassword {
		writeResp(w, http.StatusUnauthorized, `{"detail":"invalid credentials"}`)
		return
	}
	f.mu.Lock()
	tok := fmt.Sprintf("tok%d-%d-Zq9x", n, time.Now().UnixNano())
	f.tokens[tok] = true
	f.issued = append(f.issued, tok)
	resp := map[string]any{"access_token": tok, "token_type": "Bearer", "company_id": 3, "branch_id": 4}
	if f.expiresIn != nil {
		resp["expires_in"] = f.expiresIn
	}
	f.mu.Unlock()
	b, _ := json.Marshal(resp)
	writeResp(w, http.StatusOK, string(b))
}

func writeResp(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

type recObserver struct {
	mu       sync.Mutex
	requests []string
	asked    []string // "route stream/kind"
	retries  []string
	waits    []time.Duration
}

func (o *recObserver) Request(route, stream, kind string, code int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.requests = append(o.requests, fmt.Sprintf("%s %d", route, code))
	o.asked = append(o.asked, fmt.Sprintf("%s %s/%s", route, stream, kind))
}

func (o *recObserver) Retry(route, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retries = append(o.retries, route+" "+reason)
}

func (o *recObserver) RateLimitWait(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waits = append(o.waits, d)
}

func (o *recObserver) snapshot() (req, ret []string, waits []time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.requests...), append([]string(nil), o.retries...), append([]time.Duration(nil), o.waits...)
}

func newTestClient(t *testing.T, baseURL string, mod func(*Options)) *Client {
	t.Helper()
	opt := Options{
		BaseURL:     baseURL,
		Username:    testUser,
		Password:    testPassword,
		Timeout:     5 * time.Second,
		MaxAttempts: 4,
		BackoffBase: time.Millisecond,
		BackoffMax:  5 * time.Millisecond,
	}
	if mod != nil {
		mod(&opt)
	}
	c, err := New(opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ---- lists and the simulator ---------------------------------------------------

// listAll reads a whole list through a Lister, copying the records out of
// the pages it releases.
func listAll(ctx context.Context, c *Client, req ListRequest) ([]json.RawMessage, error) {
	l := c.List(req)
	var all []json.RawMessage
	for {
		p, err := l.Next(ctx)
		if err == io.EOF {
			return all, nil
		}
		if err != nil {
			return all, err
		}
		for _, r := range p.Records {
			all = append(all, slices.Clone(r))
		}
		p.Release()
	}
}

func newSimClient(t *testing.T, so erpsim.Options, mod func(*Options)) (*erpsim.Sim, *Client) {
	t.Helper()
	if so.Username == "" {
		so.Username, so.Password = testUser, testPassword
	}
	sim := erpsim.New(so)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return sim, newTestClient(t, srv.URL, mod)
}

func walkInvoices(t *testing.T, ctx context.Context, c *Client, pageSize int) ([]json.RawMessage, []string) {
	t.Helper()
	l := c.List(ListRequest{Path: "/sales/api/invoices/list/", Paging: CursorPaged, PageSize: pageSize})
	var all []json.RawMessage
	var cursors []string
	for range 1000 {
		p, err := l.Next(ctx)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		for _, r := range p.Records {
			all = append(all, slices.Clone(r))
		}
		p.Release()
		if l.Done() {
			return all, cursors
		}
		cursors = append(cursors, l.Cursor())
	}
	t.Fatal("no end of the invoice list")
	return nil, nil
}

func sumMoney(t *testing.T, recs []json.RawMessage, field string) decimal.Decimal {
	t.Helper()
	sum := decimal.Zero
	for _, raw := range recs {
		r, err := ParseRecord(raw)
		if err != nil {
			t.Fatal(err)
		}
		d, ok, err := r.Money(field)
		if err != nil || !ok {
			t.Fatalf("Money(%s) of %s: %v %v", field, raw, ok, err)
		}
		sum = sum.Add(d)
	}
	return sum
}

// TestClient documents the Client: how it logs in, renews and revokes its
// token, retries what may be retried and fails at once on what may not, and
// never quotes a secret in an error.
func TestClient(t *testing.T) {
	t.Parallel()
	t.Run("LogsInOnceAndSendsItsBearerToken", func(t *testing.T) {
		t.Parallel()
		var gotAuth []string
		var mu sync.Mutex
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || r.URL.Path != "/accounts/api/cashboxes/" {
				t.Errorf("got %s %s", r.Method, r.URL.Path)
			}
			if got := r.URL.Query().Get("scope"); got != "all" {
				t.Errorf("scope = %q", got)
			}
			if a := r.Header.Get("Accept"); a != "application/json" {
				t.Errorf("Accept = %q", a)
			}
			mu.Lock()
			gotAuth = append(gotAuth, r.Header.Get("Authorization"))
			mu.Unlock()
			writeResp(w, http.StatusOK, `{"ok":true,"data":[{"id":1}]}`)
		})
		c := newTestClient(t, f.srv.URL, nil)
		ctx := testCtx(t)
		for range 3 {
			body, err := c.Get(ctx, "/accounts/api/cashboxes/", url.Values{"scope": {"all"}})
			if f.note(err) != nil {
				t.Fatal(err)
			}
			if string(body) != `{"ok":true,"data":[{"id":1}]}` {
				t.Errorf("body = %q", body)
			}
		}
		logins, gets, _ := f.counts()
		if logins != 1 || gets != 3 {
			t.Errorf("logins, gets = %d, %d; want 1, 3", logins, gets)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		want := "Bearer " + f.issued[0]
		for _, a := range gotAuth {
			if a != want {
				t.Errorf("Authorization = %q, want %q", a, want)
			}
		}
		b := f.loginBodies[0]
		if len(b) != 2 || b["username"] != testUser || b["password"] != testPassword {
			t.Errorf("login body = %v, want exactly username and password", b)
		}
	})

	t.Run("TakesItsIdentityFromTheLoginAnswer", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			t.Errorf("unexpected GET %s: the login answer carries the identity", r.URL.Path)
			writeResp(w, http.StatusNotFound, `{}`)
		})
		c := newTestClient(t, f.srv.URL, nil)
		id, err := c.Identity(testCtx(t))
		if f.note(err) != nil {
			t.Fatal(err)
		}
		if id != (Identity{CompanyID: "3", BranchID: "4"}) {
			t.Errorf("Identity = %+v", id)
		}
	})

	t.Run("KeepsTheBaseURLsPathAsAPrefix", func(t *testing.T) {
		t.Parallel()
		var paths []string
		var mu sync.Mutex
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			paths = append(paths, r.Method+" "+r.URL.Path)
			mu.Unlock()
			if r.URL.Path == "/erp/api/auth/token/" {
				writeResp(w, http.StatusOK, `{"access_token":"t-prefix","expires_in":3600}`)
				return
			}
			writeResp(w, http.StatusOK, `[]`)
		}))
		defer srv.Close()
		c := newTestClient(t, srv.URL+"/erp/", nil)
		if _, err := c.Get(testCtx(t), "/accounts/api/currencies/", nil); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		want := []string{"POST /erp/api/auth/token/", "GET /erp/accounts/api/currencies/"}
		if strings.Join(paths, "|") != strings.Join(want, "|") {
			t.Errorf("requests = %q, want %q", paths, want)
		}
	})

	// Each request is counted with what it served, as its context says; the
	// login's own requests are the login's, whatever run needed them.
	t.Run("CountsEachRequestByTheStreamAndKindItServed", func(t *testing.T) {
		t.Parallel()
		obs := &recObserver{}
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			writeResp(w, http.StatusOK, `[]`)
		})
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.Observer = obs })
		ctx := testCtx(t)
		if _, err := c.Get(WithAsker(ctx, Asker{Stream: "invoices", Kind: "window"}), "/sales/api/invoices/list/", nil); f.note(err) != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, "/accounts/api/currencies/", nil); f.note(err) != nil {
			t.Fatal(err)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		obs.mu.Lock()
		defer obs.mu.Unlock()
		want := []string{"/api/auth/token/ invoices/login", "/sales/api/invoices/list/ invoices/window", "/accounts/api/currencies/ /other",
			"/api/auth/revoke/ /login"}
		if strings.Join(obs.asked, "|") != strings.Join(want, "|") {
			t.Errorf("requests counted as %q, want %q", obs.asked, want)
		}
	})

	t.Run("LogsInAgainOnceOnA401", func(t *testing.T) {
		t.Parallel()
		obs := &recObserver{}
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			writeResp(w, http.StatusOK, `[]`)
		})
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.Observer = obs })
		ctx := testCtx(t)
		if _, err := c.Get(ctx, "/accounts/api/currencies/", nil); f.note(err) != nil {
			t.Fatal(err)
		}
		f.invalidateTokens() // the ERP revoked or expired the token early
		if _, err := c.Get(ctx, "/accounts/api/currencies/", nil); f.note(err) != nil {
			t.Fatalf("GET after token invalidation: %v", err)
		}
		logins, gets, unauth := f.counts()
		if logins != 2 || gets != 3 || unauth != 1 {
			t.Errorf("logins, gets, 401s = %d, %d, %d; want 2, 3, 1", logins, gets, unauth)
		}
		_, retries, _ := obs.snapshot()
		if strings.Join(retries, "|") != "/accounts/api/currencies/ token_renewal" {
			t.Errorf("observer retries = %q", retries)
		}
	})

	t.Run("FailsOnASecond401", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			// Valid token, yet the ERP says 401 (e.g. the user lost the permission).
			writeResp(w, http.StatusUnauthorized, `{"detail":"not allowed"}`)
		})
		c := newTestClient(t, f.srv.URL, nil)
		_, err := c.Get(testCtx(t), "/accounts/api/cashboxes/", nil)
		f.note(err)
		var he *HTTPError
		if !errors.As(err, &he) || he.Status != http.StatusUnauthorized {
			t.Fatalf("err = %v, want *HTTPError 401", err)
		}
		if !strings.Contains(err.Error(), "/accounts/api/cashboxes/") || !strings.Contains(err.Error(), "not allowed") {
			t.Errorf("error %q should name the route and the excerpt", err)
		}
		logins, gets, _ := f.counts()
		if logins != 2 || gets != 2 {
			t.Errorf("logins, gets = %d, %d; want 2, 2 (one re-login, one retry)", logins, gets)
		}
	})

	t.Run("RenewsItsTokenBeforeItExpires", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, nil)
		// A 10 s token is renewed 2 s (a fifth) before it expires: the two
		// first GETs have 8 s to stay on the first token, and the third,
		// 8.5 s after the first GET returned (so after the login), is in the
		// renewal window. Wide windows: a loaded 2-core CI under -race can
		// stall for a second.
		f.set(func(f *fakeERP) { f.expiresIn = 10 })
		c := newTestClient(t, f.srv.URL, nil)
		ctx := testCtx(t)
		var loggedIn time.Time
		for range 2 {
			if _, err := c.Get(ctx, "/accounts/api/currencies/", nil); f.note(err) != nil {
				t.Fatal(err)
			}
			if loggedIn.IsZero() {
				loggedIn = time.Now()
			}
		}
		if logins, _, _ := f.counts(); logins != 1 {
			t.Fatalf("logins = %d before the renewal margin, want 1", logins)
		}
		time.Sleep(time.Until(loggedIn.Add(8500 * time.Millisecond))) // past 10s - 2s, before the 10s expiry
		if _, err := c.Get(ctx, "/accounts/api/currencies/", nil); f.note(err) != nil {
			t.Fatal(err)
		}
		logins, gets, unauth := f.counts()
		if logins != 2 || unauth != 0 || gets != 3 {
			t.Errorf("logins, gets, 401s = %d, %d, %d; want 2, 3, 0 (renewed before expiry, not on a 401)", logins, gets, unauth)
		}
	})

	t.Run("KeepsItsTokenWithExpiresInAsAStringOrMissing", func(t *testing.T) {
		t.Parallel()
		for _, exp := range []any{"3600", nil, 0, 1e9, "7200.5"} {
			f := newFakeERP(t, nil)
			f.set(func(f *fakeERP) { f.expiresIn = exp })
			c := newTestClient(t, f.srv.URL, nil)
			ctx := testCtx(t)
			for range 3 {
				if _, err := c.Get(ctx, "/x/", nil); f.note(err) != nil {
					t.Fatalf("expires_in %v: %v", exp, err)
				}
			}
			if logins, _, _ := f.counts(); logins != 1 {
				t.Errorf("expires_in %v: logins = %d, want 1 (token kept)", exp, logins)
			}
		}
	})

	t.Run("KeepsItsTokenWithAHugeExpiresIn", func(t *testing.T) {
		t.Parallel()
		for _, exp := range []any{1e10, 1e12} {
			f := newFakeERP(t, nil)
			f.set(func(f *fakeERP) { f.expiresIn = exp })
			c := newTestClient(t, f.srv.URL, nil)
			ctx := testCtx(t)
			for range 3 {
				if _, err := c.Get(ctx, "/x/", nil); f.note(err) != nil {
					t.Fatalf("expires_in %v: %v", exp, err)
				}
			}
			if logins, _, _ := f.counts(); logins != 1 {
				t.Errorf("expires_in %v: logins = %d for 3 GETs, want 1", exp, logins)
			}
		}
	})

	t.Run("TakesATokenWithAnUnparsableExpiresIn", func(t *testing.T) {
		t.Parallel()
		for _, exp := range []any{"junk", true, map[string]int{"s": 1}} {
			f := newFakeERP(t, nil)
			f.set(func(f *fakeERP) { f.expiresIn = exp })
			c := newTestClient(t, f.srv.URL, nil)
			if _, err := c.Get(testCtx(t), "/x/", nil); f.note(err) != nil {
				t.Errorf("expires_in %v: %v", exp, err)
			}
		}
	})

	t.Run("LogsInOnceForConcurrentGets", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, nil)
		c := newTestClient(t, f.srv.URL, nil)
		ctx := testCtx(t)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if _, err := c.Get(ctx, "/x/", nil); f.note(err) != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if logins, gets, _ := f.counts(); logins != 1 || gets != 8 {
			t.Errorf("logins, gets = %d, %d; want 1, 8", logins, gets)
		}
	})

	t.Run("SaysWhyItsLoginWasRefused", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			status   int
			body     string
			contains string
		}{
			{http.StatusUnauthorized, `{"detail":"invalid credentials"}`, "credentials were refused"},
			{http.StatusForbidden, `{"detail":"licence expired"}`, "licence problem"},
			{http.StatusBadRequest, `{"detail":"username and password are required"}`, "login fields are wrong"},
			{http.StatusNotFound, `{"detail":"no such route"}`, "unexpected answer"},
		}
		for _, tt := range tests {
			t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
				t.Parallel()
				f := newFakeERP(t, nil)
				f.set(func(f *fakeERP) {
					f.loginHook = func(w http.ResponseWriter, _ *http.Request, _ int) bool {
						writeResp(w, tt.status, tt.body)
						return true
					}
				})
				c := newTestClient(t, f.srv.URL, nil)
				_, err := c.Get(testCtx(t), "/accounts/api/currencies/", nil)
				f.note(err)
				var ae *AuthError
				if !errors.As(err, &ae) || ae.Status != tt.status {
					t.Fatalf("err = %v, want *AuthError %d", err, tt.status)
				}
				if !strings.Contains(err.Error(), tt.contains) || !strings.Contains(err.Error(), strconv.Itoa(tt.status)) {
					t.Errorf("error %q should contain %q and the status", err, tt.contains)
				}
				if strings.Contains(err.Error(), testPassword) {
					t.Errorf("error %q contains the password", err)
				}
				// The token endpoint's answer may carry secrets: never quoted.
				if strings.Contains(err.Error(), "detail") || strings.Contains(err.Error(), "expired") {
					t.Errorf("error %q quotes the token endpoint's answer", err)
				}
				logins, gets, _ := f.counts()
				if logins != 1 || gets != 0 {
					t.Errorf("logins, gets = %d, %d; want 1, 0 (no tight retry on a refused login)", logins, gets)
				}
			})
		}
	})

	t.Run("SaysAWrongPasswordWasRefusedWithoutQuotingIt", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, nil)
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.Password = "wrong-" + testPassword })
		_, err := c.Identity(testCtx(t))
		f.note(err)
		var ae *AuthError
		if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
			t.Fatalf("err = %v, want *AuthError 401", err)
		}
		if !strings.Contains(err.Error(), "credentials were refused") || strings.Contains(err.Error(), "wrong-") {
			t.Errorf("error %q", err)
		}
	})

	t.Run("RetriesALoginAfterItsRetryAfter", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, nil)
		f.set(func(f *fakeERP) {
			f.loginHook = func(w http.ResponseWriter, _ *http.Request, n int) bool {
				if n == 1 {
					w.Header().Set("Retry-After", "1")
					writeResp(w, http.StatusTooManyRequests, `{"detail":"too many login attempts"}`)
					return true
				}
				return false
			}
		})
		c := newTestClient(t, f.srv.URL, nil)
		if _, err := c.Get(testCtx(t), "/x/", nil); f.note(err) != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.logins != 2 {
			t.Fatalf("logins = %d, want 2", f.logins)
		}
		if gap := f.loginTimes[1].Sub(f.loginTimes[0]); gap < time.Second {
			t.Errorf("login retried after %s, want >= 1s (Retry-After: 1)", gap)
		}
	})

	t.Run("RetriesALoginOnServerErrorsUpToMaxAttempts", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, nil)
		f.set(func(f *fakeERP) {
			f.loginHook = func(w http.ResponseWriter, _ *http.Request, n int) bool {
				if n <= 2 {
					writeResp(w, http.StatusBadGateway, `bad gateway`)
					return true
				}
				return false
			}
		})
		c := newTestClient(t, f.srv.URL, nil)
		if _, err := c.Get(testCtx(t), "/x/", nil); f.note(err) != nil {
			t.Fatal(err)
		}
		if logins, _, _ := f.counts(); logins != 3 {
			t.Errorf("logins = %d, want 3", logins)
		}

		g := newFakeERP(t, nil)
		g.set(func(f *fakeERP) {
			f.loginHook = func(w http.ResponseWriter, _ *http.Request, _ int) bool {
				writeResp(w, http.StatusServiceUnavailable, `down`)
				return true
			}
		})
		c = newTestClient(t, g.srv.URL, func(o *Options) { o.MaxAttempts = 3 })
		_, err := c.Get(testCtx(t), "/x/", nil)
		g.note(err)
		if err == nil || !strings.Contains(err.Error(), "login: POST /api/auth/token/: 503") {
			t.Fatalf("err = %v, want a login 503 failure", err)
		}
		if logins, gets, _ := g.counts(); logins != 3 || gets != 0 {
			t.Errorf("logins, gets = %d, %d; want 3, 0", logins, gets)
		}
	})

	t.Run("GivesUpOnAnUnreachableLogin", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		u := srv.URL
		srv.Close() // nothing listens there any more
		c := newTestClient(t, u, func(o *Options) { o.MaxAttempts = 2 })
		_, err := c.Get(testCtx(t), "/x/", nil)
		if err == nil || !strings.Contains(err.Error(), "login: POST /api/auth/token/: giving up after 2 attempts") {
			t.Fatalf("err = %v", err)
		}
		if strings.Contains(err.Error(), testPassword) {
			t.Errorf("error %q contains the password", err)
		}
	})

	t.Run("RefusesATokenAnswerWithoutAnAccessToken", func(t *testing.T) {
		t.Parallel()
		for body, want := range map[string]string{
			`<html>`:                              "not JSON",
			`{"token":"x"}`:                       "no access_token",
			`{"access_token":""}`:                 "no access_token",
			`{"access_token":["a","b"]}`:          "not JSON",
			`{"access_token":"t","expires_in":60`: "not JSON",
		} {
			f := newFakeERP(t, nil)
			f.set(func(f *fakeERP) {
				f.loginHook = func(w http.ResponseWriter, _ *http.Request, _ int) bool {
					writeResp(w, http.StatusOK, body)
					return true
				}
			})
			c := newTestClient(t, f.srv.URL, nil)
			_, err := c.Get(testCtx(t), "/x/", nil)
			f.note(err)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("token answer %s: err = %v, want %q", body, err, want)
			}
		}
	})

	// A base URL that answers 200 to everything (a web front, not the ERP's
	// API): the login error says the URL may be wrong, names it, and
	// describes what came back without quoting a value of it.
	t.Run("SaysItsBaseURLMayBeWrongWhenAWebFrontAnswersItsLogin", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ ctype, body, want string }{
			{"text/html; charset=utf-8", "<html><head><title>Acme\n Portal</title></head><body>sign in</body></html>",
				`token response is not JSON (POST /api/auth/token/ answered text/html, a page titled "Acme Portal")`},
			{"application/json", `{"ok":true,"echo":{"username":"` + testUser + `","password":"` + testPassword + `"},"token":"tok-Zz9-secret"}`,
				"token response has no access_token (POST /api/auth/token/ answered application/json, a JSON object with keys [echo, ok, token])"},
			{"text/html", "<title>Welcome " + testPassword + "</title>", `a page titled "(withheld)"`},
			{"", "pong", "answered no content type, 4 bytes"},
		} {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.ctype != "" {
					w.Header().Set("Content-Type", tc.ctype)
				} else {
					w.Header()["Content-Type"] = nil // no sniffing
				}
				io.WriteString(w, tc.body)
			}))
			c := newTestClient(t, srv.URL+"/app", nil)
			_, err := c.Get(testCtx(t), "/x/", nil)
			srv.Close()
			msg := fmt.Sprint(err)
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, "the base URL "+srv.URL+"/app may not point at the ERP's API") {
				t.Errorf("answer %q: err = %s; want %q and the hint naming the base URL", tc.body, msg, tc.want)
			}
			for _, secret := range []string{testPassword, "tok-Zz9-secret"} {
				if strings.Contains(msg, secret) {
					t.Errorf("answer %q: the error quotes %q", tc.body, secret)
				}
			}
		}
	})

	t.Run("ReadsItsIdentityFromMe", func(t *testing.T) {
		t.Parallel()
		for body, want := range map[string]string{
			`{"company_id":5,"branch_id":6}`:                          "5/6",
			`{"ok":true,"data":{"company_id":"c5","branch_id":null}}`: "c5/",
			`[1]`:                                    "error: not an object",
			`{"company_id":{"id":5}}`:                "error: company_id",
			`{"company_id":5,"branch_id":[6]}`:       "error: branch_id",
			`{"ok":true,"data":{"company_id":true}}`: "error: company_id",
		} {
			f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/api/auth/me/" {
					t.Errorf("path %s", r.URL.Path)
				}
				writeResp(w, http.StatusOK, body)
			})
			c := newTestClient(t, f.srv.URL, nil)
			id, err := c.Me(testCtx(t))
			f.note(err)
			got := id.CompanyID + "/" + id.BranchID
			if err != nil {
				got = "error: " + err.Error()
				if !strings.Contains(err.Error(), "/api/auth/me/") {
					t.Errorf("Me error %q does not name the route", err)
				}
			}
			if !strings.HasPrefix(got, want) && !(strings.HasPrefix(want, "error: ") && strings.HasPrefix(got, "error: ") && strings.Contains(got, strings.TrimPrefix(want, "error: "))) {
				t.Errorf("Me with %s = %q, want %q", body, got, want)
			}
		}
	})

	t.Run("RevokesItsTokenOnceOnClose", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, nil)
		c := newTestClient(t, f.srv.URL, nil)
		ctx := testCtx(t)
		// Close before any login sends nothing.
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, "/x/", nil); f.note(err) != nil {
			t.Fatal(err)
		}
		if err := f.note(c.Close(ctx)); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := f.note(c.Close(ctx)); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.revoked) != 1 || f.revoked[0] != f.issued[0] {
			t.Errorf("revoked %q, want exactly the issued token %q", f.revoked, f.issued)
		}
	})

	t.Run("NamesARefusedRevokeWithoutItsToken", func(t *testing.T) {
		t.Parallel()
		var tok string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/api/auth/token/":
				writeResp(w, http.StatusOK, `{"access_token":"tok-revoke-Q1","expires_in":60}`)
			case "/api/auth/revoke/":
				tok = r.Header.Get("Authorization")
				writeResp(w, http.StatusUnauthorized, `{"detail":"token invalid"}`)
			default:
				writeResp(w, http.StatusOK, `[]`)
			}
		}))
		defer srv.Close()
		c := newTestClient(t, srv.URL, nil)
		ctx := testCtx(t)
		if _, err := c.Get(ctx, "/x/", nil); err != nil {
			t.Fatal(err)
		}
		err := c.Close(ctx)
		if err == nil || !strings.Contains(err.Error(), "401") {
			t.Fatalf("Close error = %v, want one naming the 401", err)
		}
		if strings.Contains(err.Error(), "tok-revoke-Q1") || strings.Contains(err.Error(), testPassword) {
			t.Errorf("Close error %q contains a secret", err)
		}
		if tok != "Bearer tok-revoke-Q1" {
			t.Errorf("revoke Authorization = %q", tok)
		}
	})

	t.Run("RetriesATooManyRequestsAfterItsRetryAfter", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var times []time.Time
		obs := &recObserver{}
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			times = append(times, time.Now())
			n := len(times)
			mu.Unlock()
			if n == 1 {
				w.Header().Set("Retry-After", "1")
				writeResp(w, http.StatusTooManyRequests, `{"detail":"rate limited"}`)
				return
			}
			writeResp(w, http.StatusOK, `[{"id":1}]`)
		})
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.Observer = obs })
		body, err := c.Get(testCtx(t), "/accounts/api/currencies/", nil)
		if f.note(err) != nil {
			t.Fatal(err)
		}
		if string(body) != `[{"id":1}]` {
			t.Errorf("body = %q", body)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(times) != 2 {
			t.Fatalf("%d requests, want 2", len(times))
		}
		if gap := times[1].Sub(times[0]); gap < time.Second {
			t.Errorf("retry came %s after the 429, want >= 1s", gap)
		}
		_, retries, waits := obs.snapshot()
		if len(waits) != 1 || waits[0] != time.Second || len(retries) != 1 || !strings.HasSuffix(retries[0], "rate_limited") {
			t.Errorf("observer waits %v, retries %q", waits, retries)
		}
	})

	t.Run("FailsAtOnceOnARetryAfterAboveMaxRetryAfter", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "3600")
			writeResp(w, http.StatusTooManyRequests, `{}`)
		})
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.MaxRetryAfter = time.Minute })
		start := time.Now()
		_, err := c.Get(testCtx(t), "/x/", nil)
		f.note(err)
		if err == nil || !strings.Contains(err.Error(), "429") || !strings.Contains(err.Error(), "/x/") {
			t.Fatalf("err = %v, want a rate-limit failure naming the route", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %s: a Retry-After above MaxRetryAfter must fail at once", d)
		}
	})

	t.Run("GivesUpAfterMaxWaitsRateLimits", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "0")
			writeResp(w, http.StatusTooManyRequests, `{}`)
		})
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.MaxWaits = 3 })
		_, err := c.Get(testCtx(t), "/x/", nil)
		f.note(err)
		if err == nil || !strings.Contains(err.Error(), "rate limited") {
			t.Fatalf("err = %v", err)
		}
		if _, gets, _ := f.counts(); gets != 4 {
			t.Errorf("gets = %d, want 4 (3 waits honoured, the 4th 429 gives up)", gets)
		}
	})

	t.Run("StopsWaitingOutARateLimitWhenItsContextEnds", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "30")
			writeResp(w, http.StatusTooManyRequests, `{}`)
		})
		c := newTestClient(t, f.srv.URL, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Get(ctx, "/x/", nil)
		f.note(err)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("cancellation took %s", d)
		}
	})

	t.Run("FailsAtOnceOnAHugeRetryAfter", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "9300000000")
			writeResp(w, http.StatusTooManyRequests, `{}`)
		})
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.MaxRetryAfter = time.Minute })
		_, err := c.Get(testCtx(t), "/x/", nil)
		f.note(err)
		if err == nil {
			t.Fatal("Get succeeded")
		}
		if _, gets, _ := f.counts(); gets != 1 {
			t.Errorf("gets = %d, want 1: a Retry-After beyond MaxRetryAfter must fail at once", gets)
		}
	})

	t.Run("RetriesServerErrors", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int32
		obs := &recObserver{}
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) <= 2 {
				writeResp(w, http.StatusBadGateway, `bad gateway`)
				return
			}
			writeResp(w, http.StatusOK, `[]`)
		})
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.Observer = obs })
		if _, err := c.Get(testCtx(t), "/x/", nil); f.note(err) != nil {
			t.Fatal(err)
		}
		if n.Load() != 3 {
			t.Errorf("%d requests, want 3", n.Load())
		}
		_, retries, _ := obs.snapshot()
		if strings.Join(retries, "|") != "/x/ server_error|/x/ server_error" {
			t.Errorf("observer retries = %q", retries)
		}
	})

	t.Run("GivesUpOnServerErrorsAfterMaxAttempts", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			writeResp(w, http.StatusServiceUnavailable, "upstream   down\n\tplease retry later")
		})
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.MaxAttempts = 3 })
		_, err := c.Get(testCtx(t), "/accounts/api/cashboxes/", nil)
		f.note(err)
		var he *HTTPError
		if !errors.As(err, &he) {
			t.Fatalf("err = %v, want *HTTPError", err)
		}
		if he.Status != http.StatusServiceUnavailable || he.Route != "/accounts/api/cashboxes/" || he.Excerpt != "upstream down please retry later" {
			t.Errorf("HTTPError = %+v", he)
		}
		want := "GET /accounts/api/cashboxes/: 503 Service Unavailable: upstream down please retry later"
		if err.Error() != want {
			t.Errorf("error = %q, want %q", err, want)
		}
		if _, gets, _ := f.counts(); gets != 3 {
			t.Errorf("gets = %d, want MaxAttempts = 3", gets)
		}
	})

	t.Run("RetriesACutConnection", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int32
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				// Cut the connection without an answer.
				conn, _, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				_ = conn.Close()
				return
			}
			writeResp(w, http.StatusOK, `[]`)
		})
		obs := &recObserver{}
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.Observer = obs })
		if _, err := c.Get(testCtx(t), "/x/", nil); f.note(err) != nil {
			t.Fatal(err)
		}
		if n.Load() < 2 {
			t.Errorf("%d requests, want a retry", n.Load())
		}
	})

	t.Run("GivesUpOnCutConnectionsWithoutQuotingTheURL", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		})
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.MaxAttempts = 2 })
		_, err := c.Get(testCtx(t), "/sales/api/invoices/list/", url.Values{"cursor": {"secret-looking-cursor"}})
		f.note(err)
		if err == nil || !strings.Contains(err.Error(), "giving up after 2 attempts") || !strings.Contains(err.Error(), "/sales/api/invoices/list/") {
			t.Fatalf("err = %v", err)
		}
		if strings.Contains(err.Error(), "secret-looking-cursor") || strings.Contains(err.Error(), "127.0.0.1:") && strings.Contains(err.Error(), "http://") {
			t.Errorf("error %q carries the request URL", err)
		}
	})

	t.Run("RetriesATimedOutRequest", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int32
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				select {
				case <-r.Context().Done():
				case <-time.After(2 * time.Second):
				}
				return
			}
			writeResp(w, http.StatusOK, `[]`)
		})
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.Timeout = 150 * time.Millisecond })
		if _, err := c.Get(testCtx(t), "/x/", nil); f.note(err) != nil {
			t.Fatal(err)
		}
		if n.Load() < 2 {
			t.Errorf("%d requests, want the timed-out one retried", n.Load())
		}
	})

	t.Run("DoesNotRetryA4xx", func(t *testing.T) {
		t.Parallel()
		for _, status := range []int{http.StatusNotFound, http.StatusBadRequest, http.StatusForbidden, http.StatusMethodNotAllowed} {
			f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
				writeResp(w, status, `{"detail": "Not found."}`)
			})
			c := newTestClient(t, f.srv.URL, nil)
			_, err := c.Get(testCtx(t), "/accounts/api/cashboxes/17/access/", nil)
			f.note(err)
			var he *HTTPError
			if !errors.As(err, &he) || he.Status != status {
				t.Fatalf("%d: err = %v, want *HTTPError", status, err)
			}
			for _, s := range []string{"/accounts/api/cashboxes/{pk}/access/", strconv.Itoa(status), `{"detail": "Not found."}`} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%d: error %q does not contain %q", status, err, s)
				}
			}
			if _, gets, _ := f.counts(); gets != 1 {
				t.Errorf("%d: gets = %d, want 1 (not retried)", status, gets)
			}
		}
	})

	t.Run("DoesNotFollowARedirect", func(t *testing.T) {
		t.Parallel()
		var elsewhere atomic.Int32
		var leaked atomic.Value
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			elsewhere.Add(1)
			leaked.Store(r.Header.Get("Authorization"))
			writeResp(w, http.StatusOK, `[]`)
		}))
		defer other.Close()
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/steal/", http.StatusFound)
		})
		c := newTestClient(t, f.srv.URL, nil)
		_, err := c.Get(testCtx(t), "/accounts/api/currencies/", nil)
		f.note(err)
		var he *HTTPError
		if !errors.As(err, &he) || he.Status != http.StatusFound {
			t.Errorf("err = %v, want *HTTPError 302", err)
		}
		if n := elsewhere.Load(); n != 0 {
			t.Errorf("the redirect was followed %d times (Authorization %q)", n, leaked.Load())
		}
		if _, gets, _ := f.counts(); gets != 1 {
			t.Errorf("gets = %d, want 1", gets)
		}
	})

	t.Run("BacksOffBetweenHalfAndAllOfItsCeiling", func(t *testing.T) {
		t.Parallel()
		c, err := New(Options{BaseURL: "https://erp.example.com", BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for attempt := 1; attempt <= 70; attempt++ {
			ceil := min(100*time.Millisecond<<min(attempt-1, 20), time.Second)
			for range 20 {
				d := c.backoff.Delay(attempt)
				if d < ceil/2 || d > ceil {
					t.Fatalf("backoff(%d) = %s, want in [%s, %s]", attempt, d, ceil/2, ceil)
				}
			}
		}
	})

	t.Run("SignsEveryRequestWithPluginAuth", func(t *testing.T) {
		t.Parallel()
		const secret = "plugin-S3cret.x"
		var paths []string
		var mu sync.Mutex
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			paths = append(paths, r.Method+" "+r.URL.Path)
			mu.Unlock()
			if r.Method != http.MethodGet {
				t.Errorf("plugin auth sent %s %s", r.Method, r.URL.Path)
			}
			if got, want := r.Header.Get("Authorization"), "ERPPlugin client-7."+secret; got != want {
				t.Errorf("Authorization = %q, want %q", got, want)
			}
			switch r.URL.Path {
			case "/api/auth/me/":
				writeResp(w, http.StatusOK, `{"ok":true,"data":{"id":7,"company_id":3,"branch_id":"4"}}`)
			case "/denied/":
				writeResp(w, http.StatusUnauthorized, `{"detail":"bad credentials"}`)
			default:
				writeResp(w, http.StatusOK, `[]`)
			}
		}))
		defer srv.Close()
		c := newTestClient(t, srv.URL, func(o *Options) {
			o.Auth = "plugin"
			o.Username, o.Password = "", ""
			o.PluginScheme = "ERPPlugin"
			o.ClientID = "client-7"
			o.ClientSecret = secret
		})
		ctx := testCtx(t)
		id, err := c.Identity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if id != (Identity{CompanyID: "3", BranchID: "4"}) {
			t.Errorf("Identity = %+v", id)
		}
		if id2, err := c.Identity(ctx); err != nil || id2 != id {
			t.Errorf("second Identity = %+v, %v", id2, err)
		}
		if _, err := c.Get(ctx, "/accounts/api/currencies/", nil); err != nil {
			t.Fatal(err)
		}
		_, err = c.Get(ctx, "/denied/", nil)
		var he *HTTPError
		if !errors.As(err, &he) || he.Status != http.StatusUnauthorized {
			t.Errorf("err = %v, want *HTTPError 401 without re-login", err)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("error %q contains the client secret", err)
		}
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		want := []string{"GET /api/auth/me/", "GET /accounts/api/currencies/", "GET /denied/"}
		if strings.Join(paths, "|") != strings.Join(want, "|") {
			t.Errorf("requests = %q, want %q (no token request, no revoke)", paths, want)
		}
	})

	t.Run("ReadsEveryInvoiceThroughTheSimulatorsFaults", func(t *testing.T) {
		t.Parallel()
		sim, c := newSimClient(t, erpsim.Options{Invoices: 120, PageSizeCap: 10}, func(o *Options) { o.MaxAttempts = 6 })
		sim.SetFaults(erpsim.Faults{ServerErrorEvery: 3, DropEvery: 4})
		recs, _ := walkInvoices(t, testCtx(t), c, 10)
		if len(recs) != 120 {
			t.Fatalf("%d invoices, want 120", len(recs))
		}
		if got, want := sumMoney(t, recs, "total_bc"), sim.InvoiceTotal(); !got.Equal(want) {
			t.Errorf("sum %s, want %s", got, want)
		}
	})

	t.Run("WaitsUntilARetryAfterDate", func(t *testing.T) {
		t.Parallel()
		sim, c := newSimClient(t, erpsim.Options{Invoices: 20, PageSizeCap: 10}, nil)
		sim.SetFaults(erpsim.Faults{RateLimitEvery: 2, RetryAfter: time.Second, RetryAfterHTTPDate: true})
		recs, _ := walkInvoices(t, testCtx(t), c, 10)
		if len(recs) != 20 {
			t.Fatalf("%d invoices, want 20", len(recs))
		}
		reqs := sim.Requests()
		limited := 0
		for i, r := range reqs {
			if r.Status != http.StatusTooManyRequests {
				continue
			}
			limited++
			if i+1 >= len(reqs) {
				t.Fatal("no retry after the 429")
			}
			// The simulator's date is now+1s rounded up to a whole second.
			notBefore := r.At.Add(time.Second)
			if next := reqs[i+1].At; next.Before(notBefore) {
				t.Errorf("retry at %s, before the Retry-After date (>= %s)", next.Format(time.StampMilli), notBefore.Format(time.StampMilli))
			}
		}
		if limited == 0 {
			t.Error("the simulator answered no 429")
		}
	})

	t.Run("NamesTheRequestAndWhatWentWrongInItsErrors", func(t *testing.T) {
		t.Parallel()
		ae := &AuthError{Status: 401, Reason: "credentials were refused"}
		if ae.Error() != "ERP login refused (401): credentials were refused" {
			t.Errorf("AuthError = %q", ae)
		}
		he := &HTTPError{Route: "/r/", Status: 404, Excerpt: "nope"}
		if he.Error() != "GET /r/: 404 Not Found: nope" {
			t.Errorf("HTTPError = %q", he)
		}
		ee := &EnvelopeError{Route: "/r/", Why: "empty body"}
		if ee.Error() != "GET /r/: empty body" {
			t.Errorf("EnvelopeError = %q", ee)
		}
	})
}

// TestRetryAfter documents retryAfter: how long a Retry-After header says to
// wait.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	t.Run("ReadsSecondsOrAnHTTPDate", func(t *testing.T) {
		t.Parallel()
		now := time.Date(2026, 3, 4, 10, 20, 30, 0, time.UTC)
		h := func(v string) http.Header { return http.Header{"Retry-After": {v}} }
		tests := []struct {
			v    string
			want time.Duration
			ok   bool
		}{
			{"1", time.Second, true},
			{"120", 2 * time.Minute, true},
			{" 7 ", 7 * time.Second, true},
			{"0", 0, true},
			{"", 0, false},
			{"   ", 0, false},
			{"-1", 0, false},
			{"1.5", 0, false},
			{"soon", 0, false},
			{"Wed, 32 Foo 2026 99:99:99 GMT", 0, false},
			{now.Add(-time.Minute).Format(http.TimeFormat), 0, true}, // in the past: go now
		}
		for _, tt := range tests {
			got, ok := retryAfter(h(tt.v), now)
			if got != tt.want || ok != tt.ok {
				t.Errorf("retryAfter(%q) = %s, %v; want %s, %v", tt.v, got, ok, tt.want, tt.ok)
			}
		}
		if _, ok := retryAfter(http.Header{}, now); ok {
			t.Error("retryAfter without the header reported ok")
		}

		// HTTP dates: never earlier than the date, at most a second later.
		for _, frac := range []time.Duration{0, time.Millisecond, 500 * time.Millisecond, 999 * time.Millisecond} {
			n := now.Add(frac)
			for _, ahead := range []time.Duration{0, time.Second, 3 * time.Second, 90 * time.Second} {
				date := n.Add(ahead).UTC()
				for _, layout := range []string{http.TimeFormat, time.RFC850, time.ANSIC} {
					v := date.Format(layout)
					at, err := http.ParseTime(v)
					if err != nil {
						t.Fatal(err)
					}
					got, ok := retryAfter(h(v), n)
					if !ok {
						t.Errorf("retryAfter(%q) not ok", v)
						continue
					}
					if n.Add(got).Before(at) {
						t.Errorf("now %s, Retry-After %q: wait %s ends before the date", n.Format(time.StampMilli), v, got)
					}
					if at.After(n) && got > at.Sub(n)+time.Second {
						t.Errorf("now %s, Retry-After %q: wait %s is more than a second past the date", n.Format(time.StampMilli), v, got)
					}
				}
			}
		}
		if got, _ := retryAfter(h(now.Add(3*time.Second).Format(http.TimeFormat)), now); got < 3*time.Second {
			t.Errorf("HTTP date 3s ahead: wait %s, want >= 3s", got)
		}
	})

	t.Run("NeverTurnsAHugeValueIntoAShortWait", func(t *testing.T) {
		now := time.Date(2026, 3, 4, 10, 20, 30, 0, time.UTC)
		for _, v := range []string{"9300000000", "99999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"} {
			got, ok := retryAfter(http.Header{"Retry-After": {v}}, now)
			if ok && got < time.Hour {
				t.Errorf("retryAfter(%q) = %s: a huge Retry-After must not turn into a short wait", v, got)
			}
		}
	})
}

// TestExcerpt documents excerpt: the part of an answer an error quotes.
func TestExcerpt(t *testing.T) {
	t.Parallel()
	t.Run("CollapsesWhitespaceAndCutsAt200Bytes", func(t *testing.T) {
		t.Parallel()
		tests := []struct{ in, want string }{
			{"", "(empty body)"},
			{" \n\t ", "(empty body)"},
			{"  not\n\tfound  ", "not found"},
			{`{"detail": "x"}`, `{"detail": "x"}`},
			{strings.Repeat("a", 200), strings.Repeat("a", 200)},
			{strings.Repeat("a", 201), strings.Repeat("a", 200) + "..."},
		}
		for _, tt := range tests {
			if got := excerpt([]byte(tt.in)); got != tt.want {
				t.Errorf("excerpt(%q) = %q, want %q", tt.in, got, tt.want)
			}
		}
		if got := excerpt([]byte(strings.Repeat("line\n", 1000))); strings.Contains(got, "\n") || len(got) > 203 {
			t.Errorf("excerpt of a long multi-line body = %q", got)
		}
	})

	t.Run("StaysValidUTF8WhereItCuts", func(t *testing.T) {
		for pad := range 4 {
			in := strings.Repeat("a", 199-pad) + strings.Repeat("é", 10)
			if got := excerpt([]byte(in)); !utf8.ValidString(got) {
				t.Errorf("excerpt(%q) = %q: invalid UTF-8", in, got)
			}
		}
	})
}

// TestRouteLabel documents RouteLabel: the route a request is counted and
// named under.
func TestRouteLabel(t *testing.T) {
	t.Parallel()
	t.Run("ReplacesAnIDSegmentWithPk", func(t *testing.T) {
		for in, want := range map[string]string{
			"/sales/api/invoices/list/":                                 "/sales/api/invoices/list/",
			"/accounts/api/cashboxes/17/access/":                        "/accounts/api/cashboxes/{pk}/access/",
			"/accounts/api/journal-entries/JE-000001/journal-preview/":  "/accounts/api/journal-entries/{pk}/journal-preview/",
			"/accounts/api/payment-vouchers/PV-000012/journal-preview/": "/accounts/api/payment-vouchers/{pk}/journal-preview/",
			"/api/auth/token/":                                          "/api/auth/token/",
			"/accounts/api/cashbox-reconciliations/":                    "/accounts/api/cashbox-reconciliations/",
			"":                                                          "",
		} {
			if got := RouteLabel(in); got != want {
				t.Errorf("RouteLabel(%q) = %q, want %q", in, got, want)
			}
		}
	})
}
