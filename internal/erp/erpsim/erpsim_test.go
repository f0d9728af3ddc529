package erpsim

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/shopspring/decimal"
)

type resp struct {
	status int
	body   []byte
	header http.Header
}

func newSim(t *testing.T, o Options) (*Sim, *httptest.Server) {
	t.Helper()
	s := New(o)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

func do(t *testing.T, c *http.Client, method, u, auth string, body string) (resp, error) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if c == nil {
		c = http.DefaultClient
	}
	res, err := c.Do(req)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return resp{}, err
	}
	return resp{res.StatusCode, b, res.Header}, nil
}

func mustDo(t *testing.T, method, u, auth, body string) resp {
	t.Helper()
	r, err := do(t, nil, method, u, auth, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func get(t *testing.T, srv *httptest.Server, path, tok string) resp {
	t.Helper()
	return mustDo(t, "GET", srv.URL+path, "Bearer "+tok, "")
}

func login(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	r := mustDo(t, "POST", srv.URL+"/api/auth/token/", "", `{"username":"erpsync","password":"erpsync-demo-password"}`)
	if r.status != 200 {
		t.Fatalf("login: %d %s", r.status, r.body)
	}
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(r.body, &tr); err != nil {
		t.Fatal(err)
	}
	return tr.AccessToken
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return m
}

func TestLogin(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		setup  func(*Sim)
		status int
		retry  string
	}{
		{"ok", `{"username":"erpsync","password":"erpsync-demo-password"}`, nil, 200, ""},
		{"wrong password", `{"username":"erpsync","password":"nope"}`, nil, 401, ""},
		{"wrong user", `{"username":"x","password":"erpsync-demo-password"}`, nil, 401, ""},
		{"malformed", `{"username":`, nil, 400, ""},
		{"missing password", `{"username":"erpsync"}`, nil, 400, ""},
		{"forbidden", `{"username":"erpsync","password":"erpsync-demo-password"}`, func(s *Sim) { s.SetForbidLogin(true) }, 403, ""},
		{"forbidden needs good credentials", `{"username":"erpsync","password":"bad"}`, func(s *Sim) { s.SetForbidLogin(true) }, 401, ""},
		{"rate limited", `{"username":"erpsync","password":"erpsync-demo-password"}`, func(s *Sim) { s.RateLimitLogins(1, 1500*time.Millisecond) }, 429, "2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, srv := newSim(t, Options{CompanyID: 3, BranchID: 9, TokenTTL: 90500 * time.Millisecond})
			if tc.setup != nil {
				tc.setup(s)
			}
			r := mustDo(t, "POST", srv.URL+"/api/auth/token/", "", tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d want %d: %s", r.status, tc.status, r.body)
			}
			if tc.retry != "" && r.header.Get("Retry-After") != tc.retry {
				t.Fatalf("Retry-After %q want %q", r.header.Get("Retry-After"), tc.retry)
			}
			if tc.status != 200 {
				if _, ok := decode(t, r.body)["detail"]; !ok {
					t.Fatalf("no detail in %s", r.body)
				}
				if s.ActiveTokens() != 0 {
					t.Fatal("token issued on failure")
				}
				return
			}
			m := decode(t, r.body)
			tok, _ := m["access_token"].(string)
			if len(tok) != 40 || strings.Trim(tok, "0123456789abcdef") != "" {
				t.Fatalf("token %q", tok)
			}
			if m["token_type"] != "Bearer" || m["expires_in"].(json.Number) != "91" ||
				m["company_id"].(json.Number) != "3" || m["branch_id"].(json.Number) != "9" {
				t.Fatalf("token response %s", r.body)
			}
			if _, err := time.Parse(time.RFC3339, m["expires_at"].(string)); err != nil {
				t.Fatal(err)
			}
			me := get(t, srv, "/api/auth/me/", tok)
			if me.status != 200 || string(me.body) != `{"id":7,"username":"erpsync","company_id":3,"branch_id":9}` {
				t.Fatalf("me: %d %s", me.status, me.body)
			}
			if s.ActiveTokens() != 1 {
				t.Fatal("ActiveTokens")
			}
		})
	}
}

func TestRateLimitLoginsThenOK(t *testing.T) {
	s, srv := newSim(t, Options{})
	s.RateLimitLogins(2, 0)
	for i := range 2 {
		r := mustDo(t, "POST", srv.URL+"/api/auth/token/", "", `{"username":"erpsync","password":"erpsync-demo-password"}`)
		if r.status != 429 || r.header.Get("Retry-After") != "1" {
			t.Fatalf("login %d: %d %q", i, r.status, r.header.Get("Retry-After"))
		}
	}
	login(t, srv)
}

func TestAuthRequired(t *testing.T) {
	s, srv := newSim(t, Options{ClientID: "cid", ClientSecret: "sekret"})
	tok := login(t, srv)
	tests := []struct {
		auth   string
		status int
	}{
		{"", 401},
		{"Bearer ", 401},
		{"Bearer deadbeef", 401},
		{"Bearer " + tok, 200},
		{"ERPPlugin cid.sekret", 200},
		{"ERPPlugin cid.wrong", 401},
		{"Other cid.sekret", 401},
	}
	for _, tc := range tests {
		r := mustDo(t, "GET", srv.URL+"/accounts/api/cashboxes/", tc.auth, "")
		if r.status != tc.status {
			t.Errorf("auth %q: %d want %d", tc.auth, r.status, tc.status)
		}
		if tc.status == 401 && string(r.body) != `{"detail":"token missing, invalid or expired"}` {
			t.Errorf("401 body %s", r.body)
		}
	}
	if r := mustDo(t, "GET", srv.URL+"/api/auth/me/", "ERPPlugin cid.sekret", ""); r.status != 200 {
		t.Errorf("me with plugin: %d", r.status)
	}
	// The authorization header is kept verbatim in the log.
	found := false
	for _, q := range s.Requests() {
		if q.Authorization == "ERPPlugin cid.sekret" {
			found = true
		}
	}
	if !found {
		t.Fatal("plugin header not recorded")
	}
}

type invPage struct {
	OK         bool              `json:"ok"`
	Data       []json.RawMessage `json:"data"`
	Pagination struct {
		HasNext    bool    `json:"has_next"`
		NextCursor *string `json:"next_cursor"`
	} `json:"pagination"`
}

// walk follows the cursor chain and returns the ids, cursors and raw bodies.
func walk(t *testing.T, srv *httptest.Server, tok string, pageSize int) (ids []int64, cursors []string, bodies [][]byte) {
	t.Helper()
	q := url.Values{"page_size": {strconv.Itoa(pageSize)}}
	for range 100000 {
		r := get(t, srv, "/sales/api/invoices/list/?"+q.Encode(), tok)
		if r.status != 200 {
			t.Fatalf("page: %d %s", r.status, r.body)
		}
		bodies = append(bodies, r.body)
		var p invPage
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatal(err)
		}
		for _, d := range p.Data {
			var v struct{ ID int64 }
			if err := json.Unmarshal(d, &v); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, v.ID)
		}
		if !p.Pagination.HasNext {
			if p.Pagination.NextCursor != nil {
				t.Fatal("next_cursor on last page")
			}
			return
		}
		cursors = append(cursors, *p.Pagination.NextCursor)
		q.Set("cursor", *p.Pagination.NextCursor)
	}
	t.Fatal("no end")
	return
}

func TestCursorPaging(t *testing.T) {
	for _, tc := range []struct{ n, ps, want int }{{237, 20, 20}, {250, 0, 25}, {250, 1000, 100}, {0, 10, 10}, {40, 10, 10}} {
		t.Run(strconv.Itoa(tc.n)+"/"+strconv.Itoa(tc.ps), func(t *testing.T) {
			s, srv := newSim(t, Options{Invoices: max(tc.n, -1)})
			if tc.n == 0 {
				s.MutateInvoices(func([]Invoice) []Invoice { return nil })
			}
			tok := login(t, srv)
			ids, cursors, _ := walk(t, srv, tok, tc.ps)
			inv := s.Invoices()
			if len(ids) != len(inv) {
				t.Fatalf("walked %d ids, have %d invoices", len(ids), len(inv))
			}
			for i := range ids {
				if ids[i] != inv[i].ID || ids[i] != int64(1001+i) {
					t.Fatalf("id %d = %d", i, ids[i])
				}
			}
			wantPages := max((tc.n+tc.want-1)/tc.want, 1)
			if len(cursors) != wantPages-1 {
				t.Fatalf("%d cursors, want %d", len(cursors), wantPages-1)
			}
			for _, c := range cursors {
				if !strings.ContainsAny(c, "+/=") || url.QueryEscape(c) == c {
					t.Fatalf("cursor %q does not need URL-encoding", c)
				}
			}
		})
	}
}

func TestCursorErrors(t *testing.T) {
	s, srv := newSim(t, Options{Invoices: 30})
	tok := login(t, srv)
	_, cursors, _ := walk(t, srv, tok, 10)
	c := cursors[0]
	const invalid = `{"ok":false,"error":"invalid cursor"}`
	tests := []struct {
		name, query string
		status      int
		body        string
	}{
		{"unencoded cursor", "page_size=10&cursor=" + c, 400, invalid},
		{"garbage", "cursor=" + url.QueryEscape("nope"), 400, invalid},
		{"empty", "cursor=", 400, invalid},
		{"tampered", "cursor=" + url.QueryEscape(s.cursor(1, 3)[:8]+"AAAA"+s.cursor(1, 3)[12:]), 400, invalid},
		{"page", "page=2", 400, ""},
		{"offset", "offset=10", 400, ""},
		{"good", "page_size=10&cursor=" + url.QueryEscape(c), 200, ""},
	}
	for _, tc := range tests {
		r := get(t, srv, "/sales/api/invoices/list/?"+tc.query, tok)
		if r.status != tc.status || (tc.body != "" && string(r.body) != tc.body) {
			t.Errorf("%s: %d %s", tc.name, r.status, r.body)
		}
	}
	s.InvalidateCursors()
	r := get(t, srv, "/sales/api/invoices/list/?page_size=10&cursor="+url.QueryEscape(c), tok)
	if r.status != 400 || string(r.body) != invalid {
		t.Fatalf("after InvalidateCursors: %d %s", r.status, r.body)
	}
	// A new sweep works and issues new-generation cursors.
	ids, cursors2, _ := walk(t, srv, tok, 10)
	if len(ids) != 30 || cursors2[0] == c {
		t.Fatalf("new sweep: %d ids, cursor %q", len(ids), cursors2[0])
	}
}

func TestMoneyExactDigits(t *testing.T) {
	s, srv := newSim(t, Options{Invoices: 3})
	tok := login(t, srv)
	big := decimal.RequireFromString("123456789012345678.123456")
	s.MutateInvoices(func(in []Invoice) []Invoice {
		in[0].TotalBC = big
		in[1].Raw = json.RawMessage(`{"number":"NO-ID","total_bc":"abc"}`)
		return in
	})
	want := big.Add(s.Invoices()[2].TotalBC)
	if !s.InvoiceTotal().Equal(want) {
		t.Fatalf("InvoiceTotal %s want %s", s.InvoiceTotal(), want)
	}
	for _, asString := range []bool{false, true} {
		s.SetMoneyAsString(asString)
		r := get(t, srv, "/sales/api/invoices/list/", tok)
		wantFrag := `"total_bc":123456789012345678.123456,`
		if asString {
			wantFrag = `"total_bc":"123456789012345678.123456",`
		}
		if !bytes.Contains(r.body, []byte(wantFrag)) {
			t.Fatalf("asString=%v: %s", asString, r.body)
		}
		if !bytes.Contains(r.body, []byte(`,{"number":"NO-ID","total_bc":"abc"},`)) {
			t.Fatalf("raw record not verbatim: %s", r.body)
		}
		if !bytes.HasPrefix(r.body, []byte(`{"ok":true,"data":[{"id":1001,"number":"INV-2026-000001","date":"2026-01-01","customer":{"id":`)) {
			t.Fatalf("invoice shape: %s", r.body)
		}
		// Other routes follow the same money format.
		cb := get(t, srv, "/accounts/api/cashboxes/", tok)
		if got := bytes.Contains(cb.body, []byte(`"balance":"`)); got != asString {
			t.Fatalf("cashbox balance asString=%v: %s", asString, cb.body)
		}
	}
}

func TestGeneratedInvoices(t *testing.T) {
	a, b := New(Options{Seed: 7}).Invoices(), New(Options{Seed: 7}).Invoices()
	if len(a) != 250 {
		t.Fatalf("%d invoices", len(a))
	}
	lo, hi := decimal.RequireFromString("1.00"), decimal.RequireFromString("99999.99")
	for i := range a {
		if a[i].Number != b[i].Number || !a[i].TotalBC.Equal(b[i].TotalBC) {
			t.Fatal("not deterministic")
		}
		if a[i].TotalBC.LessThan(lo) || a[i].TotalBC.GreaterThan(hi) || a[i].TotalBC.Exponent() != -2 {
			t.Fatalf("total %s", a[i].TotalBC)
		}
	}
	if len(New(Options{Invoices: -1}).Invoices()) != 0 {
		t.Fatal("negative invoices")
	}
}

func TestCurrencies(t *testing.T) {
	noneEnabled := defaultCurrencies()
	for i := range noneEnabled {
		noneEnabled[i].SystemEnabled = false
	}
	tests := []struct {
		name  string
		set   []Currency
		query string
		want  string
	}{
		{"all", nil, "?scope=all", "USD,EUR,GBP,JPY,CHF"},
		{"enabled", nil, "", "USD,EUR,GBP,CHF"},
		{"none enabled", noneEnabled, "", "USD"},
		{"none enabled all", noneEnabled, "?scope=all", "USD,EUR,GBP,JPY,CHF"},
		{"empty", []Currency{}, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, srv := newSim(t, Options{})
			if tc.set != nil {
				s.SetCurrencies(tc.set)
			}
			tok := login(t, srv)
			r := get(t, srv, "/accounts/api/currencies/"+tc.query, tok)
			var env struct {
				OK   bool             `json:"ok"`
				Data []map[string]any `json:"data"`
			}
			if err := json.Unmarshal(r.body, &env); err != nil || !env.OK || env.Data == nil {
				t.Fatalf("%s %v", r.body, err)
			}
			var codes []string
			for _, c := range env.Data {
				codes = append(codes, c["code"].(string))
			}
			if got := strings.Join(codes, ","); got != tc.want {
				t.Fatalf("got %s want %s", got, tc.want)
			}
		})
	}
	s, srv := newSim(t, Options{})
	tok := login(t, srv)
	s.SetCurrencyRate("EUR", "0.93")
	r := get(t, srv, "/accounts/api/currencies/", tok)
	wantEUR := `{"id":2,"code":"EUR","currency_code":"EUR","name":"Euro","currency_name":"Euro","exchange_rate":"0.93","has_exchange_rate":true,"requires_exchange_rate":true,"is_base_currency":false,"is_system_enabled":true,"is_active":true,"decimal_places":2}`
	wantUSD := `"exchange_rate":"1.000000","has_exchange_rate":false,"requires_exchange_rate":false,"is_base_currency":true`
	if !bytes.Contains(r.body, []byte(wantEUR)) || !bytes.Contains(r.body, []byte(wantUSD)) {
		t.Fatalf("currency shape: %s", r.body)
	}
	if s.Currencies()[1].ExchangeRate != "0.93" {
		t.Fatal("Currencies copy")
	}
}

