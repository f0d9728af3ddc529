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
	gen    uint64
	money  bool
	labels RecordLabels
	// pages are subslices of a few large chunks, or pages encoded on
	// demand; nil for a page a change of the list made stale.
	pages [][]byte
}

// preKey names a set of pre-encoded pages: page size and the view paged.
type preKey struct {
	ps   int
	view listView
}

// invoiceOwner is the company and branch an invoice belongs to for
// scoping: zero fields are Options', a null branch (-1) is the first
// branch.
func (s *Sim) invoiceOwner(v *Invoice) (company, branch int) {
	company, branch = v.CompanyID, v.BranchID
	if company == 0 {
		company = s.opts.CompanyID
	}
	switch {
	case branch == 0:
		branch = s.opts.BranchID
	case branch < 0:
		branch = s.branches[0]
	}
	return company, branch
}

// labeller writes the label fields of an invoice, with Options' company and
// branch for zero fields.
type labeller struct {
	mode            RecordLabels
	company, branch int
}

func (s *Sim) labeller(mode RecordLabels) labeller {
	return labeller{mode: mode, company: s.opts.CompanyID, branch: s.opts.BranchID}
}

func (l labeller) append(b []byte, v *Invoice) []byte {
	if l.mode == LabelsNone {
		return b
	}
	company, branch := v.CompanyID, v.BranchID
	if company == 0 {
		company = l.company
	}
	if branch == 0 {
		branch = l.branch
	}
	return appendLabels(b, l.mode, company, branch, false)
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
	ln := s.lensOf(r)

	s.mu.Lock()
	inv := s.invoiceView(ln.view)
	if o.empty {
		inv = invoiceView{}
	}
	off := 0
	if q.Has("cursor") {
		c, ok := s.parseCursor(q.Get("cursor"))
		if !ok || c.gen != s.gen {
			s.mu.Unlock()
			s.refuseCursor(w)
			return
		}
		off = c.start(inv)
	}
	sp := pageSpec{gen: s.gen, kind: s.cursorKind, money: s.money, lb: s.labeller(ln.labels), drift: o.drift}
	if o.unknownEnvelope {
		start := min(off, inv.len())
		body := appendInvoices(append([]byte(nil), `{"items":[`...), inv, start, min(start+ps, inv.len()), sp)
		s.mu.Unlock()
		writeBytes(w, http.StatusOK, append(body, "]}"...))
		return
	}
	if o.cut > 0 {
		// A default page size applied without a word: the first records, no
		// pagination object, whatever the request asked.
		body := appendInvoices(append([]byte(nil), `{"ok":true,"data":[`...), inv, 0, min(o.cut, inv.len()), sp)
		s.mu.Unlock()
		writeBytes(w, http.StatusOK, append(body, "]}"...))
		return
	}
	pe := s.pre[preKey{ps, ln.view}]
	if pe == nil || !o.isZero() || pe.gen != s.gen || pe.money != s.money || pe.labels != ln.labels || off%ps != 0 || off/ps >= len(pe.pages) {
		pe = nil
	}
	if pe != nil && pe.pages[off/ps] != nil {
		body := pe.pages[off/ps]
		s.mu.Unlock()
		writeBytes(w, http.StatusOK, body)
		return
	}
	body := s.appendInvoicePage(make([]byte, 0, 256*min(ps, max(inv.len()-off, 1))+128), inv, off, ps, sp)
	if pe != nil {
		pe.pages[off/ps] = body[:len(body):len(body)] // a page a change made stale, encoded again
	}
	s.mu.Unlock()
	writeBytes(w, http.StatusOK, body)
}

// pageSpec is how an invoice page is encoded: the cursor generation and
// kind of its next cursor, the money format, the labels and a drift (nil
// for none).
type pageSpec struct {
	gen   uint64
	kind  CursorKind
	money bool
	lb    labeller
	drift *fieldDrift
}

// appendInvoicePage encodes the page of inv starting at off. Caller holds
// s.mu.
func (s *Sim) appendInvoicePage(b []byte, inv invoiceView, off, ps int, sp pageSpec) []byte {
	start := min(off, inv.len())
	end := min(start+ps, inv.len())
	b = append(b, `{"ok":true,"data":[`...)
	b = appendInvoices(b, inv, start, end, sp)
	b = append(b, `],"pagination":{"has_next":`...)
	if end < inv.len() {
		b = append(b, `true,"next_cursor":"`...)
		if sp.kind == CursorLastKey {
			b = append(b, s.encodeCursor(cursor{gen: sp.gen, key: true, v: inv.at(end - 1).ID})...)
		} else {
			b = append(b, s.cursor(sp.gen, end)...)
		}
		b = append(b, `"}}`...)
	} else {
		b = append(b, `false,"next_cursor":null}}`...)
	}
	return b
}

// appendInvoices encodes the records start..end of inv separated by commas,
// drifting each record when sp says so.
func appendInvoices(b []byte, inv invoiceView, start, end int, sp pageSpec) []byte {
	var scratch []byte
	for i := start; i < end; i++ {
		if i > start {
			b = append(b, ',')
		}
		if sp.drift == nil {
			b = appendInvoice(b, inv.at(i), sp.money, sp.lb)
			continue
		}
		scratch = appendInvoice(scratch[:0], inv.at(i), sp.money, sp.lb)
		b = sp.drift.apply(b, scratch)
	}
	return b
}

