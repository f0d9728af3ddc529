package erp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

// TestLister documents the Lister: how it walks a list's pages, following
// every paging signal of every envelope, and fails a walk it cannot finish
// rather than take part of a list for the whole.
func TestLister(t *testing.T) {
	t.Parallel()
	t.Run("FollowsDRFNextLinksKeepingTheQuery", func(t *testing.T) {
		t.Parallel()
		const path = "/accounts/api/payment-vouchers/"
		var pages []string
		var mu sync.Mutex
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != path {
				t.Errorf("path = %q", r.URL.Path)
			}
			q := r.URL.Query()
			mu.Lock()
			pages = append(pages, q.Get("page"))
			mu.Unlock()
			if q.Get("status") != "posted" {
				t.Errorf("query %q lost the filter", r.URL.RawQuery)
			}
			switch q.Get("page") {
			case "":
				next := "http://" + r.Host + path + "?page=2&status=posted"
				writeResp(w, http.StatusOK, `{"count":5,"next":"`+next+`","previous":null,"results":[{"id":1},{"id":2}]}`)
			case "2":
				// An absolute-path link is resolved against the base URL.
				writeResp(w, http.StatusOK, `{"count":5,"next":"`+path+`?page=3&status=posted","previous":null,"results":[{"id":3},{"id":4}]}`)
			case "3":
				writeResp(w, http.StatusOK, `{"count":5,"next":null,"previous":"x","results":[{"id":5}]}`)
			default:
				writeResp(w, http.StatusNotFound, `{"detail":"Invalid page."}`)
			}
		})
		c := newTestClient(t, f.srv.URL, nil)
		recs, err := listAll(testCtx(t), c, ListRequest{Path: path, Query: url.Values{"status": {"posted"}}})
		if f.note(err) != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range recs {
			ids = append(ids, string(r))
		}
		if got := strings.Join(ids, ","); got != `{"id":1},{"id":2},{"id":3},{"id":4},{"id":5}` {
			t.Errorf("records = %s", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if strings.Join(pages, ",") != ",2,3" {
			t.Errorf("pages requested = %q", pages)
		}
	})

	t.Run("RefusesADRFNextLinkToAnotherOrigin", func(t *testing.T) {
		t.Parallel()
		var elsewhere atomic.Int32
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			elsewhere.Add(1)
			writeResp(w, http.StatusOK, `{"next":null,"results":[]}`)
		}))
		defer other.Close()
		for _, next := range []string{
			"https://evil.example.com/accounts/api/payment-vouchers/?page=2",
			other.URL + "/accounts/api/payment-vouchers/?page=2", // same host, other port
			"//evil.example.com/x/?page=2",
		} {
			f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
				b, _ := json.Marshal(map[string]any{"count": 2, "next": next, "results": []any{map[string]int{"id": 1}}})
				writeResp(w, http.StatusOK, string(b))
			})
			c := newTestClient(t, f.srv.URL, nil)
			recs, err := listAll(testCtx(t), c, ListRequest{Path: "/accounts/api/payment-vouchers/"})
			f.note(err)
			if err == nil || !strings.Contains(err.Error(), "leaves the ERP's origin") {
				t.Errorf("next %q: err = %v (records %d), want 'leaves the ERP's origin'", next, err, len(recs))
			}
		}
		if n := elsewhere.Load(); n != 0 {
			t.Errorf("the other origin got %d requests", n)
		}
	})

	t.Run("PagesDataTablesByStartAndLength", func(t *testing.T) {
		t.Parallel()
		const total, serverCap = 7, 2
		var seen []string
		var mu sync.Mutex
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			start, err1 := strconv.Atoi(q.Get("start"))
			length, err2 := strconv.Atoi(q.Get("length"))
			if err1 != nil || err2 != nil || q.Get("draw") == "" {
				t.Errorf("query %q lacks start/length/draw", r.URL.RawQuery)
			}
			if q.Get("branch_id") != "4" {
				t.Errorf("query %q lost branch_id", r.URL.RawQuery)
			}
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%d/%d/%s", start, length, q.Get("draw")))
			mu.Unlock()
			end := min(start+min(length, serverCap), total)
			var recs []string
			for i := start; i < end; i++ {
				recs = append(recs, fmt.Sprintf(`{"id":"JE-%d"}`, i+1))
			}
			fmt.Fprintf(w, `{"draw":%s,"recordsTotal":%d,"recordsFiltered":%d,"data":[%s]}`, q.Get("draw"), total, total, strings.Join(recs, ","))
		})
		c := newTestClient(t, f.srv.URL, nil)
		recs, err := listAll(testCtx(t), c, ListRequest{Path: "/accounts/api/journal-entries/", Query: url.Values{"branch_id": {"4"}}, Paging: OffsetPaged, PageSize: 3})
		if f.note(err) != nil {
			t.Fatal(err)
		}
		if len(recs) != total {
			t.Fatalf("%d records, want %d", len(recs), total)
		}
		for i, r := range recs {
			if want := fmt.Sprintf(`{"id":"JE-%d"}`, i+1); string(r) != want {
				t.Errorf("record %d = %s, want %s", i, r, want)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if got := strings.Join(seen, " "); got != "0/3/1 2/3/2 4/3/3 6/3/4" {
			t.Errorf("start/length/draw = %q", got)
		}
	})

	t.Run("FailsOnAnEmptyDataTablesPageBeforeTheTotal", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int32
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				writeResp(w, http.StatusOK, `{"draw":1,"recordsTotal":100,"recordsFiltered":100,"data":[{"id":1}]}`)
				return
			}
			writeResp(w, http.StatusOK, `{"draw":2,"recordsTotal":100,"recordsFiltered":100,"data":[]}`)
		})
		c := newTestClient(t, f.srv.URL, nil)
		// recordsTotal says 99 more exist but the next page is empty: the list
		// read is not the whole, and taking it for the whole would mark live
		// rows deleted.
		_, err := listAll(testCtx(t), c, ListRequest{Path: "/j/", Paging: OffsetPaged, PageSize: 10})
		f.note(err)
		var pe *PagingError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "recordsTotal is 100") {
			t.Errorf("err = %v, want a PagingError about recordsTotal", err)
		}
		if n.Load() != 2 {
			t.Errorf("requests %d, want 2", n.Load())
		}
	})

	t.Run("StopsAtMaxPagesAndAtALoop", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			// An ERP that always has a next page.
			n, _ := strconv.Atoi(r.URL.Query().Get("page"))
			writeResp(w, http.StatusOK, fmt.Sprintf(`{"next":"/loop/?page=%d","results":[{"id":1}]}`, n+1))
		})
		c := newTestClient(t, f.srv.URL, nil)
		_, err := listAll(testCtx(t), c, ListRequest{Path: "/loop/", MaxPages: 5})
		f.note(err)
		if err == nil || !strings.Contains(err.Error(), "more than 5 pages") {
			t.Fatalf("err = %v", err)
		}
		if _, gets, _ := f.counts(); gets != 5 {
			t.Errorf("gets = %d, want 5", gets)
		}
		// A next link naming the page just read is a loop, not more pages.
		loop := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			writeResp(w, http.StatusOK, `{"next":"/same/","results":[{"id":1}]}`)
		})
		c = newTestClient(t, loop.srv.URL, nil)
		_, err = listAll(testCtx(t), c, ListRequest{Path: "/same/"})
		loop.note(err)
		if err == nil || !strings.Contains(err.Error(), "page just read") {
			t.Fatalf("loop: err = %v", err)
		}
	})

	t.Run("ReadsABareArrayAndNamesTheRouteOfAnUnknownEnvelope", func(t *testing.T) {
		t.Parallel()
		var body atomic.Value
		body.Store(`[{"id":1},{"id":2}]`)
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			writeResp(w, http.StatusOK, body.Load().(string))
		})
		c := newTestClient(t, f.srv.URL, nil)
		ctx := testCtx(t)
		recs, err := listAll(ctx, c, ListRequest{Path: "/accounts/api/cashboxes/"})
		if f.note(err) != nil || len(recs) != 2 {
			t.Fatalf("listAll = %d records, %v", len(recs), err)
		}
		body.Store(`{"ok":true,"items":[]}`)
		_, err = listAll(ctx, c, ListRequest{Path: "/accounts/api/cashboxes/"})
		f.note(err)
		var ee *EnvelopeError
		if !errors.As(err, &ee) || !strings.Contains(err.Error(), "/accounts/api/cashboxes/") {
			t.Errorf("err = %v, want *EnvelopeError naming the route", err)
		}
	})

	// An answer that says more exists without a way to ask for it fails the
	// walk: the records read are not the whole list.
	t.Run("FailsWhenMoreExistsWithoutAWayToAskForIt", func(t *testing.T) {
		t.Parallel()
		for name, body := range map[string]string{
			"HasNextWithoutCursor":         `{"ok":true,"data":[{"id":1}],"pagination":{"has_next":true,"next_cursor":""}}`,
			"HasNextWithNullCursor":        `{"ok":true,"data":[{"id":1}],"pagination":{"has_next":true,"next_cursor":null}}`,
			"HasNextWithMissingCursor":     `{"ok":true,"data":[{"id":1}],"pagination":{"has_next":true}}`,
			"CountAboveResultsWithoutNext": `{"count":5,"next":null,"results":[{"id":1}]}`,
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) { writeResp(w, http.StatusOK, body) })
				c := newTestClient(t, f.srv.URL, nil)
				_, err := listAll(testCtx(t), c, ListRequest{Path: "/r/"})
				f.note(err)
				var pe *PagingError
				if !errors.As(err, &pe) || !strings.Contains(err.Error(), "/r/") || !strings.Contains(err.Error(), "cannot be followed") {
					t.Errorf("err = %v, want a PagingError naming the route", err)
				}
			})
		}
	})

	// A one-list route that starts paging by cursor is followed to its end.
	t.Run("FollowsACursorOnAnyRoute", func(t *testing.T) {
		t.Parallel()
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("cursor") == "" {
				writeResp(w, http.StatusOK, `{"ok":true,"data":[{"id":1}],"pagination":{"has_next":true,"next_cursor":"c+2"}}`)
				return
			}
			writeResp(w, http.StatusOK, `{"ok":true,"data":[{"id":2}],"pagination":{"has_next":false,"next_cursor":null}}`)
		})
		c := newTestClient(t, f.srv.URL, nil)
		recs, err := listAll(testCtx(t), c, ListRequest{Path: "/accounts/api/cashboxes/"})
		if f.note(err) != nil || len(recs) != 2 {
			t.Fatalf("records %d, err %v; want both pages", len(recs), err)
		}
	})

	t.Run("SendsItsCursorPercentEncoded", func(t *testing.T) {
		t.Parallel()
		const cursor = "Zz+/ab+++cd/ef==&x=1 ?#%"
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			if got := q.Get("cursor"); got != cursor {
				t.Errorf("cursor arrived as %q, want %q (raw query %q)", got, cursor, r.URL.RawQuery)
			}
			if got := q.Get("page_size"); got != "100" {
				t.Errorf("page_size = %q", got)
			}
			if len(q) != 2 {
				t.Errorf("query = %v, want only cursor and page_size", q)
			}
			if !strings.Contains(r.URL.RawQuery, "%2B") || !strings.Contains(r.URL.RawQuery, "%2F") || !strings.Contains(r.URL.RawQuery, "%3D") {
				t.Errorf("raw query %q: '+', '/' and '=' should arrive percent-encoded", r.URL.RawQuery)
			}
			writeResp(w, http.StatusOK, `{"ok":true,"data":[],"pagination":{"has_next":false,"next_cursor":null}}`)
		})
		c := newTestClient(t, f.srv.URL, nil)
		p, err := c.List(ListRequest{Path: "/sales/api/invoices/list/", Paging: CursorPaged, PageSize: 100, Cursor: cursor}).Next(testCtx(t))
		if f.note(err) != nil {
			t.Fatal(err)
		}
		if p.Envelope != "data" || p.HasNext {
			t.Errorf("page = %+v", p)
		}
	})

	// A saved cursor refused with 400, 404 or ok=false is a CursorRefusedError.
	t.Run("TellsARefusedCursorFromAFailure", func(t *testing.T) {
		t.Parallel()
		for name, answer := range map[string]struct {
			status int
			body   string
		}{
			"400":      {http.StatusBadRequest, `{"ok":false,"error":"invalid cursor"}`},
			"404":      {http.StatusNotFound, `{"detail":"not found"}`},
			"ok=false": {http.StatusOK, `{"ok":false,"error":"invalid cursor"}`},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) { writeResp(w, answer.status, answer.body) })
				c := newTestClient(t, f.srv.URL, nil)
				_, err := c.List(ListRequest{Path: "/sales/api/invoices/list/", Paging: CursorPaged, PageSize: 5, Cursor: "old"}).Next(testCtx(t))
				f.note(err)
				var cr *CursorRefusedError
				if !errors.As(err, &cr) {
					t.Errorf("err = %v, want *CursorRefusedError", err)
				}
				// Without a cursor the same answers are ordinary failures.
				_, err = c.List(ListRequest{Path: "/sales/api/invoices/list/", Paging: CursorPaged, PageSize: 5}).Next(testCtx(t))
				if errors.As(err, &cr) || err == nil {
					t.Errorf("first page: err = %v, want a plain error", err)
				}
			})
		}
	})

	// A refused cursor's error says the ERP refused the cursor and keeps
	// the answer it refused with.
	t.Run("TakesOnly400And404AndOKFalseForACursorRefusal", func(t *testing.T) {
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
	})

	// A walk started at a saved position asks from there, and says where it
	// stands after each page.
	t.Run("StartsWhereItWasAsked", func(t *testing.T) {
		t.Parallel()
		t.Run("AnOffsetPagedWalkStartsAtStart", func(t *testing.T) {
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
		t.Run("ACursorPagedWalkResumesAtItsCursorAndLeavesStartToOffsets", func(t *testing.T) {
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
		t.Run("ACursorPagedWalkWithoutACursorAsksWithoutOne", func(t *testing.T) {
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
	})

	// A stated count equal to the records read is the whole list; one more
	// is a list cut short.
	t.Run("EndsWhenTheCountIsReached", func(t *testing.T) {
		t.Parallel()
		for name, tc := range map[string]struct {
			paging  Paging
			body    string
			pageErr bool
		}{
			"DRFCountEqualToTheRecordsRead":        {Unpaged, `{"count":2,"next":null,"results":[{"id":1},{"id":2}]}`, false},
			"DRFCountOneAboveTheRecordsRead":       {Unpaged, `{"count":3,"next":null,"results":[{"id":1},{"id":2}]}`, true},
			"DataTablesTotalEqualToTheRecordsRead": {OffsetPaged, `{"draw":1,"recordsTotal":2,"data":[{"id":1},{"id":2}]}`, false},
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
		t.Run("AnEmptyDataTablesPageSaysWhereItStarted", func(t *testing.T) {
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
	})

	// A next link is followed only to the ERP's own scheme and host; one
	// that is not a URL is an error naming it.
	t.Run("FollowsOnlyItsOrigin", func(t *testing.T) {
		t.Parallel()
		for name, tc := range map[string]struct{ next, want string }{
			"AnotherScheme": {"https://HOST/r/?page=2", "next link leaves the ERP's origin (https://HOST); not followed"},
			"NotAURL":       {"http://[::1/r/", `next link "http://[::1/r/" is not a URL`},
			"TheSameOrigin": {"http://HOST/r/?page=2", ""},
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
	})

	// Against the simulator: a cursor walk of its invoices, with money as
	// numbers and as strings, then the identity, a token expired early and
	// the close, with nothing written to the ERP.
	t.Run("WalksTheSimulatorsInvoicesToTheirExactSum", func(t *testing.T) {
		t.Parallel()
		sim, c := newSimClient(t, erpsim.Options{Invoices: 230, PageSizeCap: 50}, nil)
		ctx := testCtx(t)
		for _, asString := range []bool{false, true} {
			sim.SetMoneyAsString(asString)
			recs, cursors := walkInvoices(t, ctx, c, 100) // capped at 50 by the ERP
			if len(recs) != 230 || len(cursors) != 4 {
				t.Fatalf("money as string %v: %d invoices, %d cursors; want 230, 4", asString, len(recs), len(cursors))
			}
			for _, cur := range cursors {
				if !strings.Contains(cur, "+") || !strings.HasSuffix(cur, "=") {
					t.Errorf("simulator cursor %q lacks '+' or '=': the encoding test is weaker than meant", cur)
				}
			}
			if got, want := sumMoney(t, recs, "total_bc"), sim.InvoiceTotal(); !got.Equal(want) {
				t.Errorf("money as string %v: sum %s, want %s", asString, got, want)
			}
		}
		id, err := c.Identity(ctx)
		if err != nil || id != (Identity{CompanyID: "1", BranchID: "1"}) {
			t.Errorf("Identity = %+v, %v", id, err)
		}
		me, err := c.Me(ctx)
		if err != nil || me != id {
			t.Errorf("Me = %+v, %v", me, err)
		}

		// An early-expired token costs one re-login.
		sim.ExpireTokens()
		if _, err := c.Get(ctx, "/accounts/api/currencies/", nil); err != nil {
			t.Fatalf("after ExpireTokens: %v", err)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if sim.Revocations() != 1 || sim.ActiveTokens() != 0 {
			t.Errorf("revocations %d, active tokens %d; want 1, 0", sim.Revocations(), sim.ActiveTokens())
		}
		logins := 0
		for _, r := range sim.Requests() {
			switch {
			case r.Method == http.MethodPost && r.Path == "/api/auth/token/":
				logins++
			case r.Method == http.MethodPost && r.Path == "/api/auth/revoke/":
			case r.Method != http.MethodGet:
				t.Errorf("the client wrote to the ERP: %s %s", r.Method, r.Path)
			}
		}
		if logins != 2 {
			t.Errorf("logins = %d, want 2", logins)
		}
	})

	// Through the simulator, signed in by plugin: every list envelope
	// yields the same records.
	t.Run("ReadsTheSameRecordsFromEveryEnvelope", func(t *testing.T) {
		t.Parallel()
		sim, c := newSimClient(t, erpsim.Options{ClientID: "c-9", ClientSecret: "plug-Secret", PageSizeCap: 5}, func(o *Options) {
			o.Auth, o.PluginScheme, o.ClientID, o.ClientSecret = "plugin", "ERPPlugin", "c-9", "plug-Secret"
		})
		ctx := testCtx(t)
		if id, err := c.Identity(ctx); err != nil || id.CompanyID != "1" {
			t.Fatalf("Identity = %+v, %v", id, err)
		}
		const path = "/accounts/api/payment-vouchers/"
		sim.SetListEnvelope(erpsim.EnvelopeData)
		want, err := listAll(ctx, c, ListRequest{Path: path})
		if err != nil || len(want) != 12 {
			t.Fatalf("data envelope: %d records, %v", len(want), err)
		}
		for _, env := range []erpsim.Envelope{erpsim.EnvelopeArray, erpsim.EnvelopeResults, erpsim.EnvelopeDataTables} {
			sim.SetListEnvelope(env)
			paging := Unpaged
			if env == erpsim.EnvelopeDataTables {
				paging = OffsetPaged
			}
			got, err := listAll(ctx, c, ListRequest{Path: path, Paging: paging, PageSize: 5})
			if err != nil {
				t.Fatalf("%s: %v", env, err)
			}
			if len(got) != len(want) {
				t.Fatalf("%s: %d records, want %d", env, len(got), len(want))
			}
			for i := range got {
				if string(got[i]) != string(want[i]) {
					t.Errorf("%s: record %d = %s, want %s", env, i, got[i], want[i])
				}
			}
		}
		// The journal list always pages DataTables-style.
		js, err := listAll(ctx, c, ListRequest{Path: "/accounts/api/journal-entries/", Paging: OffsetPaged, PageSize: 4})
		if err != nil || len(js) != 30 {
			t.Errorf("journal entries: %d, %v; want 30", len(js), err)
		}
		for _, r := range sim.Requests() {
			if strings.HasPrefix(r.Path, "/api/auth/token") || r.Method != http.MethodGet {
				t.Errorf("plugin client sent %s %s", r.Method, r.Path)
			}
		}
	})
}