func TestListEnvelopes(t *testing.T) {
	for _, env := range []Envelope{EnvelopeData, EnvelopeArray, EnvelopeResults, EnvelopeDataTables} {
		t.Run(string(env), func(t *testing.T) {
			s, srv := newSim(t, Options{PageSizeCap: 5})
			s.SetListEnvelope(env)
			tok := login(t, srv)
			for route, n := range oneListRoutes {
				var recs []map[string]any
				next := srv.URL + route
				pages := 0
				for next != "" {
					pages++
					r := mustDo(t, "GET", next, "Bearer "+tok, "")
					if r.status != 200 {
						t.Fatalf("%s: %d %s", next, r.status, r.body)
					}
					next = ""
					switch env {
					case EnvelopeArray:
						if err := json.Unmarshal(r.body, &recs); err != nil {
							t.Fatalf("%s: %s", route, r.body)
						}
					case EnvelopeData:
						var e struct {
							OK   *bool
							Data []map[string]any
						}
						if err := json.Unmarshal(r.body, &e); err != nil || e.OK == nil || !*e.OK {
							t.Fatalf("%s: %s", route, r.body)
						}
						recs = e.Data
					case EnvelopeDataTables:
						var e struct {
							Draw            *int
							RecordsTotal    int
							RecordsFiltered int
							Data            []map[string]any
						}
						if err := json.Unmarshal(r.body, &e); err != nil || e.Draw == nil || e.RecordsTotal != n || e.RecordsFiltered != n {
							t.Fatalf("%s: %s", route, r.body)
						}
						recs = e.Data
					case EnvelopeResults:
						var e struct {
							Count    int
							Next     *string
							Previous *string
							Results  []map[string]any
						}
						if err := json.Unmarshal(r.body, &e); err != nil || e.Count != n || e.Previous != nil {
							t.Fatalf("%s: %s", route, r.body)
						}
						recs = append(recs, e.Results...)
						if e.Next != nil {
							u, err := url.Parse(*e.Next)
							if err != nil || u.Host != strings.TrimPrefix(srv.URL, "http://") || u.Scheme != "http" {
								t.Fatalf("next %q", *e.Next)
							}
							next = *e.Next
						}
					}
				}
				if len(recs) != n {
					t.Fatalf("%s: %d records want %d", route, len(recs), n)
				}
				seen := map[string]bool{}
				for _, rec := range recs {
					id := string(mustJSON(t, rec["id"]))
					if rec["id"] == nil || seen[id] {
						t.Fatalf("%s: bad id %v", route, rec["id"])
					}
					seen[id] = true
				}
				if env == EnvelopeResults && pages != (n+4)/5 {
					t.Fatalf("%s: %d pages", route, pages)
				}
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestJournalEntriesDataTables(t *testing.T) {
	_, srv := newSim(t, Options{PageSizeCap: 20, DefaultPageSize: 7})
	tok := login(t, srv)
	var all []string
	for start := 0; ; {
		r := get(t, srv, "/accounts/api/journal-entries/?draw=4&length=100&start="+strconv.Itoa(start), tok)
		var e struct {
			Draw         int
			RecordsTotal int
			Data         []struct {
				ID                      string
				TotalDebit, TotalCredit json.Number `json:"-"`
			}
		}
		if err := json.Unmarshal(r.body, &e); err != nil || e.Draw != 4 || e.RecordsTotal != 30 {
			t.Fatalf("%s", r.body)
		}
		if len(e.Data) == 0 {
			break
		}
		if len(e.Data) > 20 {
			t.Fatal("length not capped")
		}
		for _, d := range e.Data {
			all = append(all, d.ID)
		}
		start += len(e.Data)
	}
	if len(all) != 30 || all[0] != "JE-000001" || all[29] != "JE-000030" {
		t.Fatalf("%v", all)
	}
	r := get(t, srv, "/accounts/api/journal-entries/", tok)
	m := decode(t, r.body)
	if m["draw"].(json.Number) != "1" || len(m["data"].([]any)) != 7 {
		t.Fatalf("defaults: %s", r.body)
	}
}

func TestDetailRoutes(t *testing.T) {
	_, srv := newSim(t, Options{BranchID: 4})
	tok := login(t, srv)
	tests := []struct {
		path   string
		status int
		check  func(t *testing.T, m map[string]any)
	}{
		{"/accounts/api/journal-entries/JE-000003/journal-preview/", 200, balanced},
		{"/accounts/api/payment-vouchers/PV-000012/journal-preview/", 200, balanced},
		{"/accounts/api/receipt-vouchers/RV-000001/journal-preview/", 200, balanced},
		{"/accounts/api/receipt-vouchers/PV-000001/journal-preview/", 404, nil},
		{"/accounts/api/journal-entries/JE-999999/journal-preview/", 404, nil},
		{"/accounts/api/cashboxes/2/access/", 200, func(t *testing.T, m map[string]any) {
			u := m["data"].([]any)[0].(map[string]any)
			if u["username"] == nil || u["user_id"] == nil || u["can_view"] != true {
				t.Fatalf("%v", u)
			}
		}},
		{"/accounts/api/cashboxes/99/access/", 404, nil},
		{"/accounts/api/cashboxes/x/access/", 404, nil},
		{"/accounts/api/balance-sheet-tree/?date_to=2026-03-31", 200, func(t *testing.T, m map[string]any) {
			roots := m["data"].([]any)
			bal := func(n any) decimal.Decimal {
				return decimal.RequireFromString(string(n.(map[string]any)["balance"].(json.Number)))
			}
			if len(roots) != 3 || !bal(roots[0]).Equal(bal(roots[1]).Add(bal(roots[2]))) {
				t.Fatalf("tree %v", roots)
			}
			var check func(n any)
			check = func(n any) {
				kids := n.(map[string]any)["children"].([]any)
				if len(kids) == 0 {
					return
				}
				sum := decimal.Zero
				for _, k := range kids {
					sum = sum.Add(bal(k))
					check(k)
				}
				if !sum.Equal(bal(n)) {
					t.Fatalf("node %v", n)
				}
			}
			for _, r := range roots {
				check(r)
			}
		}},
		{"/accounts/api/balance-sheet-tree/?date_to=yesterday", 400, nil},
		{"/messaging/api/stats/", 200, func(t *testing.T, m map[string]any) {
			if m["data"].(map[string]any)["sent"] == nil {
				t.Fatal("stats")
			}
		}},
		{"/messaging/api/settings/", 200, func(t *testing.T, m map[string]any) {
			if m["data"].(map[string]any)["api_key"] != "sim-secret-do-not-sync" {
				t.Fatal("settings")
			}
		}},
		{"/accounts/api/cashboxes/", 200, func(t *testing.T, m map[string]any) {
			c := m["data"].([]any)[0].(map[string]any)
			if c["name"] != "Main till" || c["branch_id"].(json.Number) != "4" || c["type"] != "cash" {
				t.Fatalf("%v", c)
			}
		}},
		{"/nope/", 404, nil},
		{"/accounts/api/cashboxes", 404, nil},
	}
	for _, tc := range tests {
		r := get(t, srv, tc.path, tok)
		if r.status != tc.status {
			t.Errorf("%s: %d want %d %s", tc.path, r.status, tc.status, r.body)
			continue
		}
		if tc.status == 404 && string(r.body) != `{"detail":"not found"}` {
			t.Errorf("%s: %s", tc.path, r.body)
		}
		if tc.check != nil {
			tc.check(t, decode(t, r.body))
		}
	}
}

func balanced(t *testing.T, m map[string]any) {
	lines := m["data"].(map[string]any)["lines"].([]any)
	d, c := decimal.Zero, decimal.Zero
	for _, l := range lines {
		lm := l.(map[string]any)
		d = d.Add(decimal.RequireFromString(string(lm["debit"].(json.Number))))
		c = c.Add(decimal.RequireFromString(string(lm["credit"].(json.Number))))
	}
	if len(lines) < 2 || !d.Equal(c) || d.IsZero() {
		t.Fatalf("unbalanced %v", lines)
	}
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name   string
		f      Faults
		check  func(t *testing.T, r resp, err error)
		faulty int // which of the requests 1..4 fails
	}{
		{"429 seconds", Faults{RateLimitEvery: 2, RetryAfter: 2100 * time.Millisecond}, func(t *testing.T, r resp, err error) {
			if err != nil || r.status != 429 || r.header.Get("Retry-After") != "3" {
				t.Fatalf("%v %d %q", err, r.status, r.header.Get("Retry-After"))
			}
		}, 2},
		{"429 default", Faults{RateLimitEvery: 3}, func(t *testing.T, r resp, err error) {
			if err != nil || r.status != 429 || r.header.Get("Retry-After") != "1" {
				t.Fatalf("%v %d %q", err, r.status, r.header.Get("Retry-After"))
			}
		}, 3},
		{"429 http date", Faults{RateLimitEvery: 2, RetryAfter: 5 * time.Second, RetryAfterHTTPDate: true}, func(t *testing.T, r resp, err error) {
			if err != nil || r.status != 429 {
				t.Fatalf("%v %d", err, r.status)
			}
			at, perr := http.ParseTime(r.header.Get("Retry-After"))
			if perr != nil {
				t.Fatalf("Retry-After %q: %v", r.header.Get("Retry-After"), perr)
			}
			if d := time.Until(at); d < 4*time.Second || d > 7*time.Second {
				t.Fatalf("Retry-After in %v", d)
			}
		}, 2},
		{"503", Faults{ServerErrorEvery: 2}, func(t *testing.T, r resp, err error) {
			if err != nil || r.status != 503 || string(r.body) != `{"detail":"unavailable"}` {
				t.Fatalf("%v %d %s", err, r.status, r.body)
			}
		}, 2},
		{"drop", Faults{DropEvery: 2}, func(t *testing.T, r resp, err error) {
			if err == nil {
				t.Fatalf("no error, status %d", r.status)
			}
		}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, srv := newSim(t, Options{Faults: tc.f})
			tok := login(t, srv)
			login(t, srv) // logins do not count
			// Fresh connections: the transport would silently retry a GET on a reused one.
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			for i := 1; i <= 4; i++ {
				r, err := do(t, c, "GET", srv.URL+"/accounts/api/cashboxes/", "Bearer "+tok, "")
				if i == tc.faulty || (i == 4 && tc.faulty == 2) {
					tc.check(t, r, err)
				} else if err != nil || r.status != 200 {
					t.Fatalf("request %d: %v %d", i, err, r.status)
				}
			}
			reqs := s.Requests()
			last := reqs[len(reqs)-1]
			if tc.faulty == 2 && tc.name == "drop" && last.Status != 0 {
				t.Fatalf("dropped request logged with status %d", last.Status)
			}
			s.SetFaults(Faults{})
			if r := get(t, srv, "/accounts/api/cashboxes/", tok); r.status != 200 {
				t.Fatal("faults not cleared")
			}
		})
	}
}

func TestTokenLifecycle(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, srv := newSim(t, Options{TokenTTL: time.Minute, Now: clock})
	t1, t2 := login(t, srv), login(t, srv)
	if s.ActiveTokens() != 2 {
		t.Fatal("two tokens")
	}
	// Revoke only the presented token.
	if r := mustDo(t, "POST", srv.URL+"/api/auth/revoke/", "Bearer "+t1, ""); r.status != 200 || string(r.body) != `{"ok":true}` {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if r := mustDo(t, "POST", srv.URL+"/api/auth/revoke/", "Bearer "+t1, ""); r.status != 401 {
		t.Fatalf("second revoke: %d", r.status)
	}
	if get(t, srv, "/accounts/api/cashboxes/", t1).status != 401 || get(t, srv, "/accounts/api/cashboxes/", t2).status != 200 {
		t.Fatal("revoke affected the wrong token")
	}
	if s.Revocations() != 1 || s.ActiveTokens() != 1 {
		t.Fatalf("revocations %d active %d", s.Revocations(), s.ActiveTokens())
	}
	// TTL expiry.
	mu.Lock()
	now = now.Add(61 * time.Second)
	mu.Unlock()
	if get(t, srv, "/accounts/api/cashboxes/", t2).status != 401 || s.ActiveTokens() != 0 {
		t.Fatal("TTL not enforced")
	}
	// ExpireTokens.
	t3 := login(t, srv)
	if get(t, srv, "/api/auth/me/", t3).status != 200 {
		t.Fatal("fresh token")
	}
	s.ExpireTokens()
	if get(t, srv, "/accounts/api/currencies/", t3).status != 401 || get(t, srv, "/api/auth/me/", t3).status != 401 || s.ActiveTokens() != 0 {
		t.Fatal("ExpireTokens")
	}
}

func TestWritesRecorded(t *testing.T) {
	s, srv := newSim(t, Options{})
	tok := login(t, srv)
	s.ResetRequests()
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		r := mustDo(t, m, srv.URL+"/accounts/api/journal-entries/JE-000001/post/?x=1", "Bearer "+tok, `{"ids":[1]}`)
		if r.status != 200 || string(r.body) != `{"ok":true}` {
			t.Fatalf("%s: %d %s", m, r.status, r.body)
		}
	}
	reqs := s.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		q := reqs[i]
		if q.Method != m || q.Path != "/accounts/api/journal-entries/JE-000001/post/" || q.RawQuery != "x=1" ||
			q.Status != 200 || q.Authorization != "Bearer "+tok || q.At.IsZero() {
			t.Fatalf("%+v", q)
		}
	}
}

func TestPreEncodedIdentical(t *testing.T) {
	for _, asString := range []bool{false, true} {
		s, srv := newSim(t, Options{Invoices: 537, MoneyAsString: asString})
		s.MutateInvoices(func(in []Invoice) []Invoice {
			in[5].TotalBC = decimal.RequireFromString("123456789012345678.123456")
			in[6].Raw = json.RawMessage(`{"x":1}`)
			in[7].Customer = `Quote "<&>" é`
			return in
		})
		tok := login(t, srv)
		_, _, plain := walk(t, srv, tok, 50)
		s.PreEncodeInvoicePages(50)
		s.mu.Lock()
		pe := s.pre[preKey{50, listView{company: 1}}]
		s.mu.Unlock()
		if pe == nil || len(pe.pages) != len(plain) {
			t.Fatalf("pre-encoded pages: %+v", pe)
		}
		for i := range plain {
			if !bytes.Equal(pe.pages[i], plain[i]) {
				t.Fatalf("page %d differs:\n%s\n%s", i, pe.pages[i], plain[i])
			}
		}
		_, _, served := walk(t, srv, tok, 50)
		for i := range plain {
			if !bytes.Equal(served[i], plain[i]) {
				t.Fatalf("served page %d differs", i)
			}
		}
		// Prove the bytes come from the pre-encoded buffer: mark page 1.
		s.mu.Lock()
		pe.pages[1][2] = 'O'
		s.mu.Unlock()
		_, _, marked := walk(t, srv, tok, 50)
		if !bytes.HasPrefix(marked[1], []byte(`{"Ok"`)) || !bytes.Equal(marked[0], plain[0]) {
			t.Fatalf("not served from pre-encoded bytes: %.20s", marked[1])
		}
		s.mu.Lock()
		pe.pages[1][2] = 'o'
		s.mu.Unlock()
		// Pre-encoded bytes are not served once they are stale.
		s.SetMoneyAsString(!asString)
		_, _, flipped := walk(t, srv, tok, 50)
		if bytes.Equal(flipped[0], plain[0]) {
			t.Fatal("stale pre-encoded page served after money format change")
		}
		s.SetMoneyAsString(asString)
		s.InvalidateCursors()
		_, cur, _ := walk(t, srv, tok, 50)
		if bytes.Contains(plain[0], []byte(cur[0])) {
			t.Fatal("stale cursor served after InvalidateCursors")
		}
	}
}

func TestHookLatencyAndLog(t *testing.T) {
	s, srv := newSim(t, Options{MaxRequestLog: 3})
	s.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/teapot/" {
			w.WriteHeader(http.StatusTeapot)
			return true
		}
		return false
	})
	for range 5 {
		if r := mustDo(t, "GET", srv.URL+"/teapot/", "", ""); r.status != 418 {
			t.Fatalf("hook: %d", r.status)
		}
	}
	if r := mustDo(t, "GET", srv.URL+"/other/", "", ""); r.status != 401 {
		t.Fatalf("no hook: %d", r.status)
	}
	reqs := s.Requests()
	if len(reqs) != 3 || reqs[0].Status != 418 || reqs[2].Status != 401 || reqs[2].Path != "/other/" {
		t.Fatalf("%+v", reqs)
	}
	s.SetHook(nil)

	s.SetLatency(5 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/accounts/api/cashboxes/", nil)
	start := time.Now()
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatal("expected timeout")
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("latency ignored the context")
	}
	s.SetLatency(30 * time.Millisecond)
	start = time.Now()
	mustDo(t, "GET", srv.URL+"/accounts/api/cashboxes/", "", "")
	if time.Since(start) < 30*time.Millisecond {
		t.Fatal("latency not applied")
	}
}