// appendInvoice encodes one invoice; a record with Raw set is written as it
// is, without labels.
func appendInvoice(b []byte, v *Invoice, money bool, lb labeller) []byte {
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
	b = lb.append(b, v)
	return append(b, '}')
}

// cursor is what an invoice cursor (or a one-list route's) encodes: the
// generation it was issued in, and a position in the list or, for a
// last-key cursor, the id of the last record served.
type cursor struct {
	gen uint64
	key bool
	v   int64
}

// start is the index in inv of the first record of the page the cursor
// asks for.
func (c cursor) start(inv invoiceView) int {
	if c.key {
		return inv.startAfter(c.v)
	}
	return int(c.v)
}

// cursor encodes a position cursor of generation gen.
func (s *Sim) cursor(gen uint64, off int) string {
	return s.encodeCursor(cursor{gen: gen, v: int64(off)})
}

// encodeCursor encodes c as an opaque standard-base64 string. The plain
// text is "g<gen>|o<position>|" (or "g<gen>|k<id>|" for a last key) padded
// to a multiple of 3, then three bytes that encode as "++++", then a 4-byte
// checksum (so the encoding ends in "=="). Every cursor therefore needs
// URL-encoding.
func (s *Sim) encodeCursor(c cursor) string {
	b := make([]byte, 0, 48)
	b = append(b, 'g')
	b = strconv.AppendUint(b, c.gen, 10)
	if c.key {
		b = append(b, "|k"...)
	} else {
		b = append(b, "|o"...)
	}
	b = strconv.AppendInt(b, c.v, 10)
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

// parseCursor reads a cursor this simulator issued; false for anything
// else (garbage, tampered, another seed's).
func (s *Sim) parseCursor(text string) (cursor, bool) {
	raw, err := base64.StdEncoding.DecodeString(text)
	if err != nil || len(raw) < 5 || raw[0] != 'g' {
		return cursor{}, false
	}
	gs, rest, ok := strings.Cut(string(raw[1:]), "|")
	if !ok || rest == "" || (rest[0] != 'o' && rest[0] != 'k') {
		return cursor{}, false
	}
	c := cursor{key: rest[0] == 'k'}
	vs, _, ok := strings.Cut(rest[1:], "|")
	g, err1 := strconv.ParseUint(gs, 10, 64)
	v, err2 := strconv.ParseInt(vs, 10, 64)
	if !ok || err1 != nil || err2 != nil || (!c.key && v < 0) {
		return cursor{}, false
	}
	c.gen, c.v = g, v
	if s.encodeCursor(c) != text {
		return cursor{}, false
	}
	return c, true
}

// PreEncodeInvoicePages encodes every invoice page of that page size once
// (page size normalised like the page_size parameter; cursor chain of the
// generation at call time), for the list of every user (and of the plugin
// credentials) under the scope in force. Later requests with that effective
// page size and a matching cursor are served from these bytes, as long as
// the cursor generation, the money format, the record labels, the list
// order and the cursor kind are unchanged, the request's view is one
// encoded, and the route has no override (SetEmptyList, SetFieldDrift,
// SetListCut, ...). MutateInvoices and SetHostileInvoices drop them;
// AddInvoices, DeleteInvoices and ChangeInvoices drop only the pages they
// change (every page after the first one changed), which are then encoded
// again when first asked for.
func (s *Sim) PreEncodeInvoicePages(pageSize int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := s.pageSize(pageSize, true)
	if s.pre == nil {
		s.pre = map[preKey]*preEncoded{}
	}
	for _, v := range s.viewsInUse() {
		s.pre[preKey{ps, v}] = s.preEncode(s.invoiceView(v), ps)
	}
}

// preEncode encodes every page of inv. Caller holds s.mu.
func (s *Sim) preEncode(inv invoiceView, ps int) *preEncoded {
	n := inv.len()
	lb := s.labeller(s.labels)
	pe := &preEncoded{gen: s.gen, money: s.money, labels: s.labels, pages: make([][]byte, pageCount(n, ps))}
	sp := pageSpec{gen: pe.gen, kind: s.cursorKind, money: pe.money, lb: lb}
	// Pages are encoded in parallel into large chunks (no regrowth copies;
	// at most one page of slack per chunk). Readers of the list only.
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
				page := s.appendInvoicePage(chunk[start:start], inv, p*ps, ps, sp)
				if len(page) <= cap(chunk)-start {
					chunk = chunk[:start+len(page)]
				}
				pe.pages[p] = page[:len(page):len(page)]
				est = max(est, len(page))
			}
		})
	}
	wg.Wait()
	return pe
}

// pageCount is the number of pages of a list of n records, ps a page: an
// empty list has one, empty page.
func pageCount(n, ps int) int { return max((n+ps-1)/ps, 1) }

// forget drops the pages that a change of the list made stale: those from
// the one holding index first (the first record changed, added or
// deleted), and the last page of the list before and after (its has_next
// may change). oldLen and newLen are the view's lengths.
func (pe *preEncoded) forget(first, oldLen, newLen, ps int) {
	from := min(first, max(min(oldLen, newLen)-1, 0)) / ps
	for p := from; p < len(pe.pages); p++ {
		pe.pages[p] = nil
	}
	n := pageCount(newLen, ps)
	if n <= len(pe.pages) {
		pe.pages = pe.pages[:n]
		return
	}
	pe.pages = append(pe.pages, make([][]byte, n-len(pe.pages))...)
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
