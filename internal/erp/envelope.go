package erp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Page is one decoded list answer. Records keep the exact bytes received.
type Page struct {
	Envelope string // array | data | results | datatables
	Records  []json.RawMessage
	// Parsed holds Records[i] split into fields when it is an object
	// (Parsed[i].IsObject()), done in the same pass that validated it.
	Parsed []Record

	// Cursor paging (the invoice list).
	HasNext    bool
	NextCursor string

	// DRF paging: the link of the next page, if any.
	Next string

	// DataTables: total number of records, -1 when not given.
	RecordsTotal int64

	body   *bytes.Buffer // holds the bytes Records point into; see Release
	fields []fieldPos    // the fields of all Parsed records
}

// pagePool recycles pages, body and slices: without it a sweep allocates
// (and the garbage collector sweeps) its whole volume of JSON twice over.
var pagePool = sync.Pool{New: func() any { return &Page{body: new(bytes.Buffer)} }}

func getPage() *Page {
	p := pagePool.Get().(*Page)
	*p = Page{RecordsTotal: -1, body: p.body, Records: p.Records[:0], Parsed: p.Parsed[:0], fields: p.fields[:0]}
	return p
}

// Release hands the page's memory back for the next page. The page, its
// Records and Parsed (and anything pointing into them) must not be used
// afterwards.
func (p *Page) Release() {
	if p.body == nil || p.body.Cap() > maxPooledPage {
		return
	}
	clear(p.Records) // drop the references into the body
	clear(p.Parsed)
	pagePool.Put(p)
}

// maxPooledPage keeps one huge answer from pinning memory in the pool.
const maxPooledPage = 16 << 20

// EnvelopeError is a list answer of a shape the client does not know.
type EnvelopeError struct {
	Route string
	Keys  []string
	Why   string
}

func (e *EnvelopeError) Error() string {
	if len(e.Keys) > 0 {
		return fmt.Sprintf("GET %s: %s (top-level keys: %s)", e.Route, e.Why, strings.Join(e.Keys, ", "))
	}
	return fmt.Sprintf("GET %s: %s", e.Route, e.Why)
}

// List fetches one page of a list route and decodes its envelope. Call
// Release when done with the page to recycle its memory.
func (c *Client) List(ctx context.Context, path string, q url.Values) (*Page, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	p := getPage()
	body, err := c.getURL(ctx, RouteLabel(path), u.String(), p.body)
	if err == nil {
		err = decodePage(RouteLabel(path), body, p)
	}
	if err != nil {
		p.Release()
		return nil, err
	}
	return p, nil
}

// DecodePage accepts the four list envelopes of SPEC section 1: a bare
// array; {ok, data[, pagination]}; DRF {results, next}; DataTables {draw,
// recordsTotal, recordsFiltered, data}. One validating pass; records are
// sub-slices of body, never re-encoded and never parsed into floats.
func DecodePage(route string, body []byte) (*Page, error) {
	p := &Page{RecordsTotal: -1}
	if err := decodePage(route, body, p); err != nil {
		return nil, err
	}
	return p, nil
}

func decodePage(route string, body []byte, p *Page) error {
	if len(body) > maxBody {
		return fmt.Errorf("GET %s: %w", route, errTooLarge)
	}
	s := scanner{b: body}
	s.ws()
	if s.i >= len(body) {
		return &EnvelopeError{Route: route, Why: "empty body"}
	}
	malformed := func(err error) error { return fmt.Errorf("GET %s: malformed JSON: %w", route, err) }
	switch body[s.i] {
	case '[':
		if err := s.records(p); err != nil {
			return malformed(err)
		}
		if err := s.end(); err != nil {
			return malformed(err)
		}
		p.Envelope = "array"
		return nil
	case '{':
	default:
		return &EnvelopeError{Route: route, Why: "answer is neither a JSON array nor an object: " + excerpt(body)}
	}
	top, listKey, err := s.envelope(p)
	if err != nil {
		return malformed(err)
	}
	if err := s.end(); err != nil {
		return malformed(err)
	}
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	if ok, present := top["ok"]; present && string(ok) == "false" {
		msg := firstText(top, "error", "message", "detail", "errors")
		return &EnvelopeError{Route: route, Keys: keys, Why: "the ERP answered ok=false: " + msg}
	}
	if listKey == "" {
		return &EnvelopeError{Route: route, Keys: keys, Why: "unknown list envelope: no data or results array"}
	}
	switch {
	case listKey == "results":
		p.Envelope = "results"
		if next, ok := scalarText(top["next"]); ok {
			p.Next = next
		}
	case top["recordsTotal"] != nil || top["draw"] != nil:
		p.Envelope = "datatables"
		if n, ok := scalarText(top["recordsTotal"]); ok {
			total, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				return &EnvelopeError{Route: route, Keys: keys, Why: "recordsTotal is not an integer: " + n}
			}
			p.RecordsTotal = total
		}
	default:
		p.Envelope = "data"
	}
	if raw, ok := top["pagination"]; ok && Kind(raw) == "object" {
		pg, err := ParseRecord(raw)
		if err != nil {
			return fmt.Errorf("GET %s: pagination: %w", route, err)
		}
		hasNext, _ := pg.Get("has_next")
		switch string(hasNext) {
		case "true":
			p.HasNext = true
		case "false", "null", "":
		default:
			return &EnvelopeError{Route: route, Keys: keys, Why: "pagination.has_next is not a boolean: " + string(hasNext)}
		}
		cursor, _ := pg.Get("next_cursor")
		p.NextCursor, _ = scalarText(cursor)
		if p.HasNext && p.NextCursor == "" {
			return &EnvelopeError{Route: route, Keys: keys, Why: "pagination.has_next is true but next_cursor is empty"}
		}
	}
	return nil
}

