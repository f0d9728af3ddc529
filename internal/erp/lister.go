package erp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
)

// Paging is how the first page of a list route is asked for. Whatever it
// is, the paging signals of each answer are followed (see follow).
type Paging int

const (
	// Unpaged asks for the list without paging parameters.
	Unpaged Paging = iota
	// CursorPaged asks with page_size, then with cursor=next_cursor while
	// pagination.has_next is true.
	CursorPaged
	// OffsetPaged asks DataTables-style, with start, length and draw.
	OffsetPaged
)

// ListRequest describes one walk through a list route.
type ListRequest struct {
	Path     string     // under the base URL; id segments escaped (see DetailPath)
	Query    url.Values // filters, sent with every page
	Paging   Paging
	PageSize int
	// Cursor resumes a cursor-paged walk at a position saved earlier.
	Cursor string
	// Start begins an offset-paged walk at this record (a position saved
	// earlier).
	Start int64
	// MaxPages bounds a walk against an ERP that never says it is done;
	// default 1,000,000.
	MaxPages int
}

// Asked is the page size the walk's requests name: 0 for an unpaged walk,
// which names none (the ERP's own default, if any, then applies).
func (r ListRequest) Asked() int {
	if r.Paging == Unpaged {
		return 0
	}
	return r.PageSize
}

// Lister reads a list route page by page. After each answer it decides,
// by one rule (follow), whether more pages exist and how to ask for the
// next: pagination.has_next with next_cursor, a DRF next link on the same
// origin, or DataTables start/length until recordsTotal. An answer that
// says more records exist without a way to ask for them is an error, so
// that a caller never takes a partial list for the whole.
type Lister struct {
	c     *Client
	req   ListRequest
	route string

	next   string // URL of the next request; "" once the last page was read
	cursor string // the cursor the next request carries, if any
	read   int64  // records read so far
	pages  int
	total  int64 // what the ERP says the list holds; -1 unknown
	done   bool
}

// List starts a walk; nothing is fetched before Next.
func (c *Client) List(req ListRequest) *Lister {
	if req.MaxPages == 0 {
		req.MaxPages = 1_000_000
	}
	l := &Lister{c: c, req: req, route: RouteLabel(req.Path), total: -1, cursor: req.Cursor}
	if req.Paging == OffsetPaged {
		l.read = req.Start
	}
	q := cloneValues(req.Query)
	switch req.Paging {
	case CursorPaged:
		q.Set("page_size", strconv.Itoa(req.PageSize))
		if req.Cursor != "" {
			q.Set("cursor", req.Cursor)
		}
	case OffsetPaged:
		l.setOffset(q, l.read, 1)
	}
	l.next = c.url(req.Path, q)
	return l
}

// Next fetches the next page; io.EOF after the last one. The caller owns
// the page and releases it.
func (l *Lister) Next(ctx context.Context) (*Page, error) {
	if l.done {
		return nil, io.EOF
	}
	carriedCursor := l.cursor != ""
	p, err := l.c.fetchPage(ctx, l.route, l.next)
	if err != nil {
		if carriedCursor && cursorRefused(err) {
			return nil, &CursorRefusedError{Route: l.route, Err: err}
		}
		return nil, err
	}
	if err := l.follow(p); err != nil {
		p.Release()
		return nil, err
	}
	return p, nil
}

// Done reports whether the last page was read.
func (l *Lister) Done() bool { return l.done }

// Cursor is where a cursor-paged walk stands: the cursor of the next page
// ("" before the first page, after the last, or when the route does not
// page by cursor and so cannot be resumed).
func (l *Lister) Cursor() string { return l.cursor }

// Position is where the next request starts: the cursor it carries (""
// for the first page of a cursor-paged walk, or when the route is not
// paged by cursor), and the record it starts at (offset-paged walks; the
// records read so far otherwise). A walk started at that position asks
// the same request again.
func (l *Lister) Position() (cursor string, start int64) { return l.cursor, l.read }

// Total is the size of the whole list as the ERP stated it (DataTables
// recordsTotal, DRF count), or -1 when it did not say.
func (l *Lister) Total() int64 { return l.total }

// follow is the one rule of what comes after a page.
func (l *Lister) follow(p *Page) error {
	l.pages++
	l.read += int64(len(p.Records))
	current := l.next
	q := cloneValues(l.req.Query)
	l.next, l.cursor = "", ""
	switch {
	case p.Pagination:
		if !p.HasNext {
			break
		}
		if p.NextCursor == "" {
			return l.unfollowable("pagination.has_next is true but next_cursor is empty")
		}
		if l.req.Paging == CursorPaged {
			q.Set("page_size", strconv.Itoa(l.req.PageSize))
		}
		q.Set("cursor", p.NextCursor)
		l.next, l.cursor = l.c.url(l.req.Path, q), p.NextCursor
	case p.Envelope == "results":
		l.total = p.Count
		if p.Next != "" {
			next, err := l.c.sameOrigin(p.Next)
			if err != nil {
				return fmt.Errorf("GET %s page %d: %w", l.route, l.pages+1, err)
			}
			l.next = next
		} else if p.Count > l.read {
			return l.unfollowable(fmt.Sprintf("count is %d, %d records were listed, and next is null", p.Count, l.read))
		}
	case p.Envelope == "datatables":
		l.total = p.RecordsTotal
		if p.RecordsTotal > l.read {
			if len(p.Records) == 0 {
				return l.unfollowable(fmt.Sprintf("recordsTotal is %d but the page from %d is empty", p.RecordsTotal, l.read-int64(len(p.Records))))
			}
			l.setOffset(q, l.read, l.pages+1)
			l.next = l.c.url(l.req.Path, q)
		}
	}
	if l.next == "" {
		l.done = true
		return nil
	}
	if l.next == current {
		return l.unfollowable("the answer names the page just read as the next one")
	}
	if l.pages >= l.req.MaxPages {
		return fmt.Errorf("GET %s: more than %d pages; stopping", l.route, l.req.MaxPages)
	}
	return nil
}

func (l *Lister) setOffset(q url.Values, start int64, draw int) {
	q.Set("start", strconv.FormatInt(start, 10))
	q.Set("length", strconv.Itoa(max(l.req.PageSize, 1)))
	q.Set("draw", strconv.Itoa(draw))
}

func (l *Lister) unfollowable(why string) error {
	return &PagingError{Route: l.route, Page: l.pages, Why: why}
}

// PagingError is an answer that says more records exist but gives no
// usable way to ask for them: the list read so far is not the whole.
type PagingError struct {
	Route string
	Page  int
	Why   string
}

func (e *PagingError) Error() string {
	return fmt.Sprintf("GET %s page %d: more records exist but cannot be followed: %s", e.Route, e.Page, e.Why)
}

// CursorRefusedError is a request carrying a cursor that the ERP refused
// (400, 404, or ok=false): the cursor expired or the ERP was upgraded. A
// saved position cannot be repaired; the walk must start over.
type CursorRefusedError struct {
	Route string
	Err   error
}

func (e *CursorRefusedError) Error() string {
	return fmt.Sprintf("GET %s: the ERP refused the cursor: %v", e.Route, e.Err)
}
func (e *CursorRefusedError) Unwrap() error { return e.Err }

func cursorRefused(err error) bool {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status == http.StatusBadRequest || he.Status == http.StatusNotFound
	}
	var ee *EnvelopeError
	return errors.As(err, &ee) && ee.OKFalse
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
