// Package erp is the read-only client of the ERP's HTTP API. Its exported
// API can only GET: the two POSTs the product allows (token and revoke)
// are unexported, sent only to log in when a read needs a token and by
// Close.
package erp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/erpsync/erpsync/internal/backoff"
)

// Observer receives what the client does, for metrics. Implementations
// must be safe for concurrent use.
type Observer interface {
	// Request is called once per HTTP exchange, with the stream and kind
	// it served (an Asker's); code is 0 when no status was received
	// (connection error, timeout).
	Request(route, stream, kind string, code int, elapsed time.Duration)
	// Retry is called before each retry; reason is rate_limited,
	// server_error, network or token_renewal.
	Retry(route, reason string)
	// RateLimitWait is called with each wait imposed by a 429.
	RateLimitWait(d time.Duration)
}

type nopObserver struct{}

func (nopObserver) Request(string, string, string, int, time.Duration) {}
func (nopObserver) Retry(string, string)                               {}
func (nopObserver) RateLimitWait(time.Duration)                        {}

// Options configure a Client. Secrets are plain strings here; the client
// never logs or formats them.
type Options struct {
	BaseURL      string
	Auth         string // token (default) | plugin
	Username     string
	Password     string
	PluginScheme string
	ClientID     string
	ClientSecret string

	Timeout     time.Duration // per HTTP exchange; default 60s
	MaxAttempts int           // per GET for 5xx and network errors; default 8
	MaxWaits    int           // 429 answers honoured per GET before giving up; default 30
	BackoffBase time.Duration // default 500ms
	BackoffMax  time.Duration // default 30s
	// MaxRetryAfter bounds one 429 wait; a longer Retry-After fails the
	// request instead of stalling a run for hours. Default 15m.
	MaxRetryAfter time.Duration
	// MaxResponse bounds the size of one answer, enforced while reading;
	// default DefaultMaxResponse. An answer over it is a TooLargeError.
	MaxResponse int64

	HTTPClient *http.Client
	Observer   Observer
	Logger     *slog.Logger
	// Budget, shared by the clients of one installation's logins, bounds
	// their requests in flight; nil bounds nothing.
	Budget *Budget

	// Hints names the settings behind these options, as the operator
	// wrote them (an environment variable or a key of the config file),
	// so that errors tell what to check.
	Hints Hints
}

// DefaultMaxResponse is the MaxResponse of Options that leave it 0: far
// above any page, and low enough that a runaway answer cannot take the
// daemon's memory.
const DefaultMaxResponse = 64 << 20

// maxMaxResponse keeps the limit (plus the byte that shows it exceeded)
// within what an int holds everywhere and the decoder accepts.
const maxMaxResponse = maxBody - 1

// Hints are the names of the settings an error may point to.
type Hints struct {
	Credentials string // e.g. "ERPSYNC_ERP_USERNAME and ERPSYNC_ERP_PASSWORD_FILE"
	MaxResponse string // e.g. "ERPSYNC_ERP_MAX_RESPONSE" or "sources[1].max_response"
}

// Identity is the company and branch context of the credentials.
type Identity struct {
	CompanyID string
	BranchID  string
}

// Client talks to one ERP installation. Safe for concurrent use.
type Client struct {
	opt     Options
	base    *url.URL
	http    *http.Client
	obs     Observer
	log     *slog.Logger
	backoff backoff.Policy

	mu       sync.Mutex
	token    string
	expires  time.Time
	identity *Identity
	// refused remembers a login the ERP refused, so the other streams of
	// the source fail at once instead of each trying the same wrong
	// credentials (which can lock the account).
	refused      error
	refusedUntil time.Time
}

// refusalMemory is how long a refused login is not tried again.
const refusalMemory = time.Minute