func isArray(raw json.RawMessage) bool { return Kind(raw) == "array" }

func firstText(top map[string]json.RawMessage, keys ...string) string {
	for _, k := range keys {
		if raw, ok := top[k]; ok {
			if s, ok := scalarText(raw); ok {
				return excerpt([]byte(s))
			}
			return excerpt(raw)
		}
	}
	return "(no message)"
}

// Paging says how ListAll walks a one-list route.
type Paging struct {
	// DataTables sends start/length/draw and pages until recordsTotal.
	DataTables bool
	PageSize   int
	// MaxPages bounds DRF and DataTables walks against an ERP that never
	// says it is done. Default 100000.
	MaxPages int
}

// ListAll fetches every record of a one-list route: it follows DRF next
// links on the same origin and pages DataTables answers.
func (c *Client) ListAll(ctx context.Context, path string, q url.Values, pg Paging) ([]json.RawMessage, error) {
	route := RouteLabel(path)
	maxPages := pg.MaxPages
	if maxPages == 0 {
		maxPages = 100000
	}
	q = cloneValues(q)
	if pg.DataTables {
		q.Set("start", "0")
		q.Set("length", strconv.Itoa(pg.PageSize))
		q.Set("draw", "1")
	}
	page, err := c.List(ctx, path, q)
	if err != nil {
		return nil, err
	}
	all := page.Records
	for n := 2; ; n++ {
		switch {
		case page.Envelope == "results" && page.Next != "":
			next, err := c.sameOrigin(page.Next)
			if err != nil {
				return nil, fmt.Errorf("GET %s page %d: %w", route, n, err)
			}
			body, err := c.getURL(ctx, route, next, nil)
			if err != nil {
				return nil, fmt.Errorf("GET %s page %d: %w", route, n, err)
			}
			if page, err = DecodePage(route, body); err != nil {
				return nil, fmt.Errorf("page %d: %w", n, err)
			}
		case page.Envelope == "datatables" && pg.DataTables && page.RecordsTotal > int64(len(all)) && len(page.Records) > 0:
			q.Set("start", strconv.Itoa(len(all)))
			q.Set("draw", strconv.Itoa(n))
			if page, err = c.List(ctx, path, q); err != nil {
				return nil, fmt.Errorf("page %d: %w", n, err)
			}
		default:
			return all, nil
		}
		all = append(all, page.Records...)
		if n >= maxPages {
			return nil, fmt.Errorf("GET %s: more than %d pages; stopping", route, maxPages)
		}
	}
}

// sameOrigin resolves a next link and refuses one that leaves the ERP's
// origin: following it would hand the token to another host.
func (c *Client) sameOrigin(link string) (string, error) {
	u, err := c.base.Parse(link)
	if err != nil {
		return "", fmt.Errorf("next link %q is not a URL", link)
	}
	if u.Scheme != c.base.Scheme || u.Host != c.base.Host {
		return "", fmt.Errorf("next link leaves the ERP's origin (%s://%s); not followed", u.Scheme, u.Host)
	}
	return u.String(), nil
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = slices.Clone(v)
	}
	return out
}
