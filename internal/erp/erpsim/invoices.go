package erpsim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/shopspring/decimal"
)

// The invoice list is encoded by hand, not through encoding/json: it is the
// one route that benchmarks push millions of records through.

type preEncoded struct {
	gen   uint64
	money bool
	pages [][]byte // subslices of a few large chunks
}

// invoiceListPath is the route of the invoice list.
const invoiceListPath = "/sales/api/invoices/list/"

func (s *Sim) serveInvoices(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Has("page") || q.Has("offset") {
		writeJSON(w, http.StatusBadRequest, `{"ok":false,"error":"page and offset are not supported on this route; use cursor"}`)
		return
	}
	n, ok := intParam(q, "page_size")
	ps := s.pageSize(n, ok)
	o := s.override(r.URL.Path)

	s.mu.Lock()
	off := 0
	if q.Has("cursor") {
		g, c, ok := s.parseCursor(q.Get("cursor"))
		if !ok || g != s.gen {
			s.mu.Unlock()
			s.refuseCursor(w)
			return
		}
		off = c
	}
	inv := s.listed
	if o.empty {
		inv = nil
	}
	if o.unknownEnvelope {
		page := inv[min(off, len(inv)):min(off+ps, len(inv))]
		body := appendInvoices(append([]byte(nil), `{"items":[`...), page, s.money, o.drift)
		s.mu.Unlock()
		writeBytes(w, http.StatusOK, append(body, "]}"...))
		return
	}
	if pe := s.pre[ps]; pe != nil && o.isZero() && pe.gen == s.gen && pe.money == s.money && off%ps == 0 && off/ps < len(pe.pages) {
		body := pe.pages[off/ps]
		s.mu.Unlock()
		writeBytes(w, http.StatusOK, body)
		return
	}
	body := s.appendInvoicePage(make([]byte, 0, 256*min(ps, max(len(inv)-off, 1))+128), inv, off, ps, s.gen, s.money, o.drift)
	s.mu.Unlock()
	writeBytes(w, http.StatusOK, body)
}

// appendInvoicePage encodes the page of inv starting at off. Caller holds
// s.mu.
func (s *Sim) appendInvoicePage(b []byte, inv []Invoice, off, ps int, gen uint64, money bool, d *fieldDrift) []byte {
	start := min(off, len(inv))
	end := min(start+ps, len(inv))
	b = append(b, `{"ok":true,"data":[`...)
	b = appendInvoices(b, inv[start:end], money, d)
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

// appendInvoices encodes inv separated by commas, drifting each record when
// d is set.
func appendInvoices(b []byte, inv []Invoice, money bool, d *fieldDrift) []byte {
	var scratch []byte
	for i := range inv {
		if i > 0 {
			b = append(b, ',')
		}
		if d == nil {
			b = appendInvoice(b, &inv[i], money)
			continue
		}
		scratch = appendInvoice(scratch[:0], &inv[i], money)
		b = d.apply(b, scratch)
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
// the cursor generation and the money format are unchanged and the route
// has no override (SetEmptyList, SetFieldDrift, ...).
func (s *Sim) PreEncodeInvoicePages(pageSize int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := s.pageSize(pageSize, true)
	n := len(s.listed)
	pe := &preEncoded{gen: s.gen, money: s.money, pages: make([][]byte, max((n+ps-1)/ps, 1))}
	// Pages are encoded in parallel into large chunks (no regrowth copies;
	// at most one page of slack per chunk). Readers of s.listed only.
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
				page := s.appendInvoicePage(chunk[start:start], s.listed, p*ps, ps, pe.gen, pe.money, nil)
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

// ---- money and strings ---------------------------------------------------------

// money is an exact amount in the fixtures. It is written from its decimal
// digits, never through float64: as a JSON number, or as a JSON string when
// the fixture set is rendered for money-as-string mode.
type money struct {
	d        decimal.Decimal
	asString bool
	// literal, when set, is written instead of d: a hostile number such as
	// 1e999999, whose digits decimal.Decimal.String would spell out in full.
	literal string
}

func (m money) MarshalJSON() ([]byte, error) {
	if m.literal != "" {
		if m.asString {
			return []byte(`"` + m.literal + `"`), nil
		}
		return []byte(m.literal), nil
	}
	return appendMoney(nil, m.d, m.asString), nil
}

func appendMoney(b []byte, d decimal.Decimal, asString bool) []byte {
	if asString {
		b = append(b, '"')
		b = append(b, d.String()...)
		return append(b, '"')
	}
	return append(b, d.String()...)
}

// appendString writes s as a JSON string with the same escaping as
// encoding/json, taking a fast path for plain ASCII.
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
