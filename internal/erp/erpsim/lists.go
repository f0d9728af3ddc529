package erpsim

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
)

// ListPaging is how the one-list routes (cashboxes, cashbox reconciliations,
// payment and receipt vouchers, messaging conversations, messages, templates
// and queue) page. Installations differ here.
type ListPaging string

const (
	// ListPagingNone answers the whole list in the envelope of
	// SetListEnvelope (the default).
	ListPagingNone ListPaging = ""
	// ListPagingCursor answers {"ok":true,"data":[...],"pagination":
	// {"has_next","next_cursor"}} like the invoice list, honouring its
	// page_size and cursor parameters.
	ListPagingCursor ListPaging = "cursor"
	// ListPagingDRF answers {"count","next","previous","results"} pages of
	// ?page=N, with absolute next and previous links on the same origin.
	ListPagingDRF ListPaging = "drf"
	// ListPagingDataTables answers {"draw","recordsTotal","recordsFiltered",
	// "data"} for start/length, length defaulting to the page size.
	ListPagingDataTables ListPaging = "datatables"
	// ListPagingUnfollowable answers the first page as ListPagingCursor
	// does, with "has_next":true and no next_cursor at all: more exists but
	// there is no way to get it.
	ListPagingUnfollowable ListPaging = "unfollowable"
	// ListPagingUnfollowableDRF answers the first page as a DRF page whose
	// count exceeds its results (the real total, or one more than the page
	// when all fits) with "next":null.
	ListPagingUnfollowableDRF ListPaging = "unfollowable-drf"
)

// SetListPaging makes the one-list routes page in mode, pageSize records a
// page (DefaultPageSize when not positive; PageSizeCap at most). Any mode
// but ListPagingNone takes precedence over the list envelope.
func (s *Sim) SetListPaging(mode ListPaging, pageSize int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paging, s.pagingSize = mode, s.pageSize(pageSize, true)
}

// CursorRefusal is how a refused cursor (stale after InvalidateCursors, or
// not one the simulator issued) is answered, on the invoice list and on the
// one-list routes in cursor mode.
type CursorRefusal int

const (
	CursorRefusal400 CursorRefusal = iota // 400 {"ok":false,"error":"invalid cursor"} (the default)
	CursorRefusal404                      // 404 {"detail":"Invalid cursor"}, as Django REST framework answers
	CursorRefusal200                      // 200 {"ok":false,"error":"invalid cursor"}
)

// SetCursorRefusal changes how refused cursors are answered.
func (s *Sim) SetCursorRefusal(k CursorRefusal) { set(s, &s.refusal, k) }

func (s *Sim) refuseCursor(w http.ResponseWriter) {
	s.mu.Lock()
	k := s.refusal
	s.mu.Unlock()
	switch k {
	case CursorRefusal404:
		writeJSON(w, http.StatusNotFound, `{"detail":"Invalid cursor"}`)
	case CursorRefusal200:
		writeJSON(w, http.StatusOK, `{"ok":false,"error":"invalid cursor"}`)
	default:
		writeJSON(w, http.StatusBadRequest, `{"ok":false,"error":"invalid cursor"}`)
	}
}

// ---- the list pipeline ---------------------------------------------------------

// layout is how a route lays out its list.
type layout int

const (
	layoutOneList    layout = iota // the paging mode, else the envelope, in force
	layoutDataTables               // always DataTables, paged by start/length
	layoutData                     // always {"ok":true,"data":[...]}, whole
	layoutTree                     // as layoutData, records are tree nodes (drift reaches every depth)
)

// serveRecords answers a list route: the route's overrides first (empty,
// cut, field drift, unknown envelope), then its layout. recs are encoded
// records.
func (s *Sim) serveRecords(w http.ResponseWriter, r *http.Request, recs []json.RawMessage, lay layout) {
	o := s.override(r.URL.Path)
	if o.empty {
		recs = []json.RawMessage{}
	}
	if o.cut > 0 {
		recs = recs[:min(o.cut, len(recs))]
	}
	if o.drift != nil {
		for i := range recs {
			if lay == layoutTree {
				recs[i] = o.drift.applyTree(nil, recs[i])
			} else {
				recs[i] = o.drift.apply(nil, recs[i])
			}
		}
	}
	if o.unknownEnvelope {
		writeValue(w, http.StatusOK, map[string]any{"items": recs})
		return
	}
	if o.cut > 0 {
		s.writeCut(w, recs, lay)
		return
	}
	switch lay {
	case layoutDataTables:
		s.writeDataTables(w, r, recs, s.opts.DefaultPageSize)
	case layoutData:
		writeValue(w, http.StatusOK, okData{OK: true, Data: recs})
	default:
		s.mu.Lock()
		env, mode, ps := s.env, s.paging, s.pagingSize
		s.mu.Unlock()
		s.writePaged(w, r, recs, env, mode, ps)
	}
}