func TestServe(t *testing.T) {
	s := New(Options{Latency: 10 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	r := mustDo(t, "POST", "http://"+ln.Addr().String()+"/api/auth/token/", "", `{"username":"erpsync","password":"erpsync-demo-password"}`)
	if r.status != 200 {
		t.Fatalf("login via Serve: %d", r.status)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("listener still open")
	}
}

func TestConcurrent(t *testing.T) {
	s, srv := newSim(t, Options{Invoices: 300})
	tok := login(t, srv)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			switch i % 4 {
			case 0:
				for j := 0; j < 5; j++ {
					r, err := do(t, nil, "GET", srv.URL+"/sales/api/invoices/list/?page_size=30", "Bearer "+tok, "")
					if err != nil || r.status != 200 {
						t.Errorf("invoices: %v %d", err, r.status)
					}
				}
			case 1:
				s.PreEncodeInvoicePages(30)
				s.SetMoneyAsString(i%8 == 1)
			case 2:
				_, _ = do(t, nil, "GET", srv.URL+"/accounts/api/currencies/?scope=all", "Bearer "+tok, "")
				s.SetCurrencyRate("EUR", "0.95")
			case 3:
				s.SetListEnvelope(EnvelopeArray)
				_, _ = do(t, nil, "GET", srv.URL+"/accounts/api/cashboxes/", "Bearer "+tok, "")
				_ = s.Requests()
				_ = s.InvoiceTotal()
			}
		})
	}
	wg.Wait()
}

func BenchmarkPreEncode1M(b *testing.B) {
	s := New(Options{Invoices: 1_000_000})
	b.ResetTimer()
	for range b.N {
		s.PreEncodeInvoicePages(100)
	}
	n := 0
	for _, p := range s.pre[preKey{100, listView{company: 1}}].pages {
		n += len(p)
	}
	b.ReportMetric(float64(n)/1e6, "bytes/invoice")
}

func TestRouting(t *testing.T) {
	_, srv := newSim(t, Options{SlashIDs: true})
	tok := login(t, srv)
	// The client must not follow redirects: ServeMux would redirect some of these.
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		method, path string
		status       int
		body         string // exact, when set
	}{
		{"GET", "/accounts/api/journal-entries/JE%2F2026%2F000003/journal-preview/", 200, ""},
		{"GET", "/accounts/api/payment-vouchers/PV%2F2026%2F000012/journal-preview/", 200, ""},
		{"GET", "/accounts/api/receipt-vouchers/RV%2F2026%2F000001/journal-preview/", 200, ""},
		{"GET", "/accounts/api/journal-entries/JE%2f2026%2f000003/journal-preview/", 200, ""}, // lower-case escapes
		{"GET", "/accounts/api/journal-entries/JE/2026/000003/journal-preview/", 404, `{"detail":"not found"}`},
		{"GET", "/accounts/api/journal-entries/JE-000003/journal-preview/", 404, `{"detail":"not found"}`},
		{"GET", "/accounts/api/journal-entries/JE%2F2026%2F000003/journal-preview", 404, `{"detail":"not found"}`},
		{"GET", "/accounts/api/journal-entries/JE%2F2026%2F000003/journal-preview/x/", 404, `{"detail":"not found"}`},
		{"GET", "/accounts/api/cashboxes", 404, `{"detail":"not found"}`},
		{"GET", "/accounts/api/cashboxes/lookup/", 200, `{"ok":true,"data":[{"id":1,"name":"Main till","type":"cash"},{"id":2,"name":"Operating account","type":"bank"},{"id":3,"name":"Euro account","type":"bank"},{"id":4,"name":"Petty cash","type":"cash"}]}`},
		{"GET", "/accounts//api/cashboxes/", 404, `{"detail":"not found"}`},
		{"GET", "/accounts/api/x/../cashboxes/", 404, `{"detail":"not found"}`},
		{"GET", "/accounts/api/cashboxes/1/access/x/", 404, `{"detail":"not found"}`},
		{"GET", "/", 404, `{"detail":"not found"}`},
		{"HEAD", "/accounts/api/cashboxes/", 200, ""},
		{"GET", "/api/auth/token/", 405, `{"detail":"method not allowed"}`},
		{"POST", "/api/auth/me/", 405, `{"detail":"method not allowed"}`},
		{"GET", "/api/auth/revoke/", 405, `{"detail":"method not allowed"}`},
		{"GET", "/api/auth/other/", 404, `{"detail":"not found"}`},
		{"POST", "/api/auth/token", 404, `{"detail":"not found"}`},
		{"POST", "/accounts/api/journal-entries/JE%2F2026%2F000003/post/", 200, `{"ok":true}`},
	}
	for _, tc := range tests {
		r, err := do(t, c, tc.method, srv.URL+tc.path, "Bearer "+tok, "")
		if err != nil {
			t.Fatal(err)
		}
		if r.status != tc.status || (tc.body != "" && string(r.body) != tc.body) {
			t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.path, r.status, r.body, tc.status, tc.body)
		}
		if tc.status == 200 && strings.HasSuffix(tc.path, "journal-preview/") {
			balanced(t, decode(t, r.body))
		}
	}
	// The list carries the ids with their slashes.
	m := decode(t, get(t, srv, "/accounts/api/journal-entries/?length=1", tok).body)
	if id := m["data"].([]any)[0].(map[string]any)["id"]; id != "JE/2026/000001" {
		t.Fatalf("journal id %v", id)
	}
	m = decode(t, get(t, srv, "/accounts/api/payment-vouchers/", tok).body)
	if id := m["data"].([]any)[0].(map[string]any)["id"]; id != "PV/2026/000001" {
		t.Fatalf("voucher id %v", id)
	}
}

// invoicePages walks the invoice list and returns the raw records of each
// page and the raw bodies, without interpreting the records.
func invoicePages(t *testing.T, base, tok string, pageSize int) (pages [][]json.RawMessage, bodies [][]byte) {
	t.Helper()
	q := url.Values{"page_size": {strconv.Itoa(pageSize)}}
	for range 100000 {
		r := mustDo(t, "GET", base+"/sales/api/invoices/list/?"+q.Encode(), "Bearer "+tok, "")
		if r.status != 200 {
			t.Fatalf("page: %d %s", r.status, r.body)
		}
		var p invPage
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatalf("%v: %.300s", err, r.body)
		}
		pages, bodies = append(pages, p.Data), append(bodies, r.body)
		if !p.Pagination.HasNext {
			return
		}
		q.Set("cursor", *p.Pagination.NextCursor)
	}
	t.Fatal("no end")
	return
}

func TestHostileInvoices(t *testing.T) {
	cases, invs := HostileInvoiceCases(), HostileInvoices()
	if len(cases) != 9 || len(invs) != len(cases) {
		t.Fatalf("%d cases, %d invoices", len(cases), len(invs))
	}
	byName := map[string]Invoice{}
	ids := map[string]bool{}
	for i, c := range cases {
		if invs[i].Raw == nil || byName[c.Name].Raw != nil {
			t.Fatalf("case %q: no raw or duplicate name", c.Name)
		}
		byName[c.Name] = invs[i]
		if c.ID != "" && c.Name != "duplicate" {
			if ids[c.ID] {
				t.Fatalf("id %s repeated", c.ID)
			}
			ids[c.ID] = true
		}
		if c.Rejected != c.TotalBC.IsZero() {
			t.Fatalf("case %q: rejected %v with total %s", c.Name, c.Rejected, c.TotalBC)
		}
	}
	raw := func(name string) string { return string(byName[name].Raw) }
	for name, want := range map[string]string{
		"lone-surrogate":         `\ud800`,
		"money-overflow":         `"total_bc":1e999999,`,
		"numeric-overflow-field": `"score":1e999999`,
		"nul-char":               `\u0000`,
		"money-not-a-number":     `"total_bc":"12,50"`,
		"duplicate":              `{"id":1001,`,
	} {
		if !strings.Contains(raw(name), want) {
			t.Errorf("%s: %s lacks %s", name, raw(name), want)
		}
	}
	if utf8.ValidString(raw("invalid-utf8")) {
		t.Error("invalid-utf8 is valid UTF-8")
	}
	if _, ok := decode(t, byName["no-id"].Raw)["id"]; ok {
		t.Error("no-id has an id")
	}
	for _, c := range cases {
		if c.Name == "long-id" && (len(c.ID) <= 3000 || !strings.Contains(raw("long-id"), `"id":"`+c.ID+`"`)) {
			t.Errorf("long id of %d bytes", len(c.ID))
		}
	}

	s, srv := newSim(t, Options{Invoices: 100})
	tok := login(t, srv)
	normalTotal := s.InvoiceTotal()
	twin := s.Invoices()[0]
	s.SetHostileInvoices(true)
	if !s.InvoiceTotal().Equal(normalTotal) {
		t.Fatal("InvoiceTotal changed")
	}
	want := normalTotal.Sub(twin.TotalBC).Add(decimal.RequireFromString("4321.09"))
	if got := s.ExpectedInvoiceTotal(); !got.Equal(want) {
		t.Fatalf("ExpectedInvoiceTotal %s want %s", got, want)
	}
	if n := s.ExpectedInvoiceCount(); n != 100 {
		t.Fatalf("ExpectedInvoiceCount %d", n)
	}
	pages, bodies := invoicePages(t, srv.URL, tok, 10)
	hostile := map[string]int{} // raw -> page
	var normal []string
	total := 0
	for p, page := range pages {
		for _, rec := range page {
			total++
			found := false
			for _, inv := range invs {
				if bytes.Equal(rec, inv.Raw) {
					hostile[string(rec)], found = p, true
				}
			}
			if !found {
				normal = append(normal, string(rec))
			}
		}
	}
	if total != 109 || len(hostile) != 9 || len(normal) != 100 {
		t.Fatalf("%d records, %d hostile, %d normal", total, len(hostile), len(normal))
	}
	for i, n := range normal {
		if !strings.HasPrefix(n, `{"id":`+strconv.Itoa(1001+i)+`,`) {
			t.Fatalf("normal invoice %d is %s", i, n)
		}
	}
	onPages := map[int]bool{}
	for _, p := range hostile {
		onPages[p] = true
	}
	if len(onPages) < 5 {
		t.Fatalf("hostile records on %d pages only", len(onPages))
	}
	// The duplicate follows its twin on the first page.
	if !bytes.Equal(pages[0][0][:12], []byte(`{"id":1001,"`)) || !bytes.Equal(pages[0][1], byName["duplicate"].Raw) {
		t.Fatalf("first page starts %s %s", pages[0][0], pages[0][1])
	}
	// Hostile bytes are served verbatim, and pre-encoded pages agree.
	if !bytes.Contains(bytes.Join(bodies, nil), byName["invalid-utf8"].Raw) {
		t.Fatal("invalid UTF-8 not verbatim")
	}
	s.PreEncodeInvoicePages(10)
	_, pre := invoicePages(t, srv.URL, tok, 10)
	for i := range bodies {
		if !bytes.Equal(bodies[i], pre[i]) {
			t.Fatalf("pre-encoded page %d differs", i)
		}
	}
	if len(s.Invoices()) != 109 {
		t.Fatal("Invoices does not list the hostile records")
	}
	s.SetHostileInvoices(false)
	if pages, _ := invoicePages(t, srv.URL, tok, 10); len(pages) != 10 || len(s.Invoices()) != 100 ||
		!s.ExpectedInvoiceTotal().Equal(normalTotal) {
		t.Fatalf("hostile records still served: %d pages", len(pages))
	}
}

