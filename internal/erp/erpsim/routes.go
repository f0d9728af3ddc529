package erpsim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// route answers an authorized data GET.
func (s *Sim) route(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	money, env := s.money, s.env
	s.mu.Unlock()
	fx := &s.fx // immutable after New

	switch p := r.URL.Path; p {
	case "/sales/api/invoices/list/":
		s.serveInvoices(w, r)
	case "/accounts/api/currencies/":
		s.serveCurrencies(w, r)
	case "/accounts/api/cashboxes/":
		s.writeList(w, r, fx.cashboxes, money, env)
	case "/accounts/api/cashbox-reconciliations/":
		s.writeList(w, r, fx.recons, money, env)
	case "/accounts/api/journal-entries/":
		s.writeDataTables(w, r, fx.journals, money, true)
	case "/accounts/api/payment-vouchers/":
		s.writeList(w, r, fx.payments, money, env)
	case "/accounts/api/receipt-vouchers/":
		s.writeList(w, r, fx.receipts, money, env)
	case "/accounts/api/balance-sheet-tree/":
		if d := r.URL.Query().Get("date_to"); d != "" {
			if _, err := time.Parse(time.DateOnly, d); err != nil {
				writeJSON(w, http.StatusBadRequest, `{"ok":false,"error":"invalid date_to"}`)
				return
			}
		}
		writeOK(w, fx.balanceSheet, money)
	case "/messaging/api/conversations/":
		s.writeList(w, r, fx.conversations, money, env)
	case "/messaging/api/messages/":
		s.writeList(w, r, fx.messages, money, env)
	case "/messaging/api/templates/":
		s.writeList(w, r, fx.templates, money, env)
	case "/messaging/api/queue/":
		s.writeList(w, r, fx.queue, money, env)
	case "/messaging/api/stats/":
		writeOK(w, fx.stats, money)
	case "/messaging/api/settings/":
		writeOK(w, fx.settings, money)
	default:
		segs := strings.Split(strings.Trim(p, "/"), "/")
		if !strings.HasSuffix(p, "/") || len(segs) != 5 || segs[0] != "accounts" || segs[1] != "api" {
			notFound(w)
			return
		}
		switch {
		case segs[2] == "cashboxes" && segs[4] == "access":
			id, err := strconv.Atoi(segs[3])
			users, ok := fx.access[id]
			if err != nil || !ok {
				notFound(w)
				return
			}
			writeOK(w, users, money)
		case segs[4] == "journal-preview":
			var lines map[string][]obj
			switch segs[2] {
			case "journal-entries":
				lines = fx.journalLines
			case "payment-vouchers":
				lines = fx.paymentLines
			case "receipt-vouchers":
				lines = fx.receiptLines
			}
			l, ok := lines[segs[3]]
			if !ok {
				notFound(w)
				return
			}
			writeOK(w, obj{{"lines", l}}, money)
		default:
			notFound(w)
		}
	}
}

