package erp

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestPage documents the rules a page states about itself: what it does not
// know (a count of -1), which request it answered and the digest of its bytes,
// and when its memory goes back to the pool. The sync package decides on them
// (a cut list, a page already known), so they are pinned here, where pages are
// made.
func TestPage(t *testing.T) {
	t.Parallel()
	// A list whose size the ERP did not state has Count and RecordsTotal
	// -1, never 0 or a count left over from an earlier page: a made-up size
	// would make a cut list look whole, or a whole list look cut.
	t.Run("SaysWhatItDoesNotKnow", func(t *testing.T) {
		t.Run("ADRFAnswerWithoutCountHasCountMinus1", func(t *testing.T) {
			p, err := DecodePage("/r/", []byte(`{"next":null,"results":[{"id":1}]}`))
			if err != nil {
				t.Fatal(err)
			}
			if p.Count != -1 || p.RecordsTotal != -1 {
				t.Errorf("Count, RecordsTotal = %d, %d; want -1, -1", p.Count, p.RecordsTotal)
			}
		})
		t.Run("ADRFAnswerWithCount0HasCount0", func(t *testing.T) {
			p, err := DecodePage("/r/", []byte(`{"count":0,"next":null,"results":[]}`))
			if err != nil {
				t.Fatal(err)
			}
			if p.Count != 0 {
				t.Errorf("Count = %d, want 0", p.Count)
			}
		})
		t.Run("ADataTablesAnswerWithoutRecordsTotalHasRecordsTotalMinus1", func(t *testing.T) {
			p, err := DecodePage("/r/", []byte(`{"draw":1,"data":[]}`))
			if err != nil {
				t.Fatal(err)
			}
			if p.RecordsTotal != -1 || p.Count != -1 {
				t.Errorf("RecordsTotal, Count = %d, %d; want -1, -1", p.RecordsTotal, p.Count)
			}
		})
		t.Run("ACountThatIsNotAnIntegerIsRefusedNamingIt", func(t *testing.T) {
			_, err := DecodePage("/r/", []byte(`{"count":"many","next":null,"results":[]}`))
			var ee *EnvelopeError
			if !errors.As(err, &ee) || ee.Error() != "GET /r/: count is not an integer: many (top-level keys: count, next, results)" {
				t.Errorf("err = %v, want an EnvelopeError quoting the count", err)
			}
		})

		// The lister reuses pages: the second answer below states no count
		// and must not inherit the first one's.
		t.Run("APageTheListerFetchedAfterOneWithACountHasCountMinus1", func(t *testing.T) {
			t.Parallel()
			f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("page") == "" {
					writeResp(w, http.StatusOK, `{"count":7,"next":"/r/?page=2","results":[]}`)
					return
				}
				writeResp(w, http.StatusOK, `{"next":null,"results":[]}`)
			})
			c := newTestClient(t, f.srv.URL, nil)
			l := c.List(ListRequest{Path: "/r/"})
			if l.Total() != -1 {
				t.Errorf("Total before any page = %d, want -1", l.Total())
			}
			p, err := l.Next(testCtx(t))
			if f.note(err) != nil {
				t.Fatal(err)
			}
			if p.Count != 7 || l.Total() != 7 {
				t.Errorf("first page: Count %d, Total %d; want 7, 7", p.Count, l.Total())
			}
			p.Release()
			p, err = l.Next(testCtx(t))
			if f.note(err) != nil {
				t.Fatalf("second page: %v (an unknown count is not a count above what was read)", err)
			}
			defer p.Release()
			if p.Count != -1 || p.RecordsTotal != -1 || l.Total() != -1 || !l.Done() {
				t.Errorf("second page: Count %d, RecordsTotal %d, Total %d, Done %v; want -1, -1, -1, true", p.Count, p.RecordsTotal, l.Total(), l.Done())
			}
		})
		t.Run("AnEmptyDataTablesPageWithoutRecordsTotalEndsTheList", func(t *testing.T) {
			t.Parallel()
			f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
				writeResp(w, http.StatusOK, `{"draw":1,"data":[]}`)
			})
			c := newTestClient(t, f.srv.URL, nil)
			l := c.List(ListRequest{Path: "/j/", Paging: OffsetPaged, PageSize: 10})
			p, err := l.Next(testCtx(t))
			if f.note(err) != nil {
				t.Fatalf("Next: %v; an unknown total is not one above what was read", err)
			}
			defer p.Release()
			if p.RecordsTotal != -1 || l.Total() != -1 || !l.Done() {
				t.Errorf("RecordsTotal %d, Total %d, Done %v; want -1, -1, true", p.RecordsTotal, l.Total(), l.Done())
			}
		})
		t.Run("ACursorPagedListHasTotalMinus1", func(t *testing.T) {
			t.Parallel()
			f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
				writeResp(w, http.StatusOK, `{"ok":true,"data":[{"id":1}],"pagination":{"has_next":false}}`)
			})
			c := newTestClient(t, f.srv.URL, nil)
			l := c.List(ListRequest{Path: "/sales/api/invoices/list/", Paging: CursorPaged, PageSize: 5})
			p, err := l.Next(testCtx(t))
			if f.note(err) != nil {
				t.Fatal(err)
			}
			defer p.Release()
			if l.Total() != -1 || p.Count != -1 || p.RecordsTotal != -1 {
				t.Errorf("Total %d, Count %d, RecordsTotal %d; want -1", l.Total(), p.Count, p.RecordsTotal)
			}
		})
	})

	// A page the lister fetched carries the address it was fetched from
	// and the sha256 of the bytes answered, so that the same request
	// answered with the same bytes is known as the same page, and a changed
	// answer is not.
	t.Run("NamesItsRequestAndDigest", func(t *testing.T) {
		t.Parallel()
		var body atomic.Value
		body.Store(`{"ok":true,"data":[{"id":1}],"pagination":{"has_next":true,"next_cursor":"c2"}}`)
		last := `{"ok":true,"data":[{"id":2}],"pagination":{"has_next":false}}`
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("cursor") == "c2" {
				writeResp(w, http.StatusOK, last)
				return
			}
			writeResp(w, http.StatusOK, body.Load().(string))
		})
		c := newTestClient(t, f.srv.URL, nil)
		read := func() (requests []string, digests [][sha256.Size]byte) {
			t.Helper()
			l := c.List(ListRequest{Path: "/sales/api/invoices/list/", Paging: CursorPaged, PageSize: 2})
			for {
				p, err := l.Next(testCtx(t))
				if err == io.EOF {
					return
				}
				if f.note(err) != nil {
					t.Fatal(err)
				}
				requests, digests = append(requests, p.Request), append(digests, p.Digest)
				p.Release()
			}
		}
		reqs, digs := read()
		want := []string{
			f.srv.URL + "/sales/api/invoices/list/?page_size=2",
			f.srv.URL + "/sales/api/invoices/list/?cursor=c2&page_size=2",
		}
		if fmt.Sprint(reqs) != fmt.Sprint(want) {
			t.Errorf("Request = %q, want %q", reqs, want)
		}
		if len(digs) != 2 || digs[0] != sha256.Sum256([]byte(body.Load().(string))) || digs[1] != sha256.Sum256([]byte(last)) {
			t.Fatalf("Digest = %x, want the sha256 of each answer", digs)
		}
		if digs[0] == ([sha256.Size]byte{}) {
			t.Error("a page has the zero digest")
		}

		t.Run("TheSameRequestAnsweredWithTheSameBytesHasTheSameDigest", func(t *testing.T) {
			_, again := read()
			if fmt.Sprint(again) != fmt.Sprint(digs) {
				t.Errorf("digests %x, then %x", digs, again)
			}
		})
		t.Run("AChangedAnswerToTheSameRequestHasAnotherDigest", func(t *testing.T) {
			body.Store(`{"ok":true,"data":[{"id":1,"x":1}],"pagination":{"has_next":true,"next_cursor":"c2"}}`)
			reqs2, changed := read()
			if fmt.Sprint(reqs2) != fmt.Sprint(reqs) {
				t.Errorf("requests %q, then %q", reqs, reqs2)
			}
			if changed[0] == digs[0] || changed[1] != digs[1] {
				t.Errorf("digests %x, then %x: want the first changed, the second not", digs, changed)
			}
		})
		t.Run("APageDecodedFromBytesAloneNamesNoRequest", func(t *testing.T) {
			p, err := DecodePage("/r/", []byte(last))
			if err != nil {
				t.Fatal(err)
			}
			if p.Request != "" || p.Digest != ([sha256.Size]byte{}) {
				t.Errorf("Request %q, Digest %x; want none", p.Request, p.Digest)
			}
		})
	})

	// A released page drops its references into the body it hands back, so
	// that the pool pins no record; a page read from an answer over 16 MiB
	// is not handed back at all, so that one huge answer does not stay in
	// memory for the rest of the process.
	t.Run("GoesBackToThePoolOnReleaseUnlessItIsHuge", func(t *testing.T) {
		t.Parallel()
		huge := `{"ok":true,"data":[{"s":"` + strings.Repeat("x", maxPooledPage+1) + `"}]}`
		// An announced answer is read into a buffer of its size and one
		// byte: this one fills exactly 16 MiB.
		largest := `{"ok":true,"data":[{"s":"` + strings.Repeat("x", maxPooledPage-1-len(`{"ok":true,"data":[{"s":""}]}`)) + `"}]}`
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/largest/" {
				w.Header().Set("Content-Length", strconv.Itoa(len(largest)))
				writeResp(w, http.StatusOK, largest)
				return
			}
			if r.URL.Path == "/huge/" {
				// Announced: read into one buffer of its size (an answer
				// of unknown size is read in chunks and assembled apart
				// from the page's buffer, which stays at 4 MiB).
				w.Header().Set("Content-Length", strconv.Itoa(len(huge)))
				writeResp(w, http.StatusOK, huge)
				return
			}
			writeResp(w, http.StatusOK, `{"ok":true,"data":[{"id":1}]}`)
		})
		c := newTestClient(t, f.srv.URL, nil)
		t.Run("AReleasedPageOfAnOrdinaryAnswerDropsItsRecords", func(t *testing.T) {
			p, err := c.List(ListRequest{Path: "/small/"}).Next(testCtx(t))
			if f.note(err) != nil {
				t.Fatal(err)
			}
			recs := p.Records
			p.Release()
			if recs[0] != nil {
				t.Errorf("after Release the page still holds %s", recs[0])
			}
		})
		t.Run("APageOfAnAnswerOver16MiBAnnouncedByItsLengthIsNotPooled", func(t *testing.T) {
			p, err := c.List(ListRequest{Path: "/huge/"}).Next(testCtx(t))
			if f.note(err) != nil {
				t.Fatal(err)
			}
			recs := p.Records
			p.Release()
			if recs[0] == nil {
				t.Error("a page of more than 16 MiB was handed back to the pool")
			}
		})
		t.Run("APageOfAnAnswerFilling16MiBIsPooled", func(t *testing.T) {
			p, err := c.List(ListRequest{Path: "/largest/"}).Next(testCtx(t))
			if f.note(err) != nil {
				t.Fatal(err)
			}
			if cap(p.buf) != maxPooledPage {
				t.Fatalf("the page's buffer holds %d bytes, want %d", cap(p.buf), maxPooledPage)
			}
			recs := p.Records
			p.Release()
			if recs[0] != nil {
				t.Error("a page of 16 MiB was not handed back to the pool")
			}
		})
		t.Run("APageDecodedFromBytesAloneIsNotPooled", func(t *testing.T) {
			p, err := DecodePage("/r/", []byte(`[{"id":1}]`))
			if err != nil {
				t.Fatal(err)
			}
			p.Release()
			if p.Records[0] == nil {
				t.Error("a page DecodePage made was handed to the pool")
			}
		})
	})
}

