package erpsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
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
// writes, faults, missing credentials and status overrides). Routes are
// matched exactly ({$}): a pattern ending in a slash would otherwise also
// answer every longer path.
func (s *Sim) dataRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	get := func(p string, h http.HandlerFunc) { mux.HandleFunc("GET "+p+"{$}", h) }
	oneList := func(p string, pick func(*fixtures) any) { get(p, s.serveList(pick, layoutOneList)) }
	// A preview is named by its pattern too, for a drift of all documents of its kind.
	preview := func(p string, find previewFinder) { get(p, s.servePreview(p, find)) }

	get(invoiceListPath, s.serveInvoices)
	get("/accounts/api/currencies/", s.serveCurrencies)
	get("/accounts/api/cashboxes/", serveOwned(s, func(fx *fixtures) []cashbox { return fx.cashboxes }, layoutOneList, true))
	get("/accounts/api/cashboxes/{id}/access/", s.serveAccess)
	get("/accounts/api/cashboxes/{id}/", s.serveCashbox)
	get("/accounts/api/cashboxes/lookup/", s.serveLookup)
	get("/accounts/api/cashbox-reconciliations/", serveOwned(s, func(fx *fixtures) []reconciliation { return fx.recons }, layoutOneList, false))
	get("/accounts/api/journal-entries/", s.serveJournalEntries)
	preview("/accounts/api/journal-entries/{pk}/journal-preview/", s.journalPreview)
	get("/accounts/api/payment-vouchers/", serveOwned(s, func(fx *fixtures) []voucher { return fx.payments }, layoutOneList, false))
	preview("/accounts/api/payment-vouchers/{pk}/journal-preview/", fixtureLines(func(fx *fixtures) map[string][]journalLine { return fx.paymentLines }))
	get("/accounts/api/receipt-vouchers/", serveOwned(s, func(fx *fixtures) []voucher { return fx.receipts }, layoutOneList, false))
	preview("/accounts/api/receipt-vouchers/{pk}/journal-preview/", fixtureLines(func(fx *fixtures) map[string][]journalLine { return fx.receiptLines }))
	get("/accounts/api/balance-sheet-tree/", s.serveBalanceSheet)

	msg := s.opts.MessagingPrefix
	oneList(msg+"/api/conversations/", func(fx *fixtures) any { return fx.conversations })
	oneList(msg+"/api/messages/", func(fx *fixtures) any { return fx.messages })
	oneList(msg+"/api/templates/", func(fx *fixtures) any { return fx.templates })
	oneList(msg+"/api/queue/", func(fx *fixtures) any { return fx.queue })
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

// fixtures returns the fixture set of the money format and hostile switch
// in force, building it on first use (a fleet's tenants mostly never serve
// more than one kind).
func (s *Sim) fixtures() *fixtures {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fixturesOf(fixtureKind{moneyAsString: s.money, hostile: s.hostileDetails})
}

// fixturesOf returns the fixture set of kind k. Caller holds s.mu.
func (s *Sim) fixturesOf(k fixtureKind) *fixtures {
	if s.fx[k.index()] == nil {
		s.fx[k.index()] = buildFixtures(s.opts.Seed, s.branches, s.opts.SlashIDs, k)
	}
	return s.fx[k.index()]
}

// ---- handlers ------------------------------------------------------------------

// serveList serves a list of fixtures in layout lay.
func (s *Sim) serveList(pick func(*fixtures) any, lay layout) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.serveItems(w, r, pick(s.fixtures()), lay)
	}
}

// serveItems serves the slice items in layout lay.
func (s *Sim) serveItems(w http.ResponseWriter, r *http.Request, items any, lay layout) {
	recs, err := encodeEach(items)
	if err != nil {
		serverError(w, err)
		return
	}
	s.serveRecords(w, r, recs, lay)
}

// object serves a route whose answer is {"ok":true,"data":{...}}; the
// object drifts as SetFieldDrift says for the route's path.
func (s *Sim) object(pick func(*fixtures) any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		o := s.override(r.URL.Path)
		if o.drift == nil {
			writeValue(w, http.StatusOK, okData{OK: true, Data: pick(s.fixtures())})
			return
		}
		rec, err := json.Marshal(pick(s.fixtures()))
		if err != nil {
			serverError(w, err)
			return
		}
		writeBytes(w, http.StatusOK, append(append([]byte(`{"ok":true,"data":`), o.drift.apply(nil, rec)...), '}'))
	}
}