func writeOK(w http.ResponseWriter, data any, money bool) {
	e := enc{money: money}
	e.val(obj{{"ok", true}, {"data", data}})
	writeBytes(w, http.StatusOK, e.b)
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

func (s *Sim) writeList(w http.ResponseWriter, r *http.Request, items []obj, money bool, env Envelope) {
	e := enc{money: money}
	switch env {
	case EnvelopeArray:
		e.val(items)
	case EnvelopeResults:
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
		ps := s.opts.PageSizeCap
		start := (page - 1) * ps
		if start > 0 && start >= len(items) {
			writeJSON(w, http.StatusNotFound, `{"detail":"Invalid page."}`)
			return
		}
		end := min(start+ps, len(items))
		var next any
		if end < len(items) {
			scheme := "http"
			if r.TLS != nil {
				scheme = "https"
			}
			q.Set("page", strconv.Itoa(page+1))
			u := url.URL{Scheme: scheme, Host: r.Host, Path: r.URL.Path, RawQuery: q.Encode()}
			next = u.String()
		}
		e.val(obj{{"count", len(items)}, {"next", next}, {"previous", nil}, {"results", items[start:end]}})
	case EnvelopeDataTables:
		s.writeDataTables(w, r, items, money, false)
		return
	default:
		e.val(obj{{"ok", true}, {"data", items}})
	}
	writeBytes(w, http.StatusOK, e.b)
}

// writeDataTables answers {"draw","recordsTotal","recordsFiltered","data"}.
// With alwaysPage the page is start/length (length defaulting to
// DefaultPageSize); otherwise the whole list unless length is given.
func (s *Sim) writeDataTables(w http.ResponseWriter, r *http.Request, items []obj, money bool, alwaysPage bool) {
	q := r.URL.Query()
	draw := 1
	if n, err := strconv.Atoi(q.Get("draw")); err == nil {
		draw = n
	}
	start, _ := intParam(q, "start")
	start = min(start, len(items))
	end := len(items)
	if ln, ok := intParam(q, "length"); ok || alwaysPage {
		end = min(start+s.pageSize(ln, ok), len(items))
	}
	e := enc{money: money}
	e.val(obj{{"draw", draw}, {"recordsTotal", len(items)}, {"recordsFiltered", len(items)}, {"data", items[start:end]}})
	writeBytes(w, http.StatusOK, e.b)
}

func (s *Sim) serveCurrencies(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	cs := append([]Currency(nil), s.currencies...)
	money := s.money
	s.mu.Unlock()
	all := r.URL.Query().Get("scope") == "all"
	var out []obj
	for _, c := range cs {
		if c.Active && (all || c.SystemEnabled) {
			out = append(out, currencyObj(c))
		}
	}
	if !all && len(out) == 0 {
		for _, c := range cs {
			if c.IsBase {
				out = append(out, currencyObj(c))
			}
		}
	}
	if out == nil {
		out = []obj{}
	}
	writeOK(w, out, money)
}

func currencyObj(c Currency) obj {
	return obj{
		{"id", c.ID},
		{"code", c.Code},
		{"currency_code", c.Code},
		{"name", c.Name},
		{"currency_name", c.Name},
		{"exchange_rate", c.ExchangeRate},
		{"has_exchange_rate", !c.IsBase},
		{"requires_exchange_rate", !c.IsBase},
		{"is_base_currency", c.IsBase},
		{"is_system_enabled", c.SystemEnabled},
		{"is_active", c.Active},
		{"decimal_places", 2},
	}
}

// ---- invoices and cursors ----------------------------------------------------

type preEncoded struct {
	gen   uint64
	money bool
	pages [][]byte // subslices of a few large chunks
}

func (s *Sim) serveInvoices(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Has("page") || q.Has("offset") {
		writeJSON(w, http.StatusBadRequest, `{"ok":false,"error":"page and offset are not supported on this route; use cursor"}`)
		return
	}
	n, ok := intParam(q, "page_size")
	ps := s.pageSize(n, ok)

	s.mu.Lock()
	off := 0
	if q.Has("cursor") {
		g, o, ok := s.parseCursor(q.Get("cursor"))
		if !ok || g != s.gen {
			s.mu.Unlock()
			writeJSON(w, http.StatusBadRequest, `{"ok":false,"error":"invalid cursor"}`)
			return
		}
		off = o
	}
	if pe := s.pre[ps]; pe != nil && pe.gen == s.gen && pe.money == s.money && off%ps == 0 && off/ps < len(pe.pages) {
		body := pe.pages[off/ps]
		s.mu.Unlock()
		writeBytes(w, http.StatusOK, body)
		return
	}
	body := s.appendInvoicePage(make([]byte, 0, 256*min(ps, max(len(s.invoices)-off, 1))+128), off, ps, s.gen, s.money)
	s.mu.Unlock()
	writeBytes(w, http.StatusOK, body)
}

// appendInvoicePage encodes the page starting at off. Caller holds s.mu.
func (s *Sim) appendInvoicePage(b []byte, off, ps int, gen uint64, money bool) []byte {
	inv := s.invoices
	start := min(off, len(inv))
	end := min(start+ps, len(inv))
	b = append(b, `{"ok":true,"data":[`...)
	for i := start; i < end; i++ {
		if i > start {
			b = append(b, ',')
		}
		b = appendInvoice(b, &inv[i], money)
	}
	b = append(b, `],"pagination":{"has_next":`...)
	if end < len(inv) {
		b = append(b, `true,"next_cursor":"`...)
		b = append(b, s.cursor(gen, end)...)
		b = append(b, `"}}`...)
	} else {
		b = append(b, `false,"next_cursor":null}}`...)
	}
	return b
}

func appendInvoice(b []byte, v *Invoice, money bool) []byte {
	if v.Raw != nil {
		return append(b, v.Raw...)
	}
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, v.ID, 10)
	b = append(b, `,"number":`...)
	b = appendString(b, v.Number)
	b = append(b, `,"date":`...)
	b = appendString(b, v.Date)
	b = append(b, `,"customer":{"id":`...)
	b = strconv.AppendInt(b, v.CustomerID, 10)
	b = append(b, `,"name":`...)
	b = appendString(b, v.Customer)
	b = append(b, `},"currency_code":`...)
	b = appendString(b, v.Currency)
	b = append(b, `,"total_bc":`...)
	b = appendMoney(b, v.TotalBC, money)
	b = append(b, `,"status":`...)
	b = appendString(b, v.Status)
	b = append(b, `,"updated_at":`...)
	if v.UpdatedAt != "" {
		b = appendString(b, v.UpdatedAt)
	} else {
		b = append(b, '"')
		b = append(b, v.Date...) // dates are plain ASCII
		b = append(b, `T10:00:00Z"`...)
	}
	return append(b, '}')
}