func TestHostileDetails(t *testing.T) {
	for _, asString := range []bool{false, true} {
		s, srv := newSim(t, Options{SlashIDs: true, MoneyAsString: asString})
		tok := login(t, srv)
		ids := s.HostileDetailIDs()
		preview := func(id string) resp {
			return get(t, srv, "/accounts/api/journal-entries/"+url.PathEscape(id)+"/journal-preview/", tok)
		}
		if r := preview(ids.MalformedPreview); r.status != 200 || !json.Valid(r.body) {
			t.Fatalf("before SetHostileDetails: %d %s", r.status, r.body)
		}
		s.SetHostileDetails(true)

		if r := preview(ids.MalformedPreview); r.status != 200 || json.Valid(r.body) {
			t.Fatalf("malformed preview: %d %s", r.status, r.body)
		}
		overflow := `"debit":1e999999`
		if asString {
			overflow = `"debit":"1e999999"`
		}
		r := preview(ids.OverflowLinePreview)
		if lines := decode(t, r.body)["data"].(map[string]any)["lines"].([]any); len(lines) != 4 || !bytes.Contains(r.body, []byte(overflow)) {
			t.Fatalf("overflow line: %s", r.body)
		}
		if r := preview(ids.SurrogatePreview); !bytes.Contains(r.body, []byte(`"memo":"Advance \ud800 paid"`)) {
			t.Fatalf("surrogate line: %s", r.body)
		}
		if r := preview(documentID("JE", 9, true)); r.status != 200 || bytes.Contains(r.body, []byte("memo")) {
			t.Fatalf("other previews changed: %s", r.body)
		}

		var tree []map[string]json.RawMessage
		var find func(nodes []map[string]json.RawMessage) string
		find = func(nodes []map[string]json.RawMessage) string {
			for _, n := range nodes {
				if string(n["id"]) == strconv.Itoa(ids.OverflowBalanceNode) {
					return string(n["balance"])
				}
				var kids []map[string]json.RawMessage
				_ = json.Unmarshal(n["children"], &kids)
				if b := find(kids); b != "" {
					return b
				}
			}
			return ""
		}
		body := get(t, srv, "/accounts/api/balance-sheet-tree/", tok).body
		var env struct{ Data json.RawMessage }
		if err := json.Unmarshal(body, &env); err != nil || json.Unmarshal(env.Data, &tree) != nil {
			t.Fatalf("tree: %s", body)
		}
		if b := strings.Trim(find(tree), `"`); b != "1e999999" {
			t.Fatalf("node %d balance %q", ids.OverflowBalanceNode, b)
		}

		r = get(t, srv, "/accounts/api/cashboxes/"+strconv.Itoa(ids.UserlessGrantCashbox)+"/access/", tok)
		userless := 0
		for _, g := range decode(t, r.body)["data"].([]any) {
			gm := g.(map[string]any)
			if _, ok := gm["user_id"]; !ok {
				if _, ok := gm["username"]; !ok {
					userless++
				}
			}
		}
		if r.status != 200 || userless != 1 {
			t.Fatalf("userless grant: %s", r.body)
		}
		if r := get(t, srv, "/accounts/api/cashboxes/"+strconv.Itoa(ids.GoneCashbox)+"/access/", tok); r.status != 404 {
			t.Fatalf("gone cashbox: %d", r.status)
		}
		if !bytes.Contains(get(t, srv, "/accounts/api/cashboxes/", tok).body, []byte(`{"id":4,`)) {
			t.Fatal("gone cashbox left the list")
		}
		s.SetHostileDetails(false)
		if r := preview(ids.MalformedPreview); r.status != 200 || !json.Valid(r.body) {
			t.Fatalf("after SetHostileDetails(false): %d %s", r.status, r.body)
		}
	}
}

// oneListRoutes are the one-list routes and their record counts.
var oneListRoutes = map[string]int{
	"/accounts/api/cashboxes/":               4,
	"/accounts/api/cashbox-reconciliations/": 6,
	"/accounts/api/payment-vouchers/":        12,
	"/accounts/api/receipt-vouchers/":        12,
	"/messaging/api/conversations/":          3,
	"/messaging/api/messages/":               5,
	"/messaging/api/templates/":              2,
	"/messaging/api/queue/":                  2,
}

func TestListPaging(t *testing.T) {
	type page struct {
		OK         *bool
		Data       []map[string]any
		Pagination map[string]json.RawMessage
		Count      int
		Next       *string
		Previous   *string
		Results    []map[string]any
		Draw       int
		RecordsTotal,
		RecordsFiltered int
	}
	fetch := func(t *testing.T, u, tok string) page {
		t.Helper()
		r := mustDo(t, "GET", u, "Bearer "+tok, "")
		var p page
		if r.status != 200 || json.Unmarshal(r.body, &p) != nil {
			t.Fatalf("%s: %d %s", u, r.status, r.body)
		}
		return p
	}
	for _, mode := range []ListPaging{ListPagingCursor, ListPagingDRF, ListPagingDataTables, ListPagingUnfollowable, ListPagingUnfollowableDRF} {
		t.Run(string(mode), func(t *testing.T) {
			s, srv := newSim(t, Options{})
			s.SetListPaging(mode, 2)
			tok := login(t, srv)
			for route, n := range oneListRoutes {
				var recs []map[string]any
				pages := 0
				switch mode {
				case ListPagingCursor:
					u := srv.URL + route
					for {
						pages++
						p := fetch(t, u, tok)
						recs = append(recs, p.Data...)
						var next *string
						if string(p.Pagination["has_next"]) != "true" {
							if string(p.Pagination["next_cursor"]) != "null" {
								t.Fatalf("%s: last page %v", route, p.Pagination)
							}
							break
						}
						if err := json.Unmarshal(p.Pagination["next_cursor"], &next); err != nil || next == nil {
							t.Fatalf("%s: %v", route, p.Pagination)
						}
						u = srv.URL + route + "?cursor=" + url.QueryEscape(*next)
					}
				case ListPagingDRF:
					u := srv.URL + route
					for u != "" {
						pages++
						p := fetch(t, u, tok)
						if p.Count != n || (pages == 1) != (p.Previous == nil) {
							t.Fatalf("%s: count %d previous %v", u, p.Count, p.Previous)
						}
						recs = append(recs, p.Results...)
						u = ""
						if p.Next != nil {
							if !strings.HasPrefix(*p.Next, srv.URL+route+"?") {
								t.Fatalf("next %q", *p.Next)
							}
							u = *p.Next
						}
					}
				case ListPagingDataTables:
					for start := 0; start < n; start += 2 {
						pages++
						p := fetch(t, srv.URL+route+"?draw=5&start="+strconv.Itoa(start), tok)
						if p.Draw != 5 || p.RecordsTotal != n || p.RecordsFiltered != n || len(p.Data) != min(2, n-start) {
							t.Fatalf("%s: %+v", route, p)
						}
						recs = append(recs, p.Data...)
					}
				case ListPagingUnfollowable:
					p := fetch(t, srv.URL+route, tok)
					_, hasCursor := p.Pagination["next_cursor"]
					if len(p.Data) != 2 || string(p.Pagination["has_next"]) != "true" || hasCursor {
						t.Fatalf("%s: %+v", route, p)
					}
					continue
				case ListPagingUnfollowableDRF:
					p := fetch(t, srv.URL+route, tok)
					if len(p.Results) != 2 || p.Count <= len(p.Results) || p.Next != nil {
						t.Fatalf("%s: %+v", route, p)
					}
					continue
				}
				if len(recs) != n || pages != (n+1)/2 {
					t.Fatalf("%s: %d records in %d pages", route, len(recs), pages)
				}
				seen := map[string]bool{}
				for _, rec := range recs {
					seen[string(mustJSON(t, rec["id"]))] = true
				}
				if len(seen) != n {
					t.Fatalf("%s: %d distinct ids", route, len(seen))
				}
			}
		})
	}
	// Cursor mode honours page_size, and refuses stale cursors like the invoice list.
	s, srv := newSim(t, Options{})
	s.SetListPaging(ListPagingCursor, 2)
	tok := login(t, srv)
	r := get(t, srv, "/accounts/api/payment-vouchers/?page_size=5", tok)
	m := decode(t, r.body)
	if len(m["data"].([]any)) != 5 {
		t.Fatalf("page_size ignored: %s", r.body)
	}
	c := m["pagination"].(map[string]any)["next_cursor"].(string)
	s.InvalidateCursors()
	if r := get(t, srv, "/accounts/api/payment-vouchers/?cursor="+url.QueryEscape(c), tok); r.status != 400 {
		t.Fatalf("stale cursor: %d %s", r.status, r.body)
	}
	// Back to no paging: the whole list in the envelope.
	s.SetListPaging(ListPagingNone, 0)
	if m := decode(t, get(t, srv, "/accounts/api/payment-vouchers/", tok).body); len(m["data"].([]any)) != 12 {
		t.Fatal("ListPagingNone")
	}
}

func TestCursorRefusal(t *testing.T) {
	tests := []struct {
		kind   CursorRefusal
		status int
		body   string
	}{
		{CursorRefusal400, 400, `{"ok":false,"error":"invalid cursor"}`},
		{CursorRefusal404, 404, `{"detail":"Invalid cursor"}`},
		{CursorRefusal200, 200, `{"ok":false,"error":"invalid cursor"}`},
	}
	for _, tc := range tests {
		s, srv := newSim(t, Options{Invoices: 30})
		s.SetCursorRefusal(tc.kind)
		tok := login(t, srv)
		_, cursors, _ := walk(t, srv, tok, 10)
		u := "/sales/api/invoices/list/?page_size=10&cursor=" + url.QueryEscape(cursors[0])
		if r := get(t, srv, u, tok); r.status != 200 || !bytes.HasPrefix(r.body, []byte(`{"ok":true`)) {
			t.Fatalf("fresh cursor: %d %s", r.status, r.body)
		}
		s.InvalidateCursors()
		if r := get(t, srv, u, tok); r.status != tc.status || string(r.body) != tc.body {
			t.Errorf("kind %d: %d %s", tc.kind, r.status, r.body)
		}
	}
}