// New validates the options; it does not contact the ERP.
func New(opt Options) (*Client, error) {
	if err := ValidateBaseURL(opt.BaseURL); err != nil {
		return nil, fmt.Errorf("erp base URL: %w", err)
	}
	base, _ := url.Parse(opt.BaseURL)
	base.Path = strings.TrimRight(base.Path, "/")
	if opt.Auth == "" {
		opt.Auth = "token"
	}
	if opt.Timeout == 0 {
		opt.Timeout = 60 * time.Second
	}
	if opt.MaxAttempts == 0 {
		opt.MaxAttempts = 8
	}
	if opt.MaxWaits == 0 {
		opt.MaxWaits = 30
	}
	if opt.BackoffBase == 0 {
		opt.BackoffBase = 500 * time.Millisecond
	}
	if opt.BackoffMax == 0 {
		opt.BackoffMax = 30 * time.Second
	}
	if opt.MaxRetryAfter == 0 {
		opt.MaxRetryAfter = 15 * time.Minute
	}
	switch {
	case opt.MaxResponse == 0:
		opt.MaxResponse = DefaultMaxResponse
	case opt.MaxResponse < 0 || opt.MaxResponse > maxMaxResponse:
		setting := ""
		if opt.Hints.MaxResponse != "" {
			setting = " (" + opt.Hints.MaxResponse + ")"
		}
		return nil, fmt.Errorf("erp response size limit %d%s: want 1 to %d bytes", opt.MaxResponse, setting, int64(maxMaxResponse))
	}
	c := &Client{opt: opt, base: base, http: opt.HTTPClient, obs: opt.Observer, log: opt.Logger,
		backoff: backoff.Policy{Base: opt.BackoffBase, Max: opt.BackoffMax}}
	if c.http == nil {
		c.http = &http.Client{
			Transport: &http.Transport{
				Proxy:               http.ProxyFromEnvironment,
				DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
				TLSHandshakeTimeout: 10 * time.Second,
				MaxIdleConnsPerHost: 4,
				IdleConnTimeout:     90 * time.Second,
			},
			// A redirect could carry the token to another host.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if c.obs == nil {
		c.obs = nopObserver{}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// AuthError means the ERP refused the credentials (or the login is not
// possible); retrying soon will not help.
type AuthError struct {
	Status int
	Reason string
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("ERP login refused (%d): %s", e.Status, e.Reason)
}

// HTTPError is a final non-success answer.
type HTTPError struct {
	Method  string // GET when empty
	Route   string
	Status  int
	Excerpt string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", cmp.Or(e.Method, http.MethodGet), e.Route, e.Status, http.StatusText(e.Status), e.Excerpt)
}

// TooLargeError is an answer larger than Options.MaxResponse. It is final:
// asking again would only download the same answer again.
type TooLargeError struct {
	Method  string // GET when empty
	Route   string
	Limit   int64  // bytes
	Setting string // the setting behind the limit (Hints.MaxResponse), if known
}

func (e *TooLargeError) Error() string {
	limit := fmt.Sprintf("%d-byte", e.Limit)
	if e.Limit > 0 && e.Limit%(1<<20) == 0 {
		limit = fmt.Sprintf("%d MiB", e.Limit>>20)
	}
	msg := fmt.Sprintf("%s %s: the answer is larger than the %s limit", cmp.Or(e.Method, http.MethodGet), e.Route, limit)
	if e.Setting != "" {
		msg += " (" + e.Setting + ")"
	}
	return msg
}

// Identity returns the company and branch context of the credentials,
// logging in (token auth) or asking /api/auth/me/ (plugin auth) once.
func (c *Client) Identity(ctx context.Context) (Identity, error) {
	if c.opt.Auth == "token" {
		if _, err := c.currentToken(ctx); err != nil {
			return Identity{}, err
		}
	}
	c.mu.Lock()
	id := c.identity
	c.mu.Unlock()
	if id != nil && id.CompanyID != "" {
		return *id, nil
	}
	me, err := c.Me(ctx)
	if err != nil {
		return Identity{}, err
	}
	c.mu.Lock()
	c.identity = &me
	c.mu.Unlock()
	return me, nil
}

// Me asks /api/auth/me/ for the context of the credentials.
func (c *Client) Me(ctx context.Context) (Identity, error) {
	body, err := c.Get(ctx, "/api/auth/me/", nil)
	if err != nil {
		return Identity{}, err
	}
	rec, err := ParseRecord(body)
	if err != nil {
		return Identity{}, fmt.Errorf("GET /api/auth/me/: %w", err)
	}
	if inner, ok := rec.Get("data"); ok && Kind(inner) == "object" {
		if rec, err = ParseRecord(inner); err != nil {
			return Identity{}, fmt.Errorf("GET /api/auth/me/: %w", err)
		}
	}
	company, _, err := rec.Text("company_id")
	if err != nil {
		return Identity{}, fmt.Errorf("GET /api/auth/me/: %w", err)
	}
	branch, _, err := rec.Text("branch_id")
	if err != nil {
		return Identity{}, fmt.Errorf("GET /api/auth/me/: %w", err)
	}
	return Identity{CompanyID: company, BranchID: branch}, nil
}

// Get fetches path (id segments escaped, as DetailPath makes them) and
// returns the whole body of a 200 answer, with retries, token renewal and
// rate limiting handled.
func (c *Client) Get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	return c.getURL(ctx, RouteLabel(path), c.url(path, q), nil)
}

// getURL GETs target; with into, the body is read into that buffer
// (reused across pages) instead of a new one, when it fits (see readBody).
func (c *Client) getURL(ctx context.Context, route, target string, into *[]byte) (_ []byte, err error) {
	ctx, span := startRequest(ctx, http.MethodGet, route)
	renewed := false
	r := retrier{c: c, route: route, method: http.MethodGet}
	status := 0
	defer func() { endRequest(span, status, r.resends, err) }()
	for {
		auth, err := c.authorization(ctx)
		if err != nil {
			return nil, err
		}
		var header http.Header
		var body []byte
		status, header, body, err = c.exchange(ctx, route, http.MethodGet, target, auth, nil, into)
		switch {
		case err != nil, status == http.StatusTooManyRequests, status >= 500:
			if err := r.again(ctx, status, header, body, err); err != nil {
				return nil, err
			}
		case status == http.StatusOK:
			return body, nil
		case status == http.StatusUnauthorized && c.opt.Auth == "token" && !renewed:
			// The token may have been revoked or expired early: log in
			// again, once.
			renewed = true
			c.dropToken(auth)
			c.obs.Retry(route, "token_renewal")
			r.resends++
			waitEvent(ctx, eventRenewal, time.Now(), 0, attrReason.String("token_renewal"))
		default:
			return nil, &HTTPError{Method: http.MethodGet, Route: route, Status: status, Excerpt: excerpt(body)}
		}
	}
}

// retrier is the retry state of one request: answers that may succeed
// later (no answer, 429, 5xx) are waited out and retried, within bounds.
type retrier struct {
	c               *Client
	route, method   string
	attempts, waits int
	resends         int // times the request was sent again
	// secret marks the auth endpoints, whose answers are never quoted.
	secret bool
}

// again sleeps as the answer requires and returns nil to retry, or the
// error that ends the request.
func (r *retrier) again(ctx context.Context, status int, header http.Header, body []byte, err error) error {
	c := r.c
	if tl := (*TooLargeError)(nil); errors.As(err, &tl) {
		return err
	}
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.attempts++
		if r.attempts >= c.opt.MaxAttempts {
			return fmt.Errorf("%s %s: giving up after %d attempts: %w", r.method, r.route, r.attempts, err)
		}
		c.obs.Retry(r.route, "network")
		c.log.DebugContext(ctx, "erp request failed, retrying", "route", r.route, "attempt", r.attempts, "err", err)
		return r.backoff(ctx, "network", c.backoff.Delay(r.attempts))
	case status == http.StatusTooManyRequests:
		r.waits++
		wait, ok := retryAfter(header, time.Now())
		if !ok {
			wait = c.backoff.Delay(r.waits)
		}
		if r.waits > c.opt.MaxWaits || wait > c.opt.MaxRetryAfter {
			return fmt.Errorf("%s %s: rate limited (429, Retry-After %s) %d times: giving up", r.method, r.route, wait, r.waits)
		}
		c.obs.Retry(r.route, "rate_limited")
		c.obs.RateLimitWait(wait)
		c.log.InfoContext(ctx, "erp rate limit, waiting", "route", r.route, "wait", wait)
		if !ok {
			return r.backoff(ctx, "rate_limited", wait)
		}
		r.resends++
		waitEvent(ctx, eventRetryAfter, time.Now(), wait)
		return sleep(ctx, wait)
	default: // 5xx: the ERP may recover
		r.attempts++
		if r.attempts >= c.opt.MaxAttempts {
			shown := excerpt(body)
			if r.secret {
				shown = "(answer not shown)"
			}
			return &HTTPError{Method: r.method, Route: r.route, Status: status, Excerpt: shown}
		}
		c.obs.Retry(r.route, "server_error")
		c.log.DebugContext(ctx, "erp server error, retrying", "route", r.route, "status", status, "attempt", r.attempts)
		return r.backoff(ctx, "server_error", c.backoff.Delay(r.attempts))
	}
}

// backoff waits d before the request is sent again, for reason.
func (r *retrier) backoff(ctx context.Context, reason string, d time.Duration) error {
	r.resends++
	waitEvent(ctx, eventBackoff, time.Now(), d, attrReason.String(reason), attrAttempts.Int(r.resends+1))
	return sleep(ctx, d)
}

// exchange sends one request and reads the whole answer, at most
// MaxResponse bytes of it (a TooLargeError beyond). Any other error means
// no complete answer arrived (connection reset, timeout, cut body). into
// is as for getURL.
func (c *Client) exchange(ctx context.Context, route, method, target, auth string, body []byte, into *[]byte) (int, http.Header, []byte, error) {
	// The wait for the budget is not the request's: its timeout starts
	// once it may go.
	release, err := c.opt.Budget.acquire(ctx)
	if err != nil {
		return 0, nil, nil, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "erpsync")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		a := askerOf(ctx, route)
		c.obs.Request(route, a.Stream, a.Kind, 0, time.Since(start))
		return 0, nil, nil, stripURL(err)
	}
	// Closing a body not read to its end drops the connection, so an
	// answer refused for its size is not downloaded on.
	defer resp.Body.Close()
	data, err := readBody(resp.Body, resp.ContentLength, c.opt.MaxResponse, into)
	a := askerOf(ctx, route)
	c.obs.Request(route, a.Stream, a.Kind, resp.StatusCode, time.Since(start))
	if errors.Is(err, errOverLimit) {
		return 0, nil, nil, &TooLargeError{Method: method, Route: route, Limit: c.opt.MaxResponse, Setting: c.opt.Hints.MaxResponse}
	}
	if err != nil {
		return 0, nil, nil, fmt.Errorf("reading %d answer: %w", resp.StatusCode, stripURL(err))
	}
	return resp.StatusCode, resp.Header, data, nil
}

