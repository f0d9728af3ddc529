package erpsim

import (
	"encoding/json"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"time"
)

// authRoutes serves /api/auth/*. Every route is matched exactly ({$}); a
// pattern without a method follows each route so that a wrong method answers
// a JSON 405 instead of ServeMux's plain-text one.
func (s *Sim) authRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/auth/token/{$}", s.login)
	mux.HandleFunc("/api/auth/token/{$}", methodNotAllowed)
	mux.HandleFunc("GET /api/auth/me/{$}", s.me)
	mux.HandleFunc("/api/auth/me/{$}", methodNotAllowed)
	mux.HandleFunc("POST /api/auth/revoke/{$}", s.revoke)
	mux.HandleFunc("/api/auth/revoke/{$}", methodNotAllowed)
	mux.HandleFunc("/", notFoundRoute)
	return mux
}

// dataRoutes serves the authorized data GETs (ServeHTTP has already answered
// writes, faults and missing credentials). Routes are matched exactly ({$}):
// a pattern ending in a slash would otherwise also answer every longer path.
func (s *Sim) dataRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	get := func(p string, h http.HandlerFunc) { mux.HandleFunc("GET "+p+"{$}", h) }

	get("/sales/api/invoices/list/", s.serveInvoices)
	get("/accounts/api/currencies/", s.serveCurrencies)
	get("/accounts/api/cashboxes/", s.oneList(func(fx *fixtures) any { return fx.cashboxes }))
	get("/accounts/api/cashboxes/{id}/access/", s.serveAccess)
	get("/accounts/api/cashbox-reconciliations/", s.oneList(func(fx *fixtures) any { return fx.recons }))
	get("/accounts/api/journal-entries/", s.serveJournalEntries)
	get("/accounts/api/journal-entries/{pk}/journal-preview/", s.servePreview(func(fx *fixtures) map[string][]journalLine { return fx.journalLines }))
	get("/accounts/api/payment-vouchers/", s.oneList(func(fx *fixtures) any { return fx.payments }))
	get("/accounts/api/payment-vouchers/{pk}/journal-preview/", s.servePreview(func(fx *fixtures) map[string][]journalLine { return fx.paymentLines }))
	get("/accounts/api/receipt-vouchers/", s.oneList(func(fx *fixtures) any { return fx.receipts }))
	get("/accounts/api/receipt-vouchers/{pk}/journal-preview/", s.servePreview(func(fx *fixtures) map[string][]journalLine { return fx.receiptLines }))
	get("/accounts/api/balance-sheet-tree/", s.serveBalanceSheet)

	msg := "/messaging"
	get(msg+"/api/conversations/", s.oneList(func(fx *fixtures) any { return fx.conversations }))
	get(msg+"/api/messages/", s.oneList(func(fx *fixtures) any { return fx.messages }))
	get(msg+"/api/templates/", s.oneList(func(fx *fixtures) any { return fx.templates }))
	get(msg+"/api/queue/", s.oneList(func(fx *fixtures) any { return fx.queue }))
	get(msg+"/api/stats/", s.object(func(fx *fixtures) any { return fx.stats }))
	get(msg+"/api/settings/", s.object(func(fx *fixtures) any { return fx.settings }))

	mux.HandleFunc("/", notFoundRoute)
	return mux
}

// serveRoute hands r to mux. ServeMux redirects a path that is not clean or
// lacks the trailing slash of a route; the ERP answers 404 for those, so they
// never reach it. The check is on the escaped path, as ServeMux's is, so an
// id with an escaped slash (JE%2F2026%2F1) stays one segment.
func serveRoute(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	if len(p) < 2 || p[len(p)-1] != '/' || path.Clean(p)+"/" != p {
		notFound(w)
		return
	}
	mux.ServeHTTP(w, r)
}

// fixtures returns the fixture set of the money format in force, building it
// on first use (a fleet's tenants mostly never serve both formats).
func (s *Sim) fixtures() *fixtures {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	if s.money {
		i = 1
	}
	if s.fx[i] == nil {
		s.fx[i] = buildFixtures(s.opts.Seed, s.opts.BranchID, s.opts.SlashIDs, s.money)
	}
	return s.fx[i]
}

// ---- handlers ------------------------------------------------------------------

// oneList serves a route whose whole answer is one list, in the envelope in
// force.
func (s *Sim) oneList(pick func(*fixtures) any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		recs, err := encodeEach(pick(s.fixtures()))
		if err != nil {
			serverError(w, err)
			return
		}
		s.mu.Lock()
		env := s.env
		s.mu.Unlock()
		s.writeEnvelope(w, r, recs, env)
	}
}