func TestTokenStatus(t *testing.T) {
	s, srv := newSim(t, Options{TokenStatus: 201})
	body := `{"username":"erpsync","password":"erpsync-demo-password"}`
	r := mustDo(t, "POST", srv.URL+"/api/auth/token/", "", body)
	if r.status != 201 || decode(t, r.body)["access_token"] == nil {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if get(t, srv, "/accounts/api/cashboxes/", decode(t, r.body)["access_token"].(string)).status != 200 {
		t.Fatal("token from a 201 does not work")
	}
	s.SetTokenStatus(0)
	if r := mustDo(t, "POST", srv.URL+"/api/auth/token/", "", body); r.status != 200 {
		t.Fatalf("reset: %d", r.status)
	}
	s.SetTokenStatus(202)
	if r := mustDo(t, "POST", srv.URL+"/api/auth/token/", "", `{"username":"erpsync","password":"no"}`); r.status != 401 {
		t.Fatalf("bad login: %d", r.status)
	}
}

func TestRouteOverrides(t *testing.T) {
	s, srv := newSim(t, Options{Invoices: 5})
	tok := login(t, srv)
	const cb = "/accounts/api/cashboxes/"

	s.SetRouteStatus(cb, 403)
	s.SetRouteStatus("/accounts/api/branches/", 404)
	s.SetRouteStatus("/accounts/api/cashboxes/1/access/", 500)
	for path, want := range map[string]string{
		cb:                                  `403 {"detail":"You do not have permission to perform this action."}`,
		"/accounts/api/branches/":           `404 {"detail":"not found"}`,
		"/accounts/api/cashboxes/1/access/": `500 {"detail":"Internal Server Error"}`,
		"/accounts/api/cashboxes/2/access/": `200`,
	} {
		r := get(t, srv, path, tok)
		if got := strconv.Itoa(r.status) + " " + string(r.body); !strings.HasPrefix(got, want) {
			t.Errorf("%s: %s want %s", path, got, want)
		}
	}
	if r := get(t, srv, cb, "nope"); r.status != 401 {
		t.Fatalf("credentials come first: %d", r.status)
	}
	s.SetRouteStatus(cb, 0)
	if r := get(t, srv, cb, tok); r.status != 200 {
		t.Fatalf("cleared: %d", r.status)
	}

	// Empty lists, in each envelope.
	emptyBodies := map[string]string{
		cb:                                       `{"ok":true,"data":[]}`,
		"/sales/api/invoices/list/":              `{"ok":true,"data":[],"pagination":{"has_next":false,"next_cursor":null}}`,
		"/accounts/api/journal-entries/":         `{"draw":1,"recordsTotal":0,"recordsFiltered":0,"data":[]}`,
		"/accounts/api/currencies/":              `{"ok":true,"data":[]}`,
		"/accounts/api/balance-sheet-tree/":      `{"ok":true,"data":[]}`,
		"/accounts/api/cashboxes/2/access/":      `{"ok":true,"data":[]}`,
		"/messaging/api/queue/":                  `{"ok":true,"data":[]}`,
		"/accounts/api/payment-vouchers/":        `{"ok":true,"data":[]}`,
		"/accounts/api/cashbox-reconciliations/": `{"ok":true,"data":[]}`,
	}
	for path, want := range emptyBodies {
		s.SetEmptyList(path, true)
		if r := get(t, srv, path, tok); r.status != 200 || string(r.body) != want {
			t.Errorf("empty %s: %d %s", path, r.status, r.body)
		}
		s.SetEmptyList(path, false)
		if r := get(t, srv, path, tok); string(r.body) == want {
			t.Errorf("%s still empty", path)
		}
	}
	s.SetEmptyList(cb, true)
	for env, want := range map[Envelope]string{EnvelopeArray: `[]`, EnvelopeResults: `{"count":0,"next":null,"previous":null,"results":[]}`} {
		s.SetListEnvelope(env)
		if r := get(t, srv, cb, tok); string(r.body) != want {
			t.Errorf("empty in %s: %s", env, r.body)
		}
	}
	s.SetListEnvelope(EnvelopeData)
	s.SetEmptyList(cb, false)

	// Unknown envelope.
	s.SetUnknownEnvelope(cb, true)
	s.SetUnknownEnvelope("/sales/api/invoices/list/", true)
	for path, n := range map[string]int{cb: 4, "/sales/api/invoices/list/?page_size=3": 3} {
		var e map[string][]json.RawMessage
		r := get(t, srv, path, tok)
		if err := json.Unmarshal(r.body, &e); err != nil || len(e) != 1 || len(e["items"]) != n {
			t.Errorf("unknown envelope %s: %s", path, r.body)
		}
	}
	s.SetUnknownEnvelope(cb, false)
	s.SetUnknownEnvelope("/sales/api/invoices/list/", false)
}

func TestFieldDrift(t *testing.T) {
	s, srv := newSim(t, Options{Invoices: 5})
	tok := login(t, srv)
	const cb = "/accounts/api/cashboxes/"
	s.SetFieldDrift(cb, map[string]json.RawMessage{"zone": json.RawMessage(`{"code":"N"}`), "name": json.RawMessage(`"renamed"`)}, []string{"balance", "branch_id"})
	r := get(t, srv, cb, tok)
	var e struct{ Data []json.RawMessage }
	if err := json.Unmarshal(r.body, &e); err != nil || len(e.Data) != 4 {
		t.Fatalf("%s", r.body)
	}
	if want := `{"id":1,"name":"renamed","type":"cash","currency_code":"USD","is_active":true,"zone":{"code":"N"}}`; string(e.Data[0]) != want {
		t.Fatalf("drifted record %s", e.Data[0])
	}
	s.SetFieldDrift(cb, nil, nil)
	if !bytes.Contains(get(t, srv, cb, tok).body, []byte(`"balance":`)) {
		t.Fatal("drift not cleared")
	}

	// Invoices drift too, with their money exact, and come back to the pre-encoded pages.
	big := "123456789012345678.123456"
	s.MutateInvoices(func(in []Invoice) []Invoice {
		in[0].TotalBC = decimal.RequireFromString(big)
		return in
	})
	s.PreEncodeInvoicePages(10)
	plain := get(t, srv, "/sales/api/invoices/list/?page_size=10", tok).body
	s.SetFieldDrift("/sales/api/invoices/list/", map[string]json.RawMessage{"branch": json.RawMessage(`7`)}, []string{"status"})
	drifted := get(t, srv, "/sales/api/invoices/list/?page_size=10", tok).body
	var p invPage
	if err := json.Unmarshal(drifted, &p); err != nil || len(p.Data) != 5 {
		t.Fatalf("%s", drifted)
	}
	for _, d := range p.Data {
		if bytes.Contains(d, []byte(`"status"`)) || !bytes.HasSuffix(d, []byte(`,"branch":7}`)) {
			t.Fatalf("drifted invoice %s", d)
		}
	}
	if !bytes.Contains(drifted, []byte(`"total_bc":`+big+`,`)) {
		t.Fatalf("money not exact: %s", drifted)
	}
	s.SetFieldDrift("/sales/api/invoices/list/", nil, nil)
	if r := get(t, srv, "/sales/api/invoices/list/?page_size=10", tok).body; !bytes.Equal(r, plain) {
		t.Fatal("drift not cleared on invoices")
	}
}

func TestHugeAnswer(t *testing.T) {
	s, srv := newSim(t, Options{})
	tok := login(t, srv)
	const cb = "/accounts/api/cashboxes/"
	fetch := func(t *testing.T) (*http.Response, io.ReadCloser) {
		req, _ := http.NewRequest("GET", srv.URL+cb, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("%v %v", err, res)
		}
		return res, res.Body
	}
	// Exact sizes, small and odd, both ways.
	for _, size := range []int64{1, 21, 22, 40, 60, 61, 1000, 1085, 1086, 1087, 1088, 2200, 5000, 1 << 20} {
		for _, withLength := range []bool{false, true} {
			if withLength {
				s.SetHugeAnswerWithLength(cb, size)
			} else {
				s.SetHugeAnswer(cb, size)
			}
			res, body := fetch(t)
			b, err := io.ReadAll(body)
			body.Close()
			want := max(size, 21)
			if err != nil || int64(len(b)) != want || !json.Valid(b) || !bytes.HasPrefix(b, []byte(`{"ok":true,"data":[`)) {
				t.Fatalf("size %d: %d bytes, %v: %.80s", size, len(b), err, b)
			}
			if withLength && res.ContentLength != want {
				t.Fatalf("size %d: Content-Length %d", size, res.ContentLength)
			}
			if !withLength && (res.ContentLength != -1 || len(res.TransferEncoding) != 1 || res.TransferEncoding[0] != "chunked") {
				t.Fatalf("size %d: not chunked: %d %v", size, res.ContentLength, res.TransferEncoding)
			}
		}
	}
	// A large answer is generated while streaming: allocations stay far below its size.
	const big = 128 << 20
	s.SetHugeAnswer(cb, big)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, body := fetch(t)
	n, err := io.Copy(io.Discard, body)
	body.Close()
	runtime.ReadMemStats(&after)
	if err != nil || n != big {
		t.Fatalf("%d bytes, %v", n, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("%d MiB allocated to serve %d MiB", alloc>>20, big>>20)
	}
	s.SetHugeAnswer(cb, 0)
	if r := get(t, srv, cb, tok); r.status != 200 || len(r.body) > 2000 {
		t.Fatalf("not cleared: %d bytes", len(r.body))
	}
}

func TestMessagingPrefix(t *testing.T) {
	for prefix, base := range map[string]string{"": "/messaging", "/erp-messaging/": "/erp-messaging", "/": ""} {
		_, srv := newSim(t, Options{MessagingPrefix: prefix})
		tok := login(t, srv)
		for _, route := range []string{"/api/conversations/", "/api/messages/", "/api/templates/", "/api/queue/", "/api/stats/", "/api/settings/"} {
			if r := get(t, srv, base+route, tok); r.status != 200 {
				t.Errorf("prefix %q: %s%s: %d", prefix, base, route, r.status)
			}
		}
		if base != "/messaging" {
			if r := get(t, srv, "/messaging/api/queue/", tok); r.status != 404 {
				t.Errorf("prefix %q: default path still served", prefix)
			}
		}
	}
}

func TestFleet(t *testing.T) {
	f := NewFleet(FleetOptions{Tenants: 3, Template: Options{Invoices: 45, SlashIDs: true}})
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	if got := strings.Join(f.Names(), ","); got != "src000,src001,src002" {
		t.Fatalf("names %s", got)
	}
	if f.Tenant("src003") != nil || f.Tenant("src001") == nil {
		t.Fatal("Tenant")
	}
	loginAt := func(base string) string {
		r := mustDo(t, "POST", base+"/api/auth/token/", "", `{"username":"erpsync","password":"erpsync-demo-password"}`)
		if r.status != 200 {
			t.Fatalf("login at %s: %d %s", base, r.status, r.body)
		}
		return decode(t, r.body)["access_token"].(string)
	}
	toks := map[string]string{}
	totals := map[string]bool{}
	for _, name := range f.Names() {
		base := srv.URL + "/t/" + name
		sim := f.Tenant(name)
		tok := loginAt(base)
		toks[name] = tok
		// Invoices with cursors, as from a plain simulator.
		pages, _ := invoicePages(t, base, tok, 10)
		var ids []int64
		for _, p := range pages {
			for _, rec := range p {
				var v struct{ ID int64 }
				if err := json.Unmarshal(rec, &v); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, v.ID)
			}
		}
		if len(pages) != 5 || len(ids) != 45 || ids[44] != sim.Invoices()[44].ID {
			t.Fatalf("%s: %d pages, %d ids", name, len(pages), len(ids))
		}
		totals[sim.InvoiceTotal().String()] = true
		// Details with escaped ids, and the request log without the prefix.
		r := mustDo(t, "GET", base+"/accounts/api/journal-entries/JE%2F2026%2F000002/journal-preview/", "Bearer "+tok, "")
		if r.status != 200 {
			t.Fatalf("%s preview: %d %s", name, r.status, r.body)
		}
		balanced(t, decode(t, r.body))
		reqs := sim.Requests()
		if last := reqs[len(reqs)-1]; last.Path != "/accounts/api/journal-entries/JE/2026/000002/journal-preview/" || last.Status != 200 {
			t.Fatalf("%s log: %+v", name, last)
		}
		if reqs[0].Path != "/api/auth/token/" {
			t.Fatalf("%s log starts with %+v", name, reqs[0])
		}
	}
	if len(totals) != 3 {
		t.Fatal("tenants hold the same invoices")
	}
	// Tokens and cursors belong to one tenant.
	if r := mustDo(t, "GET", srv.URL+"/t/src001/accounts/api/cashboxes/", "Bearer "+toks["src000"], ""); r.status != 401 {
		t.Fatalf("src000's token at src001: %d", r.status)
	}
	r := mustDo(t, "GET", srv.URL+"/t/src000/sales/api/invoices/list/?page_size=10", "Bearer "+toks["src000"], "")
	c := decode(t, r.body)["pagination"].(map[string]any)["next_cursor"].(string)
	if r := mustDo(t, "GET", srv.URL+"/t/src001/sales/api/invoices/list/?page_size=10&cursor="+url.QueryEscape(c), "Bearer "+toks["src001"], ""); r.status != 400 {
		t.Fatalf("src000's cursor at src001: %d", r.status)
	}
	// Knobs are per tenant; DRF next links carry the prefix.
	f.Tenant("src002").SetListPaging(ListPagingDRF, 3)
	next := srv.URL + "/t/src002/accounts/api/payment-vouchers/"
	var got int
	for next != "" {
		r := mustDo(t, "GET", next, "Bearer "+toks["src002"], "")
		var p drfPage
		if err := json.Unmarshal(r.body, &p); err != nil || r.status != 200 {
			t.Fatalf("%s: %d %s", next, r.status, r.body)
		}
		got += len(p.Results)
		next = ""
		if p.Next != nil {
			if !strings.HasPrefix(*p.Next, srv.URL+"/t/src002/accounts/api/payment-vouchers/?page=") {
				t.Fatalf("next %s", *p.Next)
			}
			next = *p.Next
		}
	}
	if got != 12 {
		t.Fatalf("%d vouchers over DRF pages", got)
	}
	if m := decode(t, mustDo(t, "GET", srv.URL+"/t/src001/accounts/api/payment-vouchers/", "Bearer "+toks["src001"], "").body); len(m["data"].([]any)) != 12 {
		t.Fatal("paging knob leaked to another tenant")
	}
	for _, p := range []string{"/", "/t/", "/t/src009/api/auth/me/", "/t/src000", "/accounts/api/cashboxes/"} {
		if r := mustDo(t, "GET", srv.URL+p, "Bearer "+toks["src000"], ""); r.status != 404 {
			t.Errorf("%s: %d", p, r.status)
		}
	}

	// Explicit names, and Serve.
	f = NewFleet(FleetOptions{Names: []string{"east", "west"}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Serve(ctx, ln) }()
	loginAt("http://" + ln.Addr().String() + "/t/west")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if f.Tenant("west").ActiveTokens() != 1 || f.Tenant("east").ActiveTokens() != 0 {
		t.Fatal("token issued by the wrong tenant")
	}
}

func TestFleetMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 600,000 invoices")
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f := NewFleet(FleetOptions{Tenants: 200, Template: Options{Invoices: 3000}})
	runtime.GC()
	runtime.ReadMemStats(&after)
	if heap := int64(after.HeapAlloc) - int64(before.HeapAlloc); heap > 160<<20 {
		t.Fatalf("200 tenants of 3000 invoices hold %d MiB", heap>>20)
	}
	a, b := f.Tenant("src000").Invoices(), f.Tenant("src199").Invoices()
	if unsafe.StringData(a[7].Number) != unsafe.StringData(b[7].Number) {
		t.Fatal("tenants do not share invoice numbers")
	}
}

// ---- golden answers of the default options -----------------------------------
//
// testdata/default-answers.golden holds what the simulator answered, byte for
// byte, before the multi-user, scoping, label, balance-history, list-cut and
// in-flight knobs existed. With all of those at their zero values every
// answer must stay the same: other packages store payload hashes and the
// benchmark pre-encodes invoice pages. Regenerate only on purpose, with
// go test -run TestDefaultAnswersGolden -update-golden.

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/default-answers.golden")

const goldenFile = "testdata/default-answers.golden"

// goldenRoutes are the GETs of every data route kind, in a fixed order.
var goldenRoutes = []string{
	"/sales/api/invoices/list/",
	"/sales/api/invoices/list/?page_size=10",
	"/sales/api/invoices/list/?page_size=1000",
	"/accounts/api/currencies/",
	"/accounts/api/currencies/?scope=all",
	"/accounts/api/cashboxes/",
	"/accounts/api/cashboxes/lookup/",
	"/accounts/api/cashboxes/1/access/",
	"/accounts/api/cashboxes/2/access/",
	"/accounts/api/cashboxes/3/access/",
	"/accounts/api/cashboxes/4/access/",
	"/accounts/api/cashbox-reconciliations/",
	"/accounts/api/journal-entries/",
	"/accounts/api/journal-entries/?draw=3&start=20&length=50",
	"/accounts/api/journal-entries/JE-000001/journal-preview/",
	"/accounts/api/journal-entries/JE-000002/journal-preview/",
	"/accounts/api/journal-entries/JE-000003/journal-preview/",
	"/accounts/api/journal-entries/JE-000004/journal-preview/",
	"/accounts/api/journal-entries/JE%2F2026%2F000002/journal-preview/",
	"/accounts/api/journal-entries/JE%2F2026%2F000004/journal-preview/",
	"/accounts/api/payment-vouchers/",
	"/accounts/api/payment-vouchers/PV-000001/journal-preview/",
	"/accounts/api/payment-vouchers/PV%2F2026%2F000012/journal-preview/",
	"/accounts/api/receipt-vouchers/",
	"/accounts/api/receipt-vouchers/RV-000007/journal-preview/",
	"/accounts/api/balance-sheet-tree/",
	"/accounts/api/balance-sheet-tree/?date_to=2026-03-31",
	"/accounts/api/balance-sheet-tree/?date_to=2024-01-01",
	"/accounts/api/balance-sheet-tree/?date_to=31-03-2026",
	"/messaging/api/conversations/",
	"/messaging/api/messages/",
	"/messaging/api/templates/",
	"/messaging/api/queue/",
	"/messaging/api/stats/",
	"/messaging/api/settings/",
}

// goldenOneLists are the one-list routes whose envelope and paging vary.
var goldenOneLists = []string{
	"/accounts/api/cashboxes/",
	"/accounts/api/cashbox-reconciliations/",
	"/accounts/api/payment-vouchers/",
	"/accounts/api/payment-vouchers/?page=2",
	"/accounts/api/payment-vouchers/?page_size=5",
	"/accounts/api/receipt-vouchers/?draw=2&start=3&length=4",
	"/messaging/api/queue/",
}

var goldenClock = func() time.Time { return time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC) }

