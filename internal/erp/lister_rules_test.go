package erp

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestTheListerStartsWhereItWasAsked: a walk started at a saved
// position asks from there, and says where it stands after each page.
func TestTheListerStartsWhereItWasAsked(t *testing.T) {
	t.Parallel()
	t.Run("an offset-paged walk starts at Start", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var seen []string
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			mu.Lock()
			seen = append(seen, q.Get("start")+"/"+q.Get("length")+"/"+q.Get("draw"))
			mu.Unlock()
			start, _ := strconv.Atoi(q.Get("start"))
			var recs []string
			for i := start; i < min(start+2, 7); i++ {
				recs = append(recs, fmt.Sprintf(`{"id":%d}`, i))
			}
			fmt.Fprintf(w, `{"draw":1,"recordsTotal":7,"data":[%s]}`, strings.Join(recs, ","))
		})
		c := newTestClient(t, f.srv.URL, nil)
		l := c.List(ListRequest{Path: "/j/", Paging: OffsetPaged, PageSize: 2, Start: 4})
		var at []string
		pos := func() {
			cur, start := l.Position()
			at = append(at, fmt.Sprintf("%q@%d", cur, start))
		}
		pos()
		for {
			p, err := l.Next(testCtx(t))
			if err == io.EOF {
				break
			}
			if f.note(err) != nil {
				t.Fatal(err)
			}
			p.Release()
			pos()
		}
		mu.Lock()
		defer mu.Unlock()
		if got := strings.Join(seen, " "); got != "4/2/1 6/2/2" {
			t.Errorf("start/length/draw = %q, want 4/2/1 6/2/2", got)
		}
		if got := strings.Join(at, " "); got != `""@4 ""@6 ""@7` {
			t.Errorf("positions = %s", got)
		}
	})
	t.Run("a cursor-paged walk resumes at its cursor; Start is for offsets only", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var seen []string
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen = append(seen, r.URL.RawQuery)
			mu.Unlock()
			writeResp(w, http.StatusOK, `{"ok":true,"data":[{"id":1}],"pagination":{"has_next":false}}`)
		})
		c := newTestClient(t, f.srv.URL, nil)
		l := c.List(ListRequest{Path: "/sales/api/invoices/list/", Paging: CursorPaged, PageSize: 3, Cursor: "c9", Start: 5})
		if cur, start := l.Position(); cur != "c9" || start != 0 || l.Cursor() != "c9" {
			t.Errorf("Position = %q, %d; Cursor %q; want c9, 0, c9", cur, start, l.Cursor())
		}
		p, err := l.Next(testCtx(t))
		if f.note(err) != nil {
			t.Fatal(err)
		}
		p.Release()
		if cur, start := l.Position(); cur != "" || start != 1 || !l.Done() {
			t.Errorf("after the last page: Position = %q, %d, Done %v; want \"\", 1, true", cur, start, l.Done())
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(seen) != "[cursor=c9&page_size=3]" {
			t.Errorf("queries %q, want cursor=c9&page_size=3", seen)
		}
	})
	t.Run("a cursor-paged walk without a cursor asks without one", func(t *testing.T) {
		t.Parallel()
		var query string
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			query = r.URL.RawQuery
			writeResp(w, http.StatusOK, `{"ok":true,"data":[],"pagination":{"has_next":false}}`)
		})
		c := newTestClient(t, f.srv.URL, nil)
		p, err := c.List(ListRequest{Path: "/i/", Paging: CursorPaged, PageSize: 3}).Next(testCtx(t))
		if f.note(err) != nil {
			t.Fatal(err)
		}
		p.Release()
		if query != "page_size=3" {
			t.Errorf("query %q, want page_size=3", query)
		}
	})
}