// stripURL drops the request URL that net/http puts in its errors: it is
// long, and the route is already in the message around it.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func (c *Client) authorization(ctx context.Context) (string, error) {
	if c.opt.Auth == "plugin" {
		return c.opt.PluginScheme + " " + c.opt.ClientID + "." + c.opt.ClientSecret, nil
	}
	tok, err := c.currentToken(ctx)
	if err != nil {
		return "", err
	}
	return "Bearer " + tok, nil
}

// renewMargin is how long before expiry a token is replaced, so a long
// page request never starts with a token about to die.
func renewMargin(ttl time.Duration) time.Duration {
	return min(30*time.Second, ttl/5)
}

func (c *Client) currentToken(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != "" && time.Now().Before(c.expires) {
		return c.token, nil
	}
	if c.refused != nil && time.Now().Before(c.refusedUntil) {
		return "", c.refused
	}
	tok, err := c.loginLocked(ctx)
	var ae *AuthError
	if errors.As(err, &ae) {
		c.refused, c.refusedUntil = err, time.Now().Add(refusalMemory)
	}
	return tok, err
}

func (c *Client) dropToken(auth string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if "Bearer "+c.token == auth {
		c.token = ""
	}
}

type tokenResponse struct {
	AccessToken string          `json:"access_token"`
	ExpiresIn   json.RawMessage `json:"expires_in"`
	CompanyID   json.RawMessage `json:"company_id"`
	BranchID    json.RawMessage `json:"branch_id"`
}