// goldenCase is one simulator configuration and what to ask it.
type goldenCase struct {
	name   string
	opts   Options
	setup  func(*Sim)
	routes []string
	walk   int // page size of a full invoice sweep to record, if > 0
}

func goldenCases() []goldenCase {
	var cases []goldenCase
	cases = append(cases,
		goldenCase{name: "default", routes: goldenRoutes, walk: 40},
		goldenCase{name: "money-string-slash-ids", opts: Options{MoneyAsString: true, SlashIDs: true, BranchID: 3, CompanyID: 8}, routes: goldenRoutes, walk: 40},
		goldenCase{name: "pre-encoded", opts: Options{Invoices: 95}, setup: func(s *Sim) { s.PreEncodeInvoicePages(10) }, walk: 10},
		goldenCase{name: "pre-encoded-string", opts: Options{Invoices: 95, MoneyAsString: true}, setup: func(s *Sim) { s.PreEncodeInvoicePages(25) }, walk: 25},
		goldenCase{name: "hostile-details", opts: Options{HostileDetails: true}, routes: goldenRoutes},
		goldenCase{name: "hostile-invoices", opts: Options{Invoices: 60, HostileInvoices: true}, walk: 7},
		goldenCase{name: "drift", opts: Options{Invoices: 30}, setup: func(s *Sim) {
			s.SetFieldDrift("/accounts/api/cashboxes/", map[string]json.RawMessage{"zone": json.RawMessage(`1`)}, []string{"balance"})
			s.SetFieldDrift(invoiceListPath, map[string]json.RawMessage{"status": json.RawMessage(`"x"`)}, []string{"date"})
			s.SetEmptyList("/accounts/api/payment-vouchers/", true)
			s.SetUnknownEnvelope("/accounts/api/receipt-vouchers/", true)
		}, routes: goldenRoutes, walk: 10},
	)
	for _, env := range []Envelope{EnvelopeArray, EnvelopeResults, EnvelopeDataTables} {
		cases = append(cases, goldenCase{name: "envelope-" + string(env), opts: Options{ListEnvelope: env, PageSizeCap: 5}, routes: goldenOneLists})
	}
	for _, mode := range []ListPaging{ListPagingCursor, ListPagingDRF, ListPagingDataTables, ListPagingUnfollowable, ListPagingUnfollowableDRF} {
		cases = append(cases, goldenCase{name: "paging-" + string(mode), opts: Options{ListPaging: mode, ListPageSize: 2}, routes: goldenOneLists})
	}
	return cases
}

// goldenAnswers asks every golden case its routes and returns the answers
// in the golden file's format: per answer a header line
// "=== <case> <status> <length> <route>" and the body, then a newline.
func goldenAnswers(t *testing.T) []byte {
	t.Helper()
	var out bytes.Buffer
	var host []byte // of the server in use: DRF links carry it
	add := func(c, route string, r resp) {
		r.body = bytes.ReplaceAll(r.body, host, []byte("HOST"))
		fmt.Fprintf(&out, "=== %s %d %d %s\n", c, r.status, len(r.body), route)
		out.Write(r.body)
		out.WriteByte('\n')
	}
	for _, gc := range goldenCases() {
		o := gc.opts
		o.Now = goldenClock
		s, srv := newSim(t, o)
		host = []byte(strings.TrimPrefix(srv.URL, "http://"))
		if gc.setup != nil {
			gc.setup(s)
		}
		r := mustDo(t, "POST", srv.URL+"/api/auth/token/", "", `{"username":"erpsync","password":"erpsync-demo-password"}`)
		tok := decode(t, r.body)["access_token"].(string)
		r.body = bytes.Replace(r.body, []byte(tok), []byte("TOKEN"), 1)
		add(gc.name, "/api/auth/token/", r)
		add(gc.name, "/api/auth/me/", get(t, srv, "/api/auth/me/", tok))
		for _, route := range gc.routes {
			add(gc.name, route, get(t, srv, route, tok))
		}
		if gc.walk > 0 {
			_, bodies := invoicePages(t, srv.URL, tok, gc.walk)
			for i, b := range bodies {
				add(gc.name, fmt.Sprintf("invoice sweep page %d of %d", i+1, gc.walk), resp{status: 200, body: b})
			}
		}
	}
	return out.Bytes()
}

func TestDefaultAnswersGolden(t *testing.T) {
	got := goldenAnswers(t)
	if *updateGolden {
		if err := os.WriteFile(goldenFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, want) {
		return
	}
	// Name the first answer that differs.
	gl, wl := bytes.SplitAfter(got, []byte("\n=== ")), bytes.SplitAfter(want, []byte("\n=== "))
	for i := range min(len(gl), len(wl)) {
		if !bytes.Equal(gl[i], wl[i]) {
			t.Fatalf("answer %d differs from the golden copy:\ngot  %.600s\nwant %.600s", i, gl[i], wl[i])
		}
	}
	t.Fatalf("%d answers, golden copy has %d", len(gl), len(wl))
}

// ---- several users, scopes and labels -------------------------------------------

// branchUsers are three users of company 1 in branches 2 and 5, and one of
// company 9.
var branchUsers = []User{
	{Username: "alice", Password: "pa", BranchID: 2},
	{Username: "bob", Password: "pb", BranchID: 5},
	{Username: "carol", Password: "pc", CompanyID: 1, BranchID: 2},
	{Username: "mallory", Password: "pm", CompanyID: 9, BranchID: 7},
}

func loginAs(t *testing.T, srv *httptest.Server, user, password string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"username": user, "password": password})
	r := mustDo(t, "POST", srv.URL+"/api/auth/token/", "", string(body))
	if r.status != 200 {
		t.Fatalf("login %s: %d %s", user, r.status, r.body)
	}
	return decode(t, r.body)["access_token"].(string)
}

// loginAll logs every user of branchUsers in.
func loginAll(t *testing.T, srv *httptest.Server) map[string]string {
	t.Helper()
	toks := map[string]string{}
	for _, u := range branchUsers {
		toks[u.Username] = loginAs(t, srv, u.Username, u.Password)
	}
	return toks
}

func TestUsers(t *testing.T) {
	t.Parallel()
	s, srv := newSim(t, Options{Users: branchUsers, BranchID: 3, ClientID: "cid", ClientSecret: "sekret"})
	if got := s.Branches(); !slices.Equal(got, []int{2, 5}) {
		t.Fatalf("branches %v", got)
	}
	tests := []struct {
		user, password string
		status         int
		me             string
	}{
		{"alice", "pa", 200, `{"id":7,"username":"alice","company_id":1,"branch_id":2}`},
		{"bob", "pb", 200, `{"id":8,"username":"bob","company_id":1,"branch_id":5}`},
		{"carol", "pc", 200, `{"id":9,"username":"carol","company_id":1,"branch_id":2}`},
		{"mallory", "pm", 200, `{"id":10,"username":"mallory","company_id":9,"branch_id":7}`},
		{"alice", "pb", 401, ""},                      // another user's password
		{"erpsync", "erpsync-demo-password", 401, ""}, // Options' own user is not one when Users is set
	}
	for _, tc := range tests {
		body, _ := json.Marshal(map[string]string{"username": tc.user, "password": tc.password})
		r := mustDo(t, "POST", srv.URL+"/api/auth/token/", "", string(body))
		if r.status != tc.status {
			t.Fatalf("%s/%s: %d %s", tc.user, tc.password, r.status, r.body)
		}
		if tc.status != 200 {
			continue
		}
		tr := decode(t, r.body)
		tok := tr["access_token"].(string)
		me := decode(t, []byte(tc.me))
		if tr["company_id"] != me["company_id"] || tr["branch_id"] != me["branch_id"] {
			t.Errorf("%s: token context %s", tc.user, r.body)
		}
		if got := get(t, srv, "/api/auth/me/", tok); string(got.body) != tc.me {
			t.Errorf("%s: me %s", tc.user, got.body)
		}
		// The request log names the user of each token.
		get(t, srv, "/accounts/api/cashboxes/", tok)
		reqs := s.Requests()
		if q := reqs[len(reqs)-1]; q.Username != tc.user || q.Path != "/accounts/api/cashboxes/" {
			t.Errorf("%s: logged %+v", tc.user, q)
		}
	}
	// The plugin credentials keep Options' context, and name no user.
	if r := mustDo(t, "GET", srv.URL+"/api/auth/me/", "ERPPlugin cid.sekret", ""); string(r.body) != `{"id":7,"username":"cid","company_id":1,"branch_id":3}` {
		t.Errorf("plugin me %s", r.body)
	}
	// Logins, the plugin, unknown and revoked tokens name no user.
	mustDo(t, "GET", srv.URL+"/accounts/api/cashboxes/", "Bearer nope", "")
	revoked := loginAs(t, srv, "bob", "pb")
	mustDo(t, "POST", srv.URL+"/api/auth/revoke/", "Bearer "+revoked, "")
	get(t, srv, "/accounts/api/cashboxes/", revoked)
	anonymous := 0
	for _, q := range s.Requests() {
		if q.Path == "/api/auth/token/" || q.Authorization == "Bearer nope" || q.Authorization == "ERPPlugin cid.sekret" ||
			(q.Authorization == "Bearer "+revoked && q.Path == "/accounts/api/cashboxes/") {
			anonymous++
			if q.Username != "" {
				t.Errorf("%s %q logged as %q", q.Path, q.Authorization, q.Username)
			}
		}
	}
	if anonymous != 10 {
		t.Errorf("%d anonymous requests in the log", anonymous)
	}
}

// invoiceIDsOf is the ids of invoices.
func invoiceIDsOf(inv []Invoice) []int64 {
	var ids []int64
	for _, v := range inv {
		ids = append(ids, v.ID)
	}
	return ids
}

// listIDs reads the ids of a whole-list answer ({"ok","data"}, DataTables
// or a bare array) as JSON text.
func listIDs(t *testing.T, body []byte) []string {
	t.Helper()
	var recs []map[string]json.RawMessage
	if err := json.Unmarshal(body, &recs); err != nil {
		var e struct{ Data []map[string]json.RawMessage }
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		recs = e.Data
	}
	ids := []string{}
	for _, r := range recs {
		ids = append(ids, strings.Trim(string(r["id"]), `"`))
	}
	return ids
}

func TestListScope(t *testing.T) {
	t.Parallel()
	s, srv := newSim(t, Options{Users: branchUsers, Invoices: 53, PageSizeCap: 100})
	toks := loginAll(t, srv)

	// Generated invoices are spread over branches 2 and 5 round robin.
	for i, v := range s.Invoices() {
		if v.CompanyID != 1 || v.BranchID != []int{2, 5}[i%2] {
			t.Fatalf("invoice %d: company %d branch %d", i, v.CompanyID, v.BranchID)
		}
	}
	// Move some: to branch 5, to the null branch (counted in branch 2),
	// to another company, and to the defaults (Options' branch 1, no user's).
	s.MutateInvoices(func(in []Invoice) []Invoice {
		in[0].BranchID = 5
		in[3].BranchID = -1
		in[5].CompanyID = 9
		in[7].CompanyID, in[7].BranchID = 0, 0
		return in
	})
	want := map[[2]int][]int64{} // by company and branch; branch 0: the company
	for _, v := range s.Invoices() {
		c, b := cmp.Or(v.CompanyID, 1), cmp.Or(v.BranchID, 1)
		if b < 0 {
			b = 2
		}
		want[[2]int{c, b}] = append(want[[2]int{c, b}], v.ID)
		want[[2]int{c, 0}] = append(want[[2]int{c, 0}], v.ID)
	}
	if len(want[[2]int{1, 5}]) != 24 || len(want[[2]int{1, 2}]) != 27 || len(want[[2]int{1, 1}]) != 1 {
		t.Fatalf("expected split %d %d %d", len(want[[2]int{1, 5}]), len(want[[2]int{1, 2}]), len(want[[2]int{1, 1}]))
	}

	tests := []struct {
		scope ListScope
		user  string
		view  [2]int
		// ids of other lists: payment vouchers, cashboxes, journal entries
		payments, cashboxes []string
		journals            int
	}{
		{ScopeCompany, "alice", [2]int{1, 0}, seqIDs("PV-%06d", 1, 12, 1), []string{"1", "2", "3", "4"}, 30},
		{ScopeCompany, "bob", [2]int{1, 0}, seqIDs("PV-%06d", 1, 12, 1), []string{"1", "2", "3", "4"}, 30},
		{ScopeCompany, "mallory", [2]int{9, 0}, []string{}, []string{}, 0},
		{ScopeBranch, "alice", [2]int{1, 2}, seqIDs("PV-%06d", 1, 12, 2), []string{"1", "3"}, 15},
		{ScopeBranch, "carol", [2]int{1, 2}, seqIDs("PV-%06d", 1, 12, 2), []string{"1", "3"}, 15},
		{ScopeBranch, "bob", [2]int{1, 5}, seqIDs("PV-%06d", 2, 12, 2), []string{"2", "4"}, 15},
		{ScopeBranch, "mallory", [2]int{9, 7}, []string{}, []string{}, 0},
	}
	for _, tc := range tests {
		s.SetListScope(tc.scope)
		tok := toks[tc.user]
		name := fmt.Sprintf("scope %d %s", tc.scope, tc.user)
		ids, _, _ := walk(t, srv, tok, 7)
		if !slices.Equal(ids, want[tc.view]) {
			t.Errorf("%s: invoices %v, want %v", name, ids, want[tc.view])
		}
		if tc.view[0] == 1 && !slices.Equal(invoiceIDsOf(s.InvoicesOfBranch(tc.view[1])), want[tc.view]) {
			t.Errorf("%s: InvoicesOfBranch disagrees", name)
		}
		if got := listIDs(t, get(t, srv, "/accounts/api/payment-vouchers/", tok).body); !slices.Equal(got, tc.payments) {
			t.Errorf("%s: payment vouchers %v", name, got)
		}
		for _, route := range []string{"/accounts/api/cashboxes/", "/accounts/api/cashboxes/lookup/"} {
			if got := listIDs(t, get(t, srv, route, tok).body); !slices.Equal(got, tc.cashboxes) {
				t.Errorf("%s: %s %v", name, route, got)
			}
		}
		// Reconciliations follow their cashbox (reconciliation i has cashbox (i-1)%4+1).
		for _, id := range listIDs(t, get(t, srv, "/accounts/api/cashbox-reconciliations/", tok).body) {
			n, _ := strconv.Atoi(id)
			if !slices.Contains(tc.cashboxes, strconv.Itoa((n-1)%4+1)) {
				t.Errorf("%s: reconciliation %s of another branch", name, id)
			}
		}
		if m := decode(t, get(t, srv, "/accounts/api/journal-entries/", tok).body); m["recordsTotal"].(json.Number) != json.Number(strconv.Itoa(tc.journals)) {
			t.Errorf("%s: %v journal entries", name, m["recordsTotal"])
		}
		// Previews and access lists follow their record.
		for doc, status := range map[string]int{
			"/accounts/api/journal-entries/JE-000001/journal-preview/":  previewStatus(tc.view, 2),
			"/accounts/api/journal-entries/JE-000002/journal-preview/":  previewStatus(tc.view, 5),
			"/accounts/api/payment-vouchers/PV-000004/journal-preview/": previewStatus(tc.view, 5),
			"/accounts/api/receipt-vouchers/RV-000003/journal-preview/": previewStatus(tc.view, 2),
			"/accounts/api/cashboxes/1/access/":                         previewStatus(tc.view, 2),
			"/accounts/api/cashboxes/4/access/":                         previewStatus(tc.view, 5),
		} {
			if r := get(t, srv, doc, tok); r.status != status {
				t.Errorf("%s: %s answered %d, want %d", name, doc, r.status, status)
			}
		}
	}

	// Sums per branch make up the company's.
	sum := func(inv []Invoice) decimal.Decimal {
		d := decimal.Zero
		for _, v := range inv {
			d = d.Add(v.TotalBC)
		}
		return d
	}
	if a, b, c, all := sum(s.InvoicesOfBranch(2)), sum(s.InvoicesOfBranch(5)), sum(s.InvoicesOfBranch(1)), sum(s.InvoicesOfBranch(0)); !a.Add(b).Add(c).Equal(all) {
		t.Fatalf("branch sums %s + %s + %s != %s", a, b, c, all)
	}

	// Pre-encoded pages honour the scope: a branch's pages as served plainly.
	s.SetListScope(ScopeBranch)
	_, _, plain := walk(t, srv, toks["bob"], 7)
	s.PreEncodeInvoicePages(7)
	s.mu.Lock()
	pe := s.pre[preKey{7, listView{1, 5}}]
	s.mu.Unlock()
	if pe == nil || len(pe.pages) != len(plain) {
		t.Fatalf("no pre-encoded pages for branch 5")
	}
	for i := range plain {
		if !bytes.Equal(pe.pages[i], plain[i]) {
			t.Fatalf("pre-encoded page %d differs:\n%s\n%s", i, pe.pages[i], plain[i])
		}
	}
	if ids, _, _ := walk(t, srv, toks["alice"], 7); !slices.Equal(ids, want[[2]int{1, 2}]) {
		t.Fatal("alice served bob's pre-encoded pages")
	}
}