// TestTheListerEndsWhenTheCountIsReached: a stated count equal to the
// records read is the whole list; one more is a list cut short.
func TestTheListerEndsWhenTheCountIsReached(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		paging  Paging
		body    string
		pageErr bool
	}{
		"DRF count equal to the records read":        {Unpaged, `{"count":2,"next":null,"results":[{"id":1},{"id":2}]}`, false},
		"DRF count one above the records read":       {Unpaged, `{"count":3,"next":null,"results":[{"id":1},{"id":2}]}`, true},
		"DataTables total equal to the records read": {OffsetPaged, `{"draw":1,"recordsTotal":2,"data":[{"id":1},{"id":2}]}`, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) { writeResp(w, http.StatusOK, tc.body) })
			c := newTestClient(t, f.srv.URL, nil)
			l := c.List(ListRequest{Path: "/r/", Paging: tc.paging, PageSize: 10})
			p, err := l.Next(testCtx(t))
			f.note(err)
			if tc.pageErr {
				want := "GET /r/ page 1: more records exist but cannot be followed: count is 3, 2 records were listed, and next is null"
				var pe *PagingError
				if !errors.As(err, &pe) || err.Error() != want || pe.Page != 1 {
					t.Errorf("err = %v, want %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p.Release()
			if !l.Done() || l.Total() != 2 {
				t.Errorf("Done %v, Total %d; want true, 2", l.Done(), l.Total())
			}
			if _, gets, _ := f.counts(); gets != 1 {
				t.Errorf("%d requests, want 1", gets)
			}
		})
	}
	t.Run("an empty DataTables page says where it started", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("start") == "0" {
				writeResp(w, http.StatusOK, `{"draw":1,"recordsTotal":9,"data":[{"id":1},{"id":2}]}`)
				return
			}
			writeResp(w, http.StatusOK, `{"draw":2,"recordsTotal":9,"data":[]}`)
		})
		c := newTestClient(t, f.srv.URL, nil)
		_, err := listAll(testCtx(t), c, ListRequest{Path: "/j/", Paging: OffsetPaged, PageSize: 2})
		f.note(err)
		want := "GET /j/ page 2: more records exist but cannot be followed: recordsTotal is 9 but the page from 2 is empty"
		if err == nil || err.Error() != want {
			t.Errorf("err = %v, want %q", err, want)
		}
	})
}

// TestTheListerFollowsOnlyItsOrigin: a next link is followed only to the
// ERP's own scheme and host; one that is not a URL is an error naming it.
func TestTheListerFollowsOnlyItsOrigin(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ next, want string }{
		"another scheme":  {"https://HOST/r/?page=2", "next link leaves the ERP's origin (https://HOST); not followed"},
		"not a URL":       {"http://[::1/r/", `next link "http://[::1/r/" is not a URL`},
		"the same origin": {"http://HOST/r/?page=2", ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFakeERP(t, nil)
			host := strings.TrimPrefix(f.srv.URL, "http://")
			f.set(func(f *fakeERP) {
				f.data = func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Query().Get("page") == "2" {
						writeResp(w, http.StatusOK, `{"next":null,"results":[]}`)
						return
					}
					writeResp(w, http.StatusOK, `{"next":"`+strings.ReplaceAll(tc.next, "HOST", host)+`","results":[{"id":1}]}`)
				}
			})
			c := newTestClient(t, f.srv.URL, nil)
			_, err := listAll(testCtx(t), c, ListRequest{Path: "/r/"})
			f.note(err)
			if tc.want == "" {
				if err != nil {
					t.Errorf("err = %v", err)
				}
				return
			}
			want := "GET /r/ page 2: " + strings.ReplaceAll(tc.want, "HOST", host)
			if err == nil || err.Error() != want {
				t.Errorf("err = %v, want %q", err, want)
			}
		})
	}
}

// TestACursorRefusal says the ERP refused the cursor and keeps the
// answer it refused with.
func TestACursorRefusal(t *testing.T) {
	t.Parallel()
	f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
		writeResp(w, http.StatusConflict, `{"detail":"busy"}`)
	})
	c := newTestClient(t, f.srv.URL, nil)
	_, err := c.List(ListRequest{Path: "/i/", Paging: CursorPaged, PageSize: 5, Cursor: "old"}).Next(testCtx(t))
	f.note(err)
	var cr *CursorRefusedError
	var he *HTTPError
	if errors.As(err, &cr) || !errors.As(err, &he) {
		t.Errorf("409 with a cursor: err = %v, want a plain HTTPError (only 400, 404 and ok=false refuse a cursor)", err)
	}
	inner := &HTTPError{Method: http.MethodGet, Route: "/i/", Status: 400, Excerpt: "invalid cursor"}
	e := &CursorRefusedError{Route: "/i/", Err: inner}
	if !errors.Is(e, inner) || !strings.HasPrefix(e.Error(), "GET /i/: the ERP refused the cursor: ") {
		t.Errorf("CursorRefusedError = %q, unwrapping to %v", e, errors.Unwrap(e))
	}
}