// cursor encodes (gen, off) as an opaque standard-base64 string. The plain
// text is "g<gen>|o<off>|" padded to a multiple of 3, then three bytes that
// encode as "++++", then a 4-byte checksum (so the encoding ends in "==").
// Every cursor therefore needs URL-encoding.
func (s *Sim) cursor(gen uint64, off int) string {
	b := make([]byte, 0, 48)
	b = append(b, 'g')
	b = strconv.AppendUint(b, gen, 10)
	b = append(b, "|o"...)
	b = strconv.AppendInt(b, int64(off), 10)
	b = append(b, '|')
	for len(b)%3 != 0 {
		b = append(b, '.')
	}
	b = append(b, 0xfb, 0xef, 0xbe)
	h := fnv.New32a()
	_, _ = h.Write(b)
	var seed [8]byte
	binary.BigEndian.PutUint64(seed[:], uint64(s.opts.Seed))
	_, _ = h.Write(seed[:])
	b = binary.BigEndian.AppendUint32(b, h.Sum32())
	return base64.StdEncoding.EncodeToString(b)
}

func (s *Sim) parseCursor(c string) (gen uint64, off int, ok bool) {
	raw, err := base64.StdEncoding.DecodeString(c)
	if err != nil || len(raw) < 5 || raw[0] != 'g' {
		return 0, 0, false
	}
	rest := string(raw[1:])
	gs, rest, ok1 := strings.Cut(rest, "|o")
	os, _, ok2 := strings.Cut(rest, "|")
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	g, err1 := strconv.ParseUint(gs, 10, 64)
	o, err2 := strconv.Atoi(os)
	if err1 != nil || err2 != nil || o < 0 {
		return 0, 0, false
	}
	if s.cursor(g, o) != c {
		return 0, 0, false
	}
	return g, o, true
}

// PreEncodeInvoicePages encodes every invoice page of that page size once
// (page size normalised like the page_size parameter; cursor chain of the
// generation at call time). Later requests with that effective page size and
// a matching cursor are served from these bytes, as long as the invoices,
// the cursor generation and the money format are unchanged.
func (s *Sim) PreEncodeInvoicePages(pageSize int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := s.pageSize(pageSize, true)
	n := len(s.invoices)
	pe := &preEncoded{gen: s.gen, money: s.money, pages: make([][]byte, max((n+ps-1)/ps, 1))}
	// Pages are encoded in parallel into large chunks (no regrowth copies;
	// at most one page of slack per chunk). Readers of s.invoices only.
	workers := min(runtime.GOMAXPROCS(0), max(len(pe.pages)/64, 1))
	per := (len(pe.pages) + workers - 1) / workers
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*per, min((w+1)*per, len(pe.pages))
		if lo >= hi {
			break
		}
		wg.Go(func() {
			const chunkSize = 8 << 20
			var chunk []byte
			est := 0
			for p := lo; p < hi; p++ {
				if cap(chunk)-len(chunk) < est+est/2+256 {
					chunk = make([]byte, 0, max(chunkSize, 2*est))
				}
				start := len(chunk)
				page := s.appendInvoicePage(chunk[start:start], p*ps, ps, pe.gen, pe.money)
				if len(page) <= cap(chunk)-start {
					chunk = chunk[:start+len(page)]
				}
				pe.pages[p] = page[:len(page):len(page)]
				est = max(est, len(page))
			}
		})
	}
	wg.Wait()
	if s.pre == nil {
		s.pre = map[int]*preEncoded{}
	}
	s.pre[ps] = pe
}

// ---- JSON encoding -------------------------------------------------------------

type kv struct {
	k string
	v any
}

// obj is a JSON object with ordered keys; decimal.Decimal values are money.
type obj []kv

type enc struct {
	b     []byte
	money bool
}

func (e *enc) val(v any) {
	switch x := v.(type) {
	case nil:
		e.b = append(e.b, "null"...)
	case string:
		e.b = appendString(e.b, x)
	case bool:
		e.b = strconv.AppendBool(e.b, x)
	case int:
		e.b = strconv.AppendInt(e.b, int64(x), 10)
	case int64:
		e.b = strconv.AppendInt(e.b, x, 10)
	case decimal.Decimal:
		e.b = appendMoney(e.b, x, e.money)
	case obj:
		e.b = append(e.b, '{')
		for i, f := range x {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.b = appendString(e.b, f.k)
			e.b = append(e.b, ':')
			e.val(f.v)
		}
		e.b = append(e.b, '}')
	case []obj:
		e.b = append(e.b, '[')
		for i, o := range x {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.val(o)
		}
		e.b = append(e.b, ']')
	case json.RawMessage:
		e.b = append(e.b, x...)
	default:
		j, err := json.Marshal(x)
		if err != nil {
			j = []byte("null")
		}
		e.b = append(e.b, j...)
	}
}

func appendMoney(b []byte, d decimal.Decimal, asString bool) []byte {
	if asString {
		b = append(b, '"')
		b = append(b, d.String()...)
		return append(b, '"')
	}
	return append(b, d.String()...)
}

func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s)
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