// object serves a route whose answer is {"ok":true,"data":{...}}.
func (s *Sim) object(pick func(*fixtures) any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeValue(w, http.StatusOK, okData{OK: true, Data: pick(s.fixtures())})
	}
}

func (s *Sim) serveAccess(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(r.PathValue("id"))
	grants, ok := s.fixtures().access[id]
	if err != nil || !ok {
		notFound(w)
		return
	}
	writeValue(w, http.StatusOK, okData{OK: true, Data: grants})
}

// servePreview serves the journal preview of one document. The id comes
// unescaped from PathValue, so JE%2F2026%2F1 finds "JE/2026/1".
func (s *Sim) servePreview(pick func(*fixtures) map[string][]journalLine) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		lines, ok := pick(s.fixtures())[r.PathValue("pk")]
		if !ok {
			notFound(w)
			return
		}
		writeValue(w, http.StatusOK, okData{OK: true, Data: journalPreview{Lines: lines}})
	}
}

// serveJournalEntries always answers DataTables, paged by start/length: that
// is what the ERP's journal-entry list takes (draw, start, length).
func (s *Sim) serveJournalEntries(w http.ResponseWriter, r *http.Request) {
	recs, err := encodeEach(s.fixtures().journals)
	if err != nil {
		serverError(w, err)
		return
	}
	s.writeDataTables(w, r, recs, s.opts.DefaultPageSize)
}

func (s *Sim) serveBalanceSheet(w http.ResponseWriter, r *http.Request) {
	if d := r.URL.Query().Get("date_to"); d != "" {
		if _, err := time.Parse(time.DateOnly, d); err != nil {
			writeJSON(w, http.StatusBadRequest, `{"ok":false,"error":"invalid date_to"}`)
			return
		}
	}
	writeValue(w, http.StatusOK, okData{OK: true, Data: s.fixtures().balanceSheet})
}

func (s *Sim) serveCurrencies(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	cs := append([]Currency(nil), s.currencies...)
	s.mu.Unlock()
	all := r.URL.Query().Get("scope") == "all"
	out := []currencyJSON{}
	for _, c := range cs {
		if c.Active && (all || c.SystemEnabled) {
			out = append(out, newCurrencyJSON(c))
		}
	}
	if !all && len(out) == 0 {
		for _, c := range cs {
			if c.IsBase {
				out = append(out, newCurrencyJSON(c))
			}
		}
	}
	writeValue(w, http.StatusOK, okData{OK: true, Data: out})
}

// currencyJSON is a currency as the reviewed contract lists its fields, plus
// the two the installation adds after them.
type currencyJSON struct {
	ID                   int64  `json:"id"`
	Code                 string `json:"code"`
	CurrencyCode         string `json:"currency_code"`
	Name                 string `json:"name"`
	CurrencyName         string `json:"currency_name"`
	ExchangeRate         string `json:"exchange_rate"`
	HasExchangeRate      bool   `json:"has_exchange_rate"`
	RequiresExchangeRate bool   `json:"requires_exchange_rate"`
	IsBaseCurrency       bool   `json:"is_base_currency"`
	IsSystemEnabled      bool   `json:"is_system_enabled"`
	IsActive             bool   `json:"is_active"`
	DecimalPlaces        int    `json:"decimal_places"`
}

func newCurrencyJSON(c Currency) currencyJSON {
	return currencyJSON{
		ID: c.ID, Code: c.Code, CurrencyCode: c.Code, Name: c.Name, CurrencyName: c.Name,
		ExchangeRate: c.ExchangeRate, HasExchangeRate: !c.IsBase, RequiresExchangeRate: !c.IsBase,
		IsBaseCurrency: c.IsBase, IsSystemEnabled: c.SystemEnabled, IsActive: c.Active, DecimalPlaces: 2,
	}
}

// ---- list envelopes ------------------------------------------------------------

type okData struct {
	OK   bool `json:"ok"`
	Data any  `json:"data"`
}

type drfPage struct {
	Count    int               `json:"count"`
	Next     *string           `json:"next"`
	Previous *string           `json:"previous"`
	Results  []json.RawMessage `json:"results"`
}

type dataTablesPage struct {
	Draw            int               `json:"draw"`
	RecordsTotal    int               `json:"recordsTotal"`
	RecordsFiltered int               `json:"recordsFiltered"`
	Data            []json.RawMessage `json:"data"`
}