// loginLocked obtains a token. Callers hold c.mu, so concurrent streams of
// one source log in once.
func (c *Client) loginLocked(ctx context.Context) (_ string, err error) {
	const route = "/api/auth/token/"
	creds, err := json.Marshal(map[string]string{"username": c.opt.Username, "password": c.opt.Password})
	if err != nil {
		return "", fmt.Errorf("login: %w", err)
	}
	ctx, span := startRequest(ctx, http.MethodPost, route)
	r := retrier{c: c, route: route, method: http.MethodPost, secret: true}
	status := 0
	defer func() { endRequest(span, status, r.resends, err) }()
	for {
		var header http.Header
		var body []byte
		status, header, body, err = c.exchange(ctx, route, http.MethodPost, c.url(route, nil), "", creds, nil)
		switch {
		case err != nil, status == http.StatusTooManyRequests, status >= 500:
			if err := r.again(ctx, status, header, body, err); err != nil {
				return "", fmt.Errorf("login: %w", err)
			}
		case status >= 200 && status < 300:
			return c.acceptToken(route, header, body)
		default:
			// The answer of the token endpoint is never quoted: it may
			// echo the credentials or carry a token.
			return "", &AuthError{Status: status, Reason: c.loginRefusal(status)}
		}
	}
}

// loginRefusal says what a refused login means and what to check.
func (c *Client) loginRefusal(status int) string {
	var why string
	switch status {
	case http.StatusBadRequest:
		why = "the ERP says the login fields are wrong"
	case http.StatusUnauthorized:
		why = "credentials were refused (wrong username or password, or the user is disabled)"
	case http.StatusForbidden:
		return "login forbidden: HTTPS, company, branch or licence problem at the ERP"
	default:
		return fmt.Sprintf("unexpected answer %d %s to the token request", status, http.StatusText(status))
	}
	if c.opt.Hints.Credentials != "" {
		why += "; check " + c.opt.Hints.Credentials
	}
	return why
}