// TestDecodeObject documents DecodeObject: an answer of one object, bare or as
// {ok, data}, yields the object split and as raw bytes; {ok: false} is an
// error quoting what the ERP said; malformed JSON names the route.
func TestDecodeObject(t *testing.T) {
	t.Run("TakesABareObjectAsTheObject", func(t *testing.T) {
		body := `{"id":3,"name":"Main"}`
		rec, raw, err := DecodeObject("/o/", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) != body || fieldsOf(rec) != `"id"=3;"name"="Main";` {
			t.Errorf("raw %s, fields %s", raw, fieldsOf(rec))
		}
	})
	t.Run("TakesTheObjectInData", func(t *testing.T) {
		rec, raw, err := DecodeObject("/o/", []byte(`{"ok":true,"data":{"id":4}}`))
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) != `{"id":4}` || fieldsOf(rec) != `"id"=4;` {
			t.Errorf("raw %s, fields %s", raw, fieldsOf(rec))
		}
	})
	t.Run("LeavesTheWholeAnswerWhenDataIsNotAnObject", func(t *testing.T) {
		body := `{"ok":true,"data":[1]}`
		_, raw, err := DecodeObject("/o/", []byte(body))
		if err != nil || string(raw) != body {
			t.Errorf("raw %s, err %v; want the whole answer", raw, err)
		}
	})
	t.Run("TakesOKTrueForNoRefusal", func(t *testing.T) {
		if _, _, err := DecodeObject("/o/", []byte(`{"ok":true,"id":1}`)); err != nil {
			t.Error(err)
		}
	})
	t.Run("QuotesTheAnswerOfARefusalWithOKFalse", func(t *testing.T) {
		_, _, err := DecodeObject("/o/", []byte(`{"ok":false,"error":"no such cashbox"}`))
		var ee *EnvelopeError
		if !errors.As(err, &ee) || !ee.OKFalse || ee.Error() != `GET /o/: the ERP answered ok=false: {"ok":false,"error":"no such cashbox"}` {
			t.Errorf("err = %v, want an ok=false EnvelopeError quoting the answer", err)
		}
	})
	t.Run("NamesTheRouteOfMalformedJSON", func(t *testing.T) {
		_, raw, err := DecodeObject("/o/", []byte(`{"id":`))
		if err == nil || !strings.HasPrefix(err.Error(), "GET /o/: ") || raw != nil {
			t.Errorf("raw %s, err %v; want an error naming the route", raw, err)
		}
	})
}