// serveLookup serves the cashbox picker: the cashboxes the request's view
// holds.
func (s *Sim) serveLookup(w http.ResponseWriter, r *http.Request) {
	boxes := visible(s, s.fixtures().cashboxes, s.lensOf(r).view)
	s.serveItems(w, r, cashboxLookup(boxes), layoutData)
}

// serveAccess serves a cashbox's access list, which follows its cashbox: it
// answers 404 where the cashbox is not in the request's view.
func (s *Sim) serveAccess(w http.ResponseWriter, r *http.Request) {
	fx := s.fixtures()
	id, err := strconv.Atoi(r.PathValue("id"))
	grants, ok := fx.access[id]
	branch, _ := fx.cashboxBranch(id)
	if err != nil || !ok || !s.sees(r, branch) {
		notFound(w)
		return
	}
	s.serveItems(w, r, grants, layoutData)
}

// cashboxDetail is a cashbox's detail record: the list's fields and what
// the list does not carry.
type cashboxDetail struct {
	cashbox
	AccountCode    string `json:"account_code"`
	OpeningBalance money  `json:"opening_balance"`
}

// serveCashbox serves one cashbox's detail, {ok, data}. SetFieldDrift on
// the cashbox's own path changes its fields.
func (s *Sim) serveCashbox(w http.ResponseWriter, r *http.Request) {
	fx := s.fixtures()
	id, err := strconv.Atoi(r.PathValue("id"))
	i := slices.IndexFunc(fx.cashboxes, func(c cashbox) bool { return c.ID == id })
	if err != nil || i < 0 || !s.sees(r, fx.cashboxes[i].BranchID) {
		notFound(w)
		return
	}
	c := fx.cashboxes[i]
	d := cashboxDetail{cashbox: c, AccountCode: fmt.Sprintf("10%02d", c.ID),
		OpeningBalance: money{d: c.Balance.d.Sub(cents(10000)), asString: c.Balance.asString}}
	rec, err := json.Marshal(d)
	if err != nil {
		serverError(w, err)
		return
	}
	if o := s.override(r.URL.Path); o.drift != nil {
		rec = o.drift.apply(nil, rec)
	}
	writeBytes(w, http.StatusOK, append(append([]byte(`{"ok":true,"data":`), rec...), '}'))
}

// previewFinder finds the preview lines and the branch of document pk;
// false for a document there is none of.
type previewFinder func(fx *fixtures, pk string) (lines []journalLine, branch int, ok bool)

// fixtureLines finds previews in a map of the fixtures.
func fixtureLines(pick func(*fixtures) map[string][]journalLine) previewFinder {
	return func(fx *fixtures, pk string) ([]journalLine, int, bool) {
		lines, ok := pick(fx)[pk]
		return lines, fx.docBranch[pk], ok
	}
}

// servePreview serves the journal preview of one document, which follows
// its document: it answers 404 where the document is not in the request's
// view. The id comes unescaped from PathValue, so JE%2F2026%2F1 finds
// "JE/2026/1". Its lines drift as SetFieldDrift says for the document's own
// path or, failing that, for the route pattern.
func (s *Sim) servePreview(pattern string, find previewFinder) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fx, pk := s.fixtures(), r.PathValue("pk")
		lines, branch, ok := find(fx, pk)
		seen := s.sees(r, branch)
		if ok && pk == fx.brokenPreview && seen {
			writeJSON(w, http.StatusOK, malformedPreview)
			return
		}
		if !ok || !seen {
			notFound(w)
			return
		}
		d := s.override(r.URL.Path).drift
		if d == nil {
			d = s.override(pattern).drift
		}
		if d == nil {
			writeValue(w, http.StatusOK, okData{OK: true, Data: journalPreview{Lines: lines}})
			return
		}
		recs, err := encodeEach(lines)
		if err != nil {
			serverError(w, err)
			return
		}
		for i := range recs {
			recs[i] = d.apply(nil, recs[i])
		}
		writeValue(w, http.StatusOK, okData{OK: true, Data: driftedPreview{Lines: recs}})
	}
}

// driftedPreview is a journal preview whose lines drifted.
type driftedPreview struct {
	Lines []json.RawMessage `json:"lines"`
}

func (s *Sim) serveCurrencies(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	cs := append([]Currency(nil), s.currencies...)
	s.mu.Unlock()
	all := r.URL.Query().Get("scope") == "all"
	var out []currencyJSON
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
	s.serveItems(w, r, out, layoutData)
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