func (c *Client) acceptToken(route string, header http.Header, body []byte) (string, error) {
	var tr tokenResponse
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&tr); err != nil {
		return "", c.notAToken(route, "token response is not JSON", header, body)
	}
	if tr.AccessToken == "" {
		return "", c.notAToken(route, "token response has no access_token", header, body)
	}
	// A lifetime that is missing, not a number or absurd is not trusted:
	// renewing early costs a login, trusting it costs a 401 mid-page.
	secs := 300.0
	if s, ok := scalarText(tr.ExpiresIn); ok {
		if v, err := strconv.ParseFloat(s, 64); err == nil && v > 0 {
			secs = min(v, 24*3600)
		}
	}
	ttl := time.Duration(secs * float64(time.Second))
	c.token = tr.AccessToken
	c.expires = time.Now().Add(ttl - renewMargin(ttl))
	company, _ := scalarText(tr.CompanyID)
	branch, _ := scalarText(tr.BranchID)
	if company != "" {
		c.identity = &Identity{CompanyID: company, BranchID: branch}
	}
	c.log.Debug("erp login succeeded", "expires_in", ttl)
	return c.token, nil
}

// notAToken is a login answered with success but no token: most often a
// base URL that is not the ERP's API (a web front that answers 200 to
// every path). It names the URL and says what came back, its type and
// shape, but quotes none of its values: an answer to a password POST may
// echo the password, or carry a token under another name.
func (c *Client) notAToken(route, why string, header http.Header, body []byte) error {
	base := *c.base
	base.User = nil
	return fmt.Errorf("login: %s (POST %s answered %s): the base URL %s may not point at the ERP's API",
		why, route, answerShape(header, body, c.opt.Password, c.opt.ClientSecret), base.String())
}