// encodeEach encodes every element of a slice on its own, so that list
// writers can page, count and rewrite records without knowing their type.
// The result is never nil: an empty list is written as [].
func encodeEach(items any) ([]json.RawMessage, error) {
	var all []json.RawMessage
	b, err := json.Marshal(items)
	if err == nil {
		err = json.Unmarshal(b, &all)
	}
	if all == nil {
		all = []json.RawMessage{}
	}
	return all, err
}

// writeEnvelope writes a whole list in envelope env.
func (s *Sim) writeEnvelope(w http.ResponseWriter, r *http.Request, recs []json.RawMessage, env Envelope) {
	switch env {
	case EnvelopeArray:
		writeValue(w, http.StatusOK, recs)
	case EnvelopeResults:
		s.writeDRF(w, r, recs, s.opts.PageSizeCap)
	case EnvelopeDataTables:
		s.writeDataTables(w, r, recs, len(recs))
	default:
		writeValue(w, http.StatusOK, okData{OK: true, Data: recs})
	}
}

// writeDRF answers a Django REST framework page: ?page=N (from 1) of size ps,
// with an absolute next link on the same origin.
func (s *Sim) writeDRF(w http.ResponseWriter, r *http.Request, recs []json.RawMessage, ps int) {
	q := r.URL.Query()
	page := 1
	if q.Has("page") {
		n, err := strconv.Atoi(q.Get("page"))
		if err != nil || n < 1 {
			writeJSON(w, http.StatusNotFound, `{"detail":"Invalid page."}`)
			return
		}
		page = n
	}
	start := (page - 1) * ps
	if start > 0 && start >= len(recs) {
		writeJSON(w, http.StatusNotFound, `{"detail":"Invalid page."}`)
		return
	}
	end := min(start+ps, len(recs))
	out := drfPage{Count: len(recs), Results: recs[start:end]}
	if end < len(recs) {
		q.Set("page", strconv.Itoa(page+1))
		next := sameOrigin(r, q)
		out.Next = &next
	}
	writeValue(w, http.StatusOK, out)
}

// sameOrigin is the absolute URL of the route of r with query q.
func sameOrigin(r *http.Request, q url.Values) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: r.Host, Path: r.URL.Path, RawQuery: q.Encode()}
	return u.String()
}

// writeDataTables answers {"draw","recordsTotal","recordsFiltered","data"}
// for the rows start..start+length; length defaults to defLen and is capped
// at PageSizeCap.
func (s *Sim) writeDataTables(w http.ResponseWriter, r *http.Request, recs []json.RawMessage, defLen int) {
	q := r.URL.Query()
	draw := 1
	if n, err := strconv.Atoi(q.Get("draw")); err == nil {
		draw = n
	}
	start, _ := intParam(q, "start")
	start = min(start, len(recs))
	n := defLen
	if ln, ok := intParam(q, "length"); ok {
		n = s.pageSize(ln, true)
	}
	end := min(start+n, len(recs))
	writeValue(w, http.StatusOK, dataTablesPage{Draw: draw, RecordsTotal: len(recs), RecordsFiltered: len(recs), Data: recs[start:end]})
}

// intParam parses a non-negative integer query value.
func intParam(q url.Values, name string) (int, bool) {
	v := q.Get(name)
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// pageSize normalises a requested page size: absent or invalid gives the
// default, above the cap gives the cap.
func (s *Sim) pageSize(n int, ok bool) int {
	if !ok || n <= 0 {
		return s.opts.DefaultPageSize
	}
	return min(n, s.opts.PageSizeCap)
}

// ---- writing -------------------------------------------------------------------

func writeValue(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		serverError(w, err)
		return
	}
	writeBytes(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	writeBytes(w, status, []byte(body))
}

func writeBytes(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func notFound(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, `{"detail":"not found"}`)
}

func notFoundRoute(w http.ResponseWriter, _ *http.Request) { notFound(w) }

func methodNotAllowed(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusMethodNotAllowed, `{"detail":"method not allowed"}`)
}

// serverError reports a fixture that failed to encode: a bug in the
// simulator, answered as a 500 so the test that hits it fails loudly.
func serverError(w http.ResponseWriter, err error) {
	b, _ := json.Marshal(map[string]string{"detail": "erpsim: " + err.Error()})
	writeBytes(w, http.StatusInternalServerError, b)
}
