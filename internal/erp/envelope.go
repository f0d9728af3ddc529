package erp

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
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

	// Cursor paging: {ok, data, pagination: {has_next, next_cursor}}.
	// Pagination is true when the answer carried a pagination object.
	Pagination bool
	HasNext    bool
	NextCursor string

	// DRF paging: the link of the next page, if any, and the count of
	// the whole list (-1 when not given).
	Next  string
	Count int64

	// DataTables: total number of records, -1 when not given.
	RecordsTotal int64

	// Request is the address the page was fetched from, and Digest the
	// sha256 of the answer's bytes: the same request answered with the
	// same bytes is the same page (pages that Lister fetched only).
	Request string
	Digest  [sha256.Size]byte

	buf    []byte     // pooled memory answers are read into; see Release
	pooled bool       // the page came from pagePool
	fields []fieldPos // the fields of all Parsed records
}

// pagePool recycles pages, body and slices: without it a sweep allocates
// (and the garbage collector sweeps) its whole volume of JSON twice over.
var pagePool = sync.Pool{New: func() any { return new(Page) }}

func getPage() *Page {
	p := pagePool.Get().(*Page)
	p.reset()
	p.pooled = true
	return p
}

// reset empties p for the next answer, keeping its memory.
func (p *Page) reset() {
	*p = Page{RecordsTotal: -1, Count: -1, buf: p.buf, Records: p.Records[:0], Parsed: p.Parsed[:0], fields: p.fields[:0]}
}

// Release hands the page's memory back for the next page. The page, its
// Records and Parsed (and anything pointing into them) must not be used
// afterwards.
func (p *Page) Release() {
	if !p.pooled || cap(p.buf) > maxPooledPage {
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
	// OKFalse: the answer was {ok: false, ...}, the ERP's way of refusing.
	OKFalse bool
}

func (e *EnvelopeError) Error() string {
	if len(e.Keys) > 0 {
		return fmt.Sprintf("GET %s: %s (top-level keys: %s)", e.Route, e.Why, strings.Join(e.Keys, ", "))
	}
	return fmt.Sprintf("GET %s: %s", e.Route, e.Why)
}

// fetchPage GETs one page of a list route and decodes its envelope. The
// caller releases the page.
func (c *Client) fetchPage(ctx context.Context, route, target string) (*Page, error) {
	p := getPage()
	body, err := c.getURL(ctx, route, target, &p.buf)
	if err == nil {
		err = decodePage(route, body, p)
	}
	if err == nil {
		p.Request, p.Digest = target, sha256.Sum256(body)
	}
	if err != nil {
		p.Release()
		return nil, err
	}
	return p, nil
}

// DecodePage accepts the four list envelopes: a bare array; {ok,
// data[, pagination]}; DRF {count, next, results}; DataTables {draw,
// recordsTotal, recordsFiltered, data}. One validating pass; records are
// sub-slices of body, never re-encoded and never parsed into floats.
func DecodePage(route string, body []byte) (*Page, error) {
	p := &Page{RecordsTotal: -1, Count: -1}
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
		return &EnvelopeError{Route: route, Keys: keys, Why: "the ERP answered ok=false: " + msg, OKFalse: true}
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
		if n, ok := scalarText(top["count"]); ok {
			count, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				return &EnvelopeError{Route: route, Keys: keys, Why: "count is not an integer: " + n}
			}
			p.Count = count
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
		p.Pagination = true
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
	}
	return nil
}

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

// DecodeObject reads an answer that carries one object, as {ok, data:
// {...}} or as the object itself, and returns it split and as raw bytes.
// {ok: false} is an error that says what the ERP said.
func DecodeObject(route string, body []byte) (Record, json.RawMessage, error) {
	rec, err := ParseRecord(body)
	if err != nil {
		return Record{}, nil, fmt.Errorf("GET %s: %w", route, err)
	}
	if ok, _ := rec.Get("ok"); string(ok) == "false" {
		return Record{}, nil, &EnvelopeError{Route: route, Why: "the ERP answered ok=false: " + excerpt(body), OKFalse: true}
	}
	if data, ok := rec.Get("data"); ok && Kind(data) == "object" {
		rec, err := ParseRecord(data)
		if err != nil {
			return Record{}, nil, fmt.Errorf("GET %s: data: %w", route, err)
		}
		return rec, data, nil
	}
	return rec, body, nil
}