var htmlTitle = regexp.MustCompile(`(?is)<title[^>]*>(.*?)</title>`)

// answerShape describes an answer without its values: its content type,
// and the keys of a JSON object or the title of an HTML page, any that
// holds one of secrets withheld.
func answerShape(header http.Header, body []byte, secrets ...string) string {
	shown := func(s string) string {
		s = truncate(strings.Join(strings.Fields(s), " "), 60)
		for _, secret := range secrets {
			if secret != "" && strings.Contains(s, secret) {
				return "(withheld)"
			}
		}
		return s
	}
	ctype := "no content type"
	if mt, _, err := mime.ParseMediaType(header.Get("Content-Type")); err == nil {
		ctype = shown(mt)
	}
	var obj map[string]json.RawMessage
	title := htmlTitle.FindSubmatch(body)
	switch {
	case json.Unmarshal(body, &obj) == nil && obj != nil:
		keys := slices.Sorted(maps.Keys(obj))
		for i, k := range keys {
			keys[i] = shown(k)
		}
		if len(keys) > 8 {
			keys = append(keys[:8], "...")
		}
		return fmt.Sprintf("%s, a JSON object with keys [%s]", ctype, strings.Join(keys, ", "))
	case title != nil:
		return fmt.Sprintf("%s, a page titled %q", ctype, shown(string(title[1])))
	}
	return fmt.Sprintf("%s, %d bytes", ctype, len(body))
}

// Close revokes the token (best effort) and forgets it.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	tok := c.token
	c.token = ""
	c.mu.Unlock()
	if tok == "" {
		return nil
	}
	const route = "/api/auth/revoke/"
	ctx, span := startRequest(ctx, http.MethodPost, route)
	status, _, _, err := c.exchange(ctx, route, http.MethodPost, c.url(route, nil), "Bearer "+tok, []byte("{}"), nil)
	endRequest(span, status, 0, err)
	if err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	if status < 200 || status >= 300 {
		return fmt.Errorf("revoke token: %d %s", status, http.StatusText(status))
	}
	return nil
}

// retryAfter parses Retry-After as seconds or an HTTP date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	// Waits are capped far beyond any sane value (a year) so that huge
	// numbers cannot overflow into negative, i.e. immediate, retries.
	const ceiling = 365 * 24 * time.Hour
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs >= 0 {
		return min(time.Duration(min(secs, int64(ceiling/time.Second)))*time.Second, ceiling), true
	}
	if t, err := http.ParseTime(v); err == nil {
		if t.Sub(now) >= ceiling {
			return ceiling, true
		}
		// An HTTP date has whole seconds: round up so we never come back
		// before the server allows it.
		return max(t.Sub(now).Truncate(time.Second)+time.Second, 0), true
	}
	return 0, false
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// excerpt is a short, single-line start of a body for error messages.
func excerpt(b []byte) string {
	const max = 200
	s := strings.Join(strings.Fields(string(b)), " ")
	if s == "" {
		return "(empty body)"
	}
	return truncate(s, max)
}

// RouteLabel turns a path into a low-cardinality label: segments that
// carry an id become {pk}.
func RouteLabel(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if strings.ContainsAny(p, "0123456789") {
			parts[i] = "{pk}"
		}
	}
	return strings.Join(parts, "/")
}