// previewStatus is what a record of that branch of company 1 answers in a view.
func previewStatus(view [2]int, branch int) int {
	if view[0] == 1 && (view[1] == 0 || view[1] == branch) {
		return 200
	}
	return 404
}

// seqIDs formats the ids from..to (inclusive) in steps.
func seqIDs(format string, from, to, step int) []string {
	var out []string
	for i := from; i <= to; i += step {
		out = append(out, fmt.Sprintf(format, i))
	}
	return out
}

func TestRecordLabels(t *testing.T) {
	t.Parallel()
	company := func(id int) string { return fmt.Sprintf(`{"id":%d,"name":"Company %d"}`, id, id) }
	branch := func(id int) string { return fmt.Sprintf(`{"id":%d,"name":"Branch %d"}`, id, id) }
	tests := []struct {
		labels RecordLabels
		viaSet bool
		// what records end in: an invoice of branch 5, one of the null
		// branch, one of the defaults (Options' company 1 and branch 1),
		// journal entry 2 (branch 5), cashbox 1 (branch 2)
		invoice, nullInvoice, defaults, journal, cashbox string
	}{
		{LabelsNone, false, `T10:00:00Z"}`, `T10:00:00Z"}`, `T10:00:00Z"}`, `"status":"posted"}`, `"is_active":true,"branch_id":2}`},
		{LabelsIDs, false, `,"company_id":1,"branch_id":5}`, `,"company_id":1,"branch_id":null}`, `,"company_id":1,"branch_id":1}`,
			`"status":"posted","company_id":1,"branch_id":5}`, `"is_active":true,"branch_id":2,"company_id":1}`},
		{LabelsIDs, true, `,"company_id":1,"branch_id":5}`, `,"company_id":1,"branch_id":null}`, `,"company_id":1,"branch_id":1}`,
			`"status":"posted","company_id":1,"branch_id":5}`, `"is_active":true,"branch_id":2,"company_id":1}`},
		{LabelsObjects, false, `,"company":` + company(1) + `,"branch":` + branch(5) + `}`, `,"company":` + company(1) + `,"branch":null}`,
			`,"company":` + company(1) + `,"branch":` + branch(1) + `}`,
			`"status":"posted","company":` + company(1) + `,"branch":` + branch(5) + `}`,
			`"is_active":true,"branch_id":2,"company":` + company(1) + `,"branch":` + branch(2) + `}`},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d/%v", tc.labels, tc.viaSet), func(t *testing.T) {
			t.Parallel()
			o := Options{Users: branchUsers[:2], Invoices: 6, RecordLabels: tc.labels}
			if tc.viaSet {
				o.RecordLabels = LabelsObjects
			}
			s, srv := newSim(t, o)
			if tc.viaSet {
				s.SetRecordLabels(tc.labels)
			}
			s.MutateInvoices(func(in []Invoice) []Invoice {
				in[0].BranchID = -1
				in[2].CompanyID, in[2].BranchID = 0, 0
				return in
			})
			tok := login2(t, srv)
			check := func(what string, body []byte) {
				t.Helper()
				var p invPage
				if err := json.Unmarshal(body, &p); err != nil || len(p.Data) != 6 {
					t.Fatalf("%s: %s", what, body)
				}
				for i, want := range map[int]string{0: tc.nullInvoice, 1: tc.invoice, 2: tc.defaults} {
					if !bytes.HasSuffix(p.Data[i], []byte(want)) {
						t.Errorf("%s: invoice %d is %s, want it to end in %s", what, i, p.Data[i], want)
					}
				}
			}
			page := get(t, srv, "/sales/api/invoices/list/?page_size=10", tok).body
			check("invoices", page)
			// Pre-encoded pages carry the same labels, and are not served once labels change.
			s.PreEncodeInvoicePages(10)
			if again := get(t, srv, "/sales/api/invoices/list/?page_size=10", tok).body; !bytes.Equal(again, page) {
				t.Errorf("pre-encoded page differs:\n%s\n%s", again, page)
			}
			s.SetRecordLabels((tc.labels + 1) % 3)
			if again := get(t, srv, "/sales/api/invoices/list/?page_size=10", tok).body; bytes.Equal(again, page) {
				t.Error("stale pre-encoded page served after SetRecordLabels")
			}
			s.SetRecordLabels(tc.labels)

			recs := func(route string) []json.RawMessage {
				var e struct{ Data []json.RawMessage }
				if err := json.Unmarshal(get(t, srv, route, tok).body, &e); err != nil || len(e.Data) == 0 {
					t.Fatalf("%s: %v", route, err)
				}
				return e.Data
			}
			if j := recs("/accounts/api/journal-entries/")[1]; !bytes.HasSuffix(j, []byte(tc.journal)) {
				t.Errorf("journal entry %s", j)
			}
			if c := recs("/accounts/api/cashboxes/")[0]; !bytes.HasSuffix(c, []byte(tc.cashbox)) || bytes.Count(c, []byte(`"branch_id"`)) != 1 {
				t.Errorf("cashbox %s", c)
			}
			// Vouchers and reconciliations are labelled as journal entries are.
			tail := strings.TrimPrefix(tc.journal, `"status":"posted"`)
			for _, route := range []string{"/accounts/api/payment-vouchers/", "/accounts/api/receipt-vouchers/", "/accounts/api/cashbox-reconciliations/"} {
				if r := recs(route)[1]; !bytes.HasSuffix(r, []byte(tail)) || !json.Valid(r) {
					t.Errorf("%s: %s", route, r)
				}
			}
		})
	}
}

// login2 logs in as alice.
func login2(t *testing.T, srv *httptest.Server) string {
	return loginAs(t, srv, branchUsers[0].Username, branchUsers[0].Password)
}

// The invoice encoder writes labels without allocating: the same
// allocations with labels as without (those of the decimal's digits).
func TestInvoiceLabelsAllocateNothing(t *testing.T) {
	v := Invoice{ID: 1, Number: "INV-1", Date: "2026-01-01", Customer: "C", Currency: "USD", TotalBC: decimal.New(12345, -2), Status: "posted", BranchID: 5}
	buf := make([]byte, 0, 4096)
	allocs := map[RecordLabels]float64{}
	for _, mode := range []RecordLabels{LabelsNone, LabelsIDs, LabelsObjects} {
		lb := labeller{mode: mode, company: 1, branch: 1}
		allocs[mode] = testing.AllocsPerRun(200, func() { buf = appendInvoice(buf[:0], &v, false, lb) })
	}
	if allocs[LabelsIDs] != allocs[LabelsNone] || allocs[LabelsObjects] != allocs[LabelsNone] {
		t.Fatalf("allocations per invoice: %v", allocs)
	}
}

// ---- balance sheets by date -------------------------------------------------------

// treeBalances reads a balance-sheet answer into balances by code, checking
// that every parent is the sum of its children and assets = liabilities +
// equity.
func treeBalances(t *testing.T, body []byte) map[string]decimal.Decimal {
	t.Helper()
	type node struct {
		Code     string
		Balance  json.RawMessage
		Children []node
	}
	var e struct{ Data []node }
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	out := map[string]decimal.Decimal{}
	var walkTree func(n node) decimal.Decimal
	walkTree = func(n node) decimal.Decimal {
		bal := decimal.RequireFromString(strings.Trim(string(n.Balance), `"`))
		if len(n.Children) > 0 {
			sum := decimal.Zero
			for _, c := range n.Children {
				sum = sum.Add(walkTree(c))
			}
			if !sum.Equal(bal) {
				t.Fatalf("node %s: %s, children sum to %s", n.Code, bal, sum)
			}
		}
		out[n.Code] = bal
		return bal
	}
	for _, n := range e.Data {
		walkTree(n)
	}
	return out
}

// sameBalances reports whether a and b hold equal balances for the same codes.
func sameBalances(a, b map[string]decimal.Decimal) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !w.Equal(v) {
			return false
		}
	}
	return true
}

func fixedClock(at time.Time) func() time.Time { return func() time.Time { return at } }

func TestBalanceSheetHistory(t *testing.T) {
	t.Parallel()
	s, srv := newSim(t, Options{Users: branchUsers, BalanceSheetHistory: true, Now: fixedClock(time.Date(2026, 5, 15, 12, 0, 0, 0, time.UTC))})
	toks := loginAll(t, srv)
	tree := func(user, dateTo string) map[string]decimal.Decimal {
		t.Helper()
		r := get(t, srv, "/accounts/api/balance-sheet-tree/?date_to="+dateTo, toks[user])
		if r.status != 200 {
			t.Fatalf("%s %s: %d %s", user, dateTo, r.status, r.body)
		}
		b := treeBalances(t, r.body)
		if !b["1"].Equal(b["2"].Add(b["3"])) {
			t.Fatalf("%s %s: assets %s, liabilities %s, equity %s", user, dateTo, b["1"], b["2"], b["3"])
		}
		return b
	}
	// Postings run from 2023-11 to 2026-04: before that the base, after it all.
	dates := []string{"2023-10-31", "2024-06-30", "2025-03-09", "2025-03-10", "2025-12-31", "2026-05-15", ""}
	for _, scope := range []ListScope{ScopeCompany, ScopeBranch} {
		s.SetListScope(scope)
		for _, d := range dates {
			for _, u := range []struct {
				name   string
				branch int
			}{{"alice", 2}, {"bob", 5}} {
				br := u.branch
				if scope == ScopeCompany {
					br = 0
				}
				want := s.BalanceSheet(br, d)
				got := tree(u.name, d)
				if !sameBalances(got, want.Balances) {
					t.Fatalf("scope %d %s %q: tree %v, BalanceSheet %v", scope, u.name, d, got, want.Balances)
				}
				if !want.Total.Equal(got["1000"].Add(got["1100"]).Add(got["1200"]).Add(got["2000"]).Add(got["2200"]).Add(got["3100"]).Add(got["3200"])) {
					t.Fatalf("Total %s", want.Total)
				}
			}
		}
	}
	// The company is the sum of its branches; branches and dates differ.
	for _, d := range dates {
		c, a, b := s.BalanceSheet(0, d), s.BalanceSheet(2, d), s.BalanceSheet(5, d)
		for code, v := range c.Balances {
			if !v.Equal(a.Balances[code].Add(b.Balances[code])) {
				t.Fatalf("%s %s: company %s != %s + %s", d, code, v, a.Balances[code], b.Balances[code])
			}
		}
		if sameBalances(a.Balances, b.Balances) {
			t.Fatalf("%s: branches hold the same tree", d)
		}
	}
	for i := 1; i < len(dates)-2; i++ {
		if i != 3 && sameBalances(s.BalanceSheet(2, dates[i-1]).Balances, s.BalanceSheet(2, dates[i]).Balances) {
			t.Errorf("%s and %s hold the same tree", dates[i-1], dates[i])
		}
	}
	if !sameBalances(s.BalanceSheet(2, "").Balances, s.BalanceSheet(2, "2026-05-15").Balances) ||
		!sameBalances(s.BalanceSheet(2, "2030-01-01").Balances, s.BalanceSheet(2, "").Balances) {
		t.Error("today's tree is not the tree of every posting")
	}

	// A late closing entry into a past month (cash against retained
	// earnings) changes the trees of its date and later only.
	s.SetListScope(ScopeBranch)
	before := map[string]map[string]decimal.Decimal{}
	for _, d := range dates {
		before["alice"+d], before["bob"+d] = tree("alice", d), tree("bob", d)
	}
	amount := decimal.RequireFromString("123.45")
	s.PostLateEntry(2, "2025-03-10", "1000", amount)
	s.PostLateEntry(2, "2025-03-10", "3200", amount)
	for _, d := range dates {
		after := tree("alice", d)
		if !sameBalances(tree("bob", d), before["bob"+d]) {
			t.Errorf("%q: the late entry of branch 2 moved branch 5", d)
		}
		if d != "" && d < "2025-03-10" {
			if !sameBalances(after, before["alice"+d]) {
				t.Errorf("%s: tree changed by a later entry", d)
			}
			continue
		}
		for code, v := range before["alice"+d] {
			want := v
			if slices.Contains([]string{"1000", "11", "1", "3200", "3"}, code) {
				want = v.Add(amount)
			}
			if !after[code].Equal(want) {
				t.Errorf("%q: %s is %s, want %s", d, code, after[code], want)
			}
		}
	}

	// Money as strings, and a malformed date.
	s.SetMoneyAsString(true)
	if r := get(t, srv, "/accounts/api/balance-sheet-tree/?date_to=2025-01-31", toks["bob"]); !bytes.Contains(r.body, []byte(`"balance":"`)) ||
		!sameBalances(treeBalances(t, r.body), s.BalanceSheet(5, "2025-01-31").Balances) {
		t.Errorf("money as string: %s", r.body)
	}
	if r := get(t, srv, "/accounts/api/balance-sheet-tree/?date_to=2025-1-31", toks["bob"]); r.status != 400 || string(r.body) != `{"ok":false,"error":"invalid date_to"}` {
		t.Errorf("bad date: %d %s", r.status, r.body)
	}
	// Another company's token sees a tree of zeros.
	for code, v := range tree("mallory", "") {
		if !v.IsZero() {
			t.Errorf("mallory sees %s = %s", code, v)
		}
	}
}

