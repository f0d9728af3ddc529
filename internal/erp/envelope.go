package erp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
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
}

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

// List fetches one page of a list route and decodes its envelope.
func (c *Client) List(ctx context.Context, path string, q url.Values) (*Page, error) {
	body, err := c.Get(ctx, path, q)
	if err != nil {
		return nil, err
	}
	return DecodePage(RouteLabel(path), body)
}

// DecodePage accepts the four list envelopes of SPEC section 1: a bare
// array; {ok, data[, pagination]}; DRF {results, next}; DataTables {draw,
// recordsTotal, recordsFiltered, data}. One validating pass; records are
// sub-slices of body, never re-encoded and never parsed into floats.
func DecodePage(route string, body []byte) (*Page, error) {
	p := &Page{RecordsTotal: -1}
	s := scanner{b: body}
	s.ws()
	if s.i >= len(body) {
		return nil, &EnvelopeError{Route: route, Why: "empty body"}
	}
	malformed := func(err error) error { return fmt.Errorf("GET %s: malformed JSON: %w", route, err) }
	switch body[s.i] {
	case '[':
		if err := s.records(p); err != nil {
			return nil, malformed(err)
		}
		if err := s.end(); err != nil {
			return nil, malformed(err)
		}
		p.Envelope = "array"
		return p, nil
	case '{':
	default:
		return nil, &EnvelopeError{Route: route, Why: "answer is neither a JSON array nor an object: " + excerpt(body)}
	}
	top, listKey, err := s.envelope(p)
	if err != nil {
		return nil, malformed(err)
	}
	if err := s.end(); err != nil {
		return nil, malformed(err)
	}
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	if ok, present := top["ok"]; present && string(ok) == "false" {
		msg := firstText(top, "error", "message", "detail", "errors")
		return nil, &EnvelopeError{Route: route, Keys: keys, Why: "the ERP answered ok=false: " + msg}
	}
	if listKey == "" {
		return nil, &EnvelopeError{Route: route, Keys: keys, Why: "unknown list envelope: no data or results array"}
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
				return nil, &EnvelopeError{Route: route, Keys: keys, Why: "recordsTotal is not an integer: " + n}
			}
			p.RecordsTotal = total
		}
	default:
		p.Envelope = "data"
	}
	if raw, ok := top["pagination"]; ok && Kind(raw) == "object" {
		pg, err := ParseRecord(raw)
		if err != nil {
			return nil, fmt.Errorf("GET %s: pagination: %w", route, err)
		}
		hasNext, _ := pg.Get("has_next")
		switch string(hasNext) {
		case "true":
			p.HasNext = true
		case "false", "null", "":
		default:
			return nil, &EnvelopeError{Route: route, Keys: keys, Why: "pagination.has_next is not a boolean: " + string(hasNext)}
		}
		cursor, _ := pg.Get("next_cursor")
		p.NextCursor, _ = scalarText(cursor)
		if p.HasNext && p.NextCursor == "" {
			return nil, &EnvelopeError{Route: route, Keys: keys, Why: "pagination.has_next is true but next_cursor is empty"}
		}
	}
	return p, nil
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
			body, err := c.getURL(ctx, route, next)
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
