package sync

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"net/url"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// View is one login of a source as a stream sees it, the same for a run, a
// verification and a probe: the login's scope, the source's paths and page
// size, and reads of the ERP. In a run, a read asked for once a stop was
// asked for returns the stop instead of asking the ERP, so a stream that
// reads many times between its steps stops at its next read without
// looking.
type View struct {
	target Target
	login  Login
	scope  model.Scope
	stop   <-chan struct{} // nil: never stopped
}

// Scope is which reading this is (source, stream, login), with the
// login's company and branch context: the labels of a row whose record
// carries none. A probe reads every stream through one View: its scope
// names no stream.
func (v *View) Scope() model.Scope { return v.scope }

// Path is p with a leading {name} replaced by the source's prefix of that
// name (see Target.Prefixes).
func (v *View) Path(p string) string { return v.target.Path(p) }

// PageSize is the number of records to ask for per page.
func (v *View) PageSize() int { return v.target.PageSize }

// Stopped returns a non-nil error once a stop was asked for.
func (v *View) Stopped() error {
	select {
	case <-v.stop:
		return errStopped
	default:
		return nil
	}
}

// Get reads one answer of the ERP (path under the base URL, see
// erp.DetailPath for ids in it).
func (v *View) Get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	if err := v.Stopped(); err != nil {
		return nil, err
	}
	return v.login.Client.Get(ctx, path, q)
}

// FirstPage reads the first page of a list route, for a look at it (a
// probe); the caller releases it.
func (v *View) FirstPage(ctx context.Context, req erp.ListRequest) (*erp.Page, error) {
	if err := v.Stopped(); err != nil {
		return nil, err
	}
	return v.login.Client.List(req).Next(ctx)
}

// Item is one record of a list: parsed when it is a JSON object (else
// Record is the zero Record), and its bytes as received.
type Item struct {
	Record erp.Record
	Raw    json.RawMessage
}

// Records reads a list route page by page, following its paging, and
// yields its records in order. A record's bytes are valid only until the
// loop body returns: its page is then released. Keep what is read from
// it (Record.Text copies), or use ReadList to keep the pages.
func (v *View) Records(ctx context.Context, req erp.ListRequest) iter.Seq2[Item, error] {
	return func(yield func(Item, error) bool) {
		l := v.login.Client.List(req)
		for {
			if err := v.Stopped(); err != nil {
				yield(Item{}, err)
				return
			}
			page, err := l.Next(ctx)
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(Item{}, err)
				return
			}
			more := true
			for i := range page.Records {
				if more = yield(item(page, i), nil); !more {
					break
				}
			}
			page.Release()
			if !more {
				return
			}
		}
	}
}

// ReadList reads a whole list route, every page, for a step: its records
// stay valid until the step that holds it (Step.Hold) is committed.
func (v *View) ReadList(ctx context.Context, req erp.ListRequest) (*Listed, error) {
	l := v.login.Client.List(req)
	out := &Listed{}
	for {
		if err := v.Stopped(); err != nil {
			out.release()
			return nil, err
		}
		page, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			out.release()
			return nil, err
		}
		out.pages = append(out.pages, page)
	}
}

// Listed is a list read whole (ReadList).
type Listed struct {
	pages []*erp.Page
}

// Items yields the records in order.
func (l *Listed) Items() iter.Seq[Item] {
	return func(yield func(Item) bool) {
		for _, p := range l.pages {
			for i := range p.Records {
				if !yield(item(p, i)) {
					return
				}
			}
		}
	}
}

// release hands the pages' memory back; it may be called on nil.
func (l *Listed) release() {
	if l == nil {
		return
	}
	for _, p := range l.pages {
		p.Release()
	}
	l.pages = nil
}

// item is record i of a page, parsed if the scanner did not.
func item(p *erp.Page, i int) Item {
	it := Item{Raw: p.Records[i]}
	if p.Parsed != nil && p.Parsed[i].IsObject() {
		it.Record = p.Parsed[i]
	} else if rec, err := erp.ParseRecord(it.Raw); err == nil {
		it.Record = rec
	}
	return it
}