func TestBalanceSheetIgnoresDate(t *testing.T) {
	t.Parallel()
	for _, history := range []bool{false, true} {
		s, srv := newSim(t, Options{BalanceSheetHistory: history, Now: fixedClock(time.Date(2026, 2, 3, 0, 0, 0, 0, time.UTC))})
		tok := login(t, srv)
		today := s.BalanceSheet(0, "")
		old := s.BalanceSheet(0, "2024-08-31")
		if history == sameBalances(today.Balances, old.Balances) {
			t.Fatalf("history %v: old tree same as today's: %v", history, sameBalances(today.Balances, old.Balances))
		}
		if r := get(t, srv, "/accounts/api/balance-sheet-tree/?date_to=2024-08-31", tok); !sameBalances(treeBalances(t, r.body), old.Balances) {
			t.Fatalf("history %v: dated tree %s", history, r.body)
		}
		s.SetBalanceSheetIgnoresDate(true)
		if got := s.BalanceSheet(0, "2024-08-31"); !sameBalances(got.Balances, today.Balances) {
			t.Fatalf("history %v: BalanceSheet still reads the date", history)
		}
		for _, d := range []string{"2024-08-31", "2025-06-30", "", "not-a-date"} {
			r := get(t, srv, "/accounts/api/balance-sheet-tree/?date_to="+url.QueryEscape(d), tok)
			if r.status != 200 || !sameBalances(treeBalances(t, r.body), today.Balances) {
				t.Errorf("history %v, date %q: %d %s", history, d, r.status, r.body)
			}
		}
		s.SetBalanceSheetIgnoresDate(false)
		if r := get(t, srv, "/accounts/api/balance-sheet-tree/?date_to=2024-08-31", tok); !sameBalances(treeBalances(t, r.body), old.Balances) {
			t.Errorf("history %v: dates not read again", history)
		}
	}
}

// ---- list cut, drift beyond lists, load -------------------------------------------

func TestListCut(t *testing.T) {
	t.Parallel()
	const cb = "/accounts/api/cashboxes/"
	s, srv := newSim(t, Options{Invoices: 12})
	tok := login(t, srv)
	var whole struct{ Data []json.RawMessage }
	if err := json.Unmarshal(get(t, srv, cb, tok).body, &whole); err != nil || len(whole.Data) != 4 {
		t.Fatal(err)
	}
	firstTwo := string(whole.Data[0]) + "," + string(whole.Data[1])
	tests := []struct {
		env    Envelope
		paging ListPaging
		want   string
	}{
		{EnvelopeData, ListPagingNone, `{"ok":true,"data":[` + firstTwo + `]}`},
		{EnvelopeArray, ListPagingNone, `[` + firstTwo + `]`},
		{EnvelopeResults, ListPagingNone, `{"ok":true,"data":[` + firstTwo + `]}`},
		{EnvelopeDataTables, ListPagingNone, `{"ok":true,"data":[` + firstTwo + `]}`},
		{EnvelopeData, ListPagingCursor, `{"ok":true,"data":[` + firstTwo + `]}`},
		{EnvelopeArray, ListPagingDRF, `[` + firstTwo + `]`},
		{EnvelopeData, ListPagingDataTables, `{"ok":true,"data":[` + firstTwo + `]}`},
		{EnvelopeData, ListPagingUnfollowable, `{"ok":true,"data":[` + firstTwo + `]}`},
	}
	s.SetListCut(cb, 2)
	for _, tc := range tests {
		s.SetListEnvelope(tc.env)
		s.SetListPaging(tc.paging, 1)
		for _, q := range []string{"", "?page_size=3", "?page=2", "?start=1&length=3"} {
			if r := get(t, srv, cb+q, tok); r.status != 200 || string(r.body) != tc.want {
				t.Errorf("%s/%s%s: %d %s", tc.env, tc.paging, q, r.status, r.body)
			}
		}
	}
	s.SetListEnvelope(EnvelopeData)
	s.SetListPaging(ListPagingNone, 0)

	// The invoice list and the journal entries: the first records, no paging signal.
	s.SetListCut(invoiceListPath, 3)
	s.SetListCut("/accounts/api/journal-entries/", 4)
	for path, n := range map[string]int{invoiceListPath + "?page_size=2": 3, "/accounts/api/journal-entries/?length=2": 4} {
		m := decode(t, get(t, srv, path, tok).body)
		if len(m) != 2 || m["ok"] != true || len(m["data"].([]any)) != n {
			t.Errorf("%s: %v", path, m)
		}
	}
	if ids := listIDs(t, get(t, srv, invoiceListPath, tok).body); !slices.Equal(ids, []string{"1001", "1002", "1003"}) {
		t.Errorf("cut invoices %v", ids)
	}

	// Other overrides keep their precedence.
	s.SetRouteStatus(cb, 403)
	if r := get(t, srv, cb, tok); r.status != 403 {
		t.Errorf("status override: %d", r.status)
	}
	s.SetRouteStatus(cb, 0)
	s.SetEmptyList(cb, true)
	if r := get(t, srv, cb, tok); string(r.body) != `{"ok":true,"data":[]}` {
		t.Errorf("empty: %s", r.body)
	}
	s.SetEmptyList(cb, false)
	s.SetUnknownEnvelope(cb, true)
	if r := get(t, srv, cb, tok); string(r.body) != `{"items":[`+firstTwo+`]}` {
		t.Errorf("unknown envelope: %s", r.body)
	}
	s.SetUnknownEnvelope(cb, false)
	s.SetFieldDrift(cb, map[string]json.RawMessage{"zone": json.RawMessage(`1`)}, nil)
	if r := get(t, srv, cb, tok); len(listIDs(t, r.body)) != 2 || bytes.Count(r.body, []byte(`"zone":1`)) != 2 {
		t.Errorf("drift: %s", r.body)
	}
	s.SetFieldDrift(cb, nil, nil)
	// Cleared, the whole list again.
	s.SetListCut(cb, 0)
	s.SetListCut(invoiceListPath, 0)
	if r := get(t, srv, cb, tok); len(listIDs(t, r.body)) != 4 {
		t.Errorf("not cleared: %s", r.body)
	}
	if m := decode(t, get(t, srv, invoiceListPath+"?page_size=5", tok).body); m["pagination"] == nil {
		t.Error("invoice cut not cleared")
	}
}

func TestDriftBeyondLists(t *testing.T) {
	t.Parallel()
	s, srv := newSim(t, Options{})
	tok := login(t, srv)
	const pattern = "/accounts/api/journal-entries/{pk}/journal-preview/"
	je := func(i int) string {
		return "/accounts/api/journal-entries/" + documentID("JE", i, false) + "/journal-preview/"
	}
	const pv = "/accounts/api/payment-vouchers/PV-000003/journal-preview/"
	plainPV := get(t, srv, pv, tok).body
	lines := func(path string) []map[string]json.RawMessage {
		t.Helper()
		var e struct {
			Data struct{ Lines []map[string]json.RawMessage }
		}
		if err := json.Unmarshal(get(t, srv, path, tok).body, &e); err != nil || len(e.Data.Lines) < 2 {
			t.Fatalf("%s: %v", path, err)
		}
		return e.Data.Lines
	}
	// Rename account_name to account_label, and drop memo-less lines' credit.
	s.SetFieldDrift(pattern, map[string]json.RawMessage{"account_label": json.RawMessage(`"x"`)}, []string{"account_name", "credit"})
	for _, i := range []int{0, 7, 29} {
		for _, l := range lines(je(i)) {
			if _, ok := l["account_name"]; ok || string(l["account_label"]) != `"x"` || l["credit"] != nil || l["debit"] == nil {
				t.Errorf("%s: line %v", je(i), l)
			}
		}
	}
	if got := get(t, srv, pv, tok).body; !bytes.Equal(got, plainPV) {
		t.Errorf("payment voucher preview drifted: %s", got)
	}
	// One document's own drift wins over the pattern's.
	s.SetFieldDrift(je(4), map[string]json.RawMessage{"only": json.RawMessage(`1`)}, nil)
	if l := lines(je(4))[0]; string(l["only"]) != "1" || l["account_name"] == nil {
		t.Errorf("own drift: %v", l)
	}
	if l := lines(je(5))[0]; l["only"] != nil || l["account_label"] == nil {
		t.Errorf("neighbour: %v", l)
	}
	s.SetFieldDrift(je(4), nil, nil)
	s.SetFieldDrift(pattern, nil, nil)
	if l := lines(je(5))[0]; l["account_label"] != nil || l["account_name"] == nil {
		t.Errorf("not cleared: %v", l)
	}

	// Every node of the balance-sheet tree, at every depth.
	const tree = "/accounts/api/balance-sheet-tree/"
	plain := get(t, srv, tree, tok).body
	s.SetFieldDrift(tree, map[string]json.RawMessage{"amount": json.RawMessage(`0`)}, []string{"balance"})
	var e struct{ Data []json.RawMessage }
	if err := json.Unmarshal(get(t, srv, tree, tok).body, &e); err != nil {
		t.Fatal(err)
	}
	nodes := 0
	var check func(raw json.RawMessage)
	check = func(raw json.RawMessage) {
		var n map[string]json.RawMessage
		if err := json.Unmarshal(raw, &n); err != nil {
			t.Fatal(err)
		}
		nodes++
		if n["balance"] != nil || string(n["amount"]) != "0" || n["code"] == nil {
			t.Errorf("node %s", raw)
		}
		var kids []json.RawMessage
		if err := json.Unmarshal(n["children"], &kids); err != nil {
			t.Fatalf("children of %s", raw)
		}
		for _, k := range kids {
			check(k)
		}
	}
	for _, n := range e.Data {
		check(n)
	}
	if nodes != 12 {
		t.Errorf("%d nodes", nodes)
	}
	s.SetFieldDrift(tree, nil, nil)
	if got := get(t, srv, tree, tok).body; !bytes.Equal(got, plain) {
		t.Errorf("tree drift not cleared: %s", got)
	}
}

func TestMaxInFlight(t *testing.T) {
	t.Parallel()
	s, srv := newSim(t, Options{})
	tok := login(t, srv)
	for range 3 {
		get(t, srv, "/accounts/api/cashboxes/", tok)
	}
	if n := s.MaxInFlight(); n != 1 {
		t.Fatalf("one request at a time: MaxInFlight %d", n)
	}
	s.SetLatency(400 * time.Millisecond)
	s.ResetMaxInFlight()
	if n := s.MaxInFlight(); n != 0 {
		t.Fatalf("after reset: %d", n)
	}
	const n = 7
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var err error
			if i%3 == 0 { // logins count too
				_, err = do(t, nil, "POST", srv.URL+"/api/auth/token/", "", `{"username":"erpsync","password":"erpsync-demo-password"}`)
			} else {
				_, err = do(t, nil, "GET", srv.URL+"/accounts/api/payment-vouchers/", "Bearer "+tok, "")
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := s.MaxInFlight(); got != n {
		t.Fatalf("%d concurrent slow requests: MaxInFlight %d", n, got)
	}
	s.ResetMaxInFlight()
	if got := s.MaxInFlight(); got != 0 {
		t.Fatalf("nothing in flight after reset: %d", got)
	}
}

// The new knobs turned while users read: no race, every answer well formed.
func TestConcurrentUsersAndKnobs(t *testing.T) {
	t.Parallel()
	s, srv := newSim(t, Options{Users: branchUsers, Invoices: 200, BalanceSheetHistory: true})
	toks := loginAll(t, srv)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 5 {
				switch i % 4 {
				case 0:
					s.SetListScope(ListScope(j % 2))
					s.SetRecordLabels(RecordLabels(j % 3))
					s.PreEncodeInvoicePages(20)
				case 1:
					s.PostLateEntry(5, "2025-01-01", "2000", decimal.New(int64(j), 0))
					_ = s.BalanceSheet(0, "2025-06-30")
					s.SetListCut("/accounts/api/cashboxes/", j%3)
				default:
					tok := toks[branchUsers[(i+j)%len(branchUsers)].Username]
					for _, p := range []string{"/sales/api/invoices/list/?page_size=20", "/accounts/api/cashboxes/", "/accounts/api/balance-sheet-tree/?date_to=2025-03-31", "/accounts/api/journal-entries/JE-000002/journal-preview/"} {
						r, err := do(t, nil, "GET", srv.URL+p, "Bearer "+tok, "")
						if err != nil || (r.status != 200 && r.status != 404) || !json.Valid(r.body) {
							t.Errorf("%s: %v %d %s", p, err, r.status, r.body)
						}
					}
					_ = s.InvoicesOfBranch(2)
					_ = s.MaxInFlight()
				}
			}
		})
	}
	wg.Wait()
}