// writeCut writes a list cut at a default page size without a word of it:
// a bare array for a one-list route under EnvelopeArray, else
// {"ok":true,"data":[...]}. No count, next link, has_next or recordsTotal,
// whatever the paging mode or envelope in force.
func (s *Sim) writeCut(w http.ResponseWriter, recs []json.RawMessage, lay layout) {
	s.mu.Lock()
	env := s.env
	s.mu.Unlock()
	if lay == layoutOneList && env == EnvelopeArray {
		writeValue(w, http.StatusOK, recs)
		return
	}
	writeValue(w, http.StatusOK, okData{OK: true, Data: recs})
}

// writePaged writes a one-list route in paging mode, or in envelope env when
// the mode is ListPagingNone.
func (s *Sim) writePaged(w http.ResponseWriter, r *http.Request, recs []json.RawMessage, env Envelope, mode ListPaging, ps int) {
	switch mode {
	case ListPagingCursor:
		s.writeCursorPage(w, r, recs, ps)
	case ListPagingDRF:
		s.writeDRF(w, r, recs, ps, true)
	case ListPagingDataTables:
		s.writeDataTables(w, r, recs, ps)
	case ListPagingUnfollowable:
		page := recs[:min(ps, len(recs))]
		writeValue(w, http.StatusOK, unfollowablePage{OK: true, Data: page, Pagination: hasNextOnly{HasNext: true}})
	case ListPagingUnfollowableDRF:
		page := recs[:min(ps, len(recs))]
		writeValue(w, http.StatusOK, drfPage{Count: max(len(recs), len(page)+1), Results: page})
	default:
		s.writeEnvelope(w, r, recs, env)
	}
}

// writeEnvelope writes a whole list in envelope env.
func (s *Sim) writeEnvelope(w http.ResponseWriter, r *http.Request, recs []json.RawMessage, env Envelope) {
	switch env {
	case EnvelopeArray:
		writeValue(w, http.StatusOK, recs)
	case EnvelopeResults:
		s.writeDRF(w, r, recs, s.opts.PageSizeCap, false)
	case EnvelopeDataTables:
		s.writeDataTables(w, r, recs, len(recs))
	default:
		writeValue(w, http.StatusOK, okData{OK: true, Data: recs})
	}
}

type okData struct {
	OK   bool `json:"ok"`
	Data any  `json:"data"`
}

type cursorPage struct {
	OK         bool              `json:"ok"`
	Data       []json.RawMessage `json:"data"`
	Pagination pagination        `json:"pagination"`
}

type pagination struct {
	HasNext    bool    `json:"has_next"`
	NextCursor *string `json:"next_cursor"`
}

type unfollowablePage struct {
	OK         bool              `json:"ok"`
	Data       []json.RawMessage `json:"data"`
	Pagination hasNextOnly       `json:"pagination"`
}

type hasNextOnly struct {
	HasNext bool `json:"has_next"`
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

// writeCursorPage pages recs like the invoice list: page_size (default ps,
// PageSizeCap at most) and the cursor of the previous page.
func (s *Sim) writeCursorPage(w http.ResponseWriter, r *http.Request, recs []json.RawMessage, ps int) {
	q := r.URL.Query()
	if n, ok := intParam(q, "page_size"); ok && n > 0 {
		ps = min(n, s.opts.PageSizeCap)
	}
	s.mu.Lock()
	gen := s.gen
	s.mu.Unlock()
	off := 0
	if q.Has("cursor") {
		c, ok := s.parseCursor(q.Get("cursor"))
		if !ok || c.key || c.gen != gen {
			s.refuseCursor(w)
			return
		}
		off = min(int(c.v), len(recs))
	}
	end := min(off+ps, len(recs))
	out := cursorPage{OK: true, Data: recs[off:end]}
	if end < len(recs) {
		c := s.cursor(gen, end)
		out.Pagination = pagination{HasNext: true, NextCursor: &c}
	}
	writeValue(w, http.StatusOK, out)
}

// writeDRF answers a Django REST framework page: ?page=N (from 1) of size ps,
// with an absolute next link on the same origin, and a previous link when
// withPrevious (the plain results envelope leaves it null).
func (s *Sim) writeDRF(w http.ResponseWriter, r *http.Request, recs []json.RawMessage, ps int, withPrevious bool) {
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
	if withPrevious && page > 1 {
		q.Set("page", strconv.Itoa(page-1))
		if page == 2 {
			q.Del("page") // DRF's link to the first page has no page parameter
		}
		prev := sameOrigin(r, q)
		out.Previous = &prev
	}
	writeValue(w, http.StatusOK, out)
}

// sameOrigin is the absolute URL of the route of r with query q, under the
// path prefix r came in with (a fleet tenant's /t/<name>).
func sameOrigin(r *http.Request, q url.Values) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: r.Host, Path: basePath(r) + r.URL.Path, RawQuery: q.Encode()}
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
