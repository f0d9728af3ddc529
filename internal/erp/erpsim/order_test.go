package erpsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// invoicePage asks for one invoice page (cursor "" for the first) and
// returns its ids and next cursor ("" on the last page).
func invoicePage(t *testing.T, srv *httptest.Server, tok string, ps int, cursor string) ([]int64, string) {
	t.Helper()
	q := url.Values{"page_size": {strconv.Itoa(ps)}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	r := get(t, srv, invoiceListPath+"?"+q.Encode(), tok)
	if r.status != 200 {
		t.Fatalf("page after %q: %d %s", cursor, r.status, r.body)
	}
	var p invPage
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(p.Data))
	for i, d := range p.Data {
		var v struct{ ID int64 }
		if err := json.Unmarshal(d, &v); err != nil {
			t.Fatal(err)
		}
		ids[i] = v.ID
	}
	if !p.Pagination.HasNext {
		return ids, ""
	}
	if !strings.ContainsAny(*p.Pagination.NextCursor, "+/=") {
		t.Fatalf("cursor %q does not need URL-encoding", *p.Pagination.NextCursor)
	}
	return ids, *p.Pagination.NextCursor
}

// invoicePagesOf walks the invoice list and returns each page's ids.
func invoicePagesOf(t *testing.T, srv *httptest.Server, tok string, ps int) [][]int64 {
	t.Helper()
	var pages [][]int64
	cursor := ""
	for range 100000 {
		ids, next := invoicePage(t, srv, tok, ps, cursor)
		pages = append(pages, ids)
		if next == "" {
			return pages
		}
		cursor = next
	}
	t.Fatal("no end")
	return nil
}

// monotonic reports whether ids strictly ascend (dir 1) or descend (dir -1).
func monotonic(ids []int64, dir int64) bool {
	for i := 1; i < len(ids); i++ {
		if (ids[i]-ids[i-1])*dir <= 0 {
			return false
		}
	}
	return true
}

var (
	listOrders  = []ListOrder{OrderOldestFirst, OrderNewestFirst, OrderUnordered}
	cursorKinds = []CursorKind{CursorPosition, CursorLastKey}
)

// eachShape runs f as a parallel subtest for every list order and cursor
// kind.
func eachShape(t *testing.T, f func(t *testing.T, order ListOrder, kind CursorKind)) {
	for _, order := range listOrders {
		for _, kind := range cursorKinds {
			t.Run(fmt.Sprintf("%v/%v", order, kind), func(t *testing.T) {
				t.Parallel()
				f(t, order, kind)
			})
		}
	}
}

// shapeSim is a simulator of n invoices in that order and cursor kind, and
// a token of its user.
func shapeSim(t *testing.T, n int, order ListOrder, kind CursorKind) (*Sim, *httptest.Server, string) {
	t.Helper()
	s, srv := newSim(t, Options{Invoices: n, ListOrder: order, CursorKind: kind})
	return s, srv, login(t, srv)
}

func (o ListOrder) String() string {
	return [...]string{"oldest-first", "newest-first", "unordered"}[o]
}

func (k CursorKind) String() string { return [...]string{"position", "last-key"}[k] }

func TestListOrder(t *testing.T) {
	t.Parallel()
	eachShape(t, func(t *testing.T, order ListOrder, kind CursorKind) {
		for _, viaSet := range []bool{false, true} {
			o := Options{Invoices: 101, ListOrder: order, CursorKind: kind}
			if viaSet {
				o.ListOrder, o.CursorKind = 0, 0
			}
			s, srv := newSim(t, o)
			if viaSet {
				s.SetListOrder(order)
				s.SetCursorKind(kind)
			}
			pages := invoicePagesOf(t, srv, login(t, srv), 10)
			all := slices.Concat(pages...)
			if !slices.Equal(all, invoiceIDsOf(s.Invoices())) {
				t.Fatalf("walked %v, Invoices lists %v", all, invoiceIDsOf(s.Invoices()))
			}
			if got := slices.Sorted(slices.Values(all)); len(got) != 101 || got[0] != 1001 || got[100] != 1101 || len(slices.Compact(got)) != 101 {
				t.Fatalf("walked %v", all)
			}
			for i, p := range pages[:len(pages)-1] { // the last holds one record
				ok := monotonic(p, 1)
				switch order {
				case OrderNewestFirst:
					ok = monotonic(p, -1)
				case OrderUnordered:
					ok = !monotonic(p, 1) && !monotonic(p, -1)
				}
				if !ok {
					t.Fatalf("page %d of %v: %v", i, order, p)
				}
			}
			switch order {
			case OrderOldestFirst:
				if !monotonic(all, 1) {
					t.Fatal("not ascending across pages")
				}
			case OrderNewestFirst:
				if !monotonic(all, -1) {
					t.Fatal("not descending across pages")
				}
			}
		}
	})
}

// TestCursorsAcrossDeletions: a deletion before the cursor makes the next
// page skip a record with position cursors, not with last-key cursors,
// and the cursor of a deleted record still works.
func TestCursorsAcrossDeletions(t *testing.T) {
	t.Parallel()
	eachShape(t, func(t *testing.T, order ListOrder, kind CursorKind) {
		s, srv, tok := shapeSim(t, 50, order, kind)
		before := invoiceIDsOf(s.Invoices())
		first, c := invoicePage(t, srv, tok, 10, "")
		second, c := invoicePage(t, srv, tok, 10, c)
		// One record read on the first page, and the last one read: the
		// cursor's own key.
		if n := s.DeleteInvoices(first[4], second[9]); n != 2 {
			t.Fatalf("deleted %d", n)
		}
		third, _ := invoicePage(t, srv, tok, 10, c)
		after := invoiceIDsOf(s.Invoices())
		want := before[20:30] // after the last key read
		if kind == CursorPosition {
			want = after[20:30] // the two deleted before it shift the list
		}
		if !slices.Equal(third, want) {
			t.Fatalf("third page %v, want %v (list before %v)", third, want, before)
		}
		if kind == CursorPosition && (slices.Contains(third, before[20]) || slices.Contains(third, before[21])) {
			t.Fatal("position cursor did not skip the records shifted past it")
		}
	})
}

// TestCursorsAcrossAdditions: newest first, a record issued during a walk
// shifts a position walk (a record served twice), not a last-key walk;
// oldest first, it comes at the end of either.
func TestCursorsAcrossAdditions(t *testing.T) {
	t.Parallel()
	eachShape(t, func(t *testing.T, order ListOrder, kind CursorKind) {
		s, srv, tok := shapeSim(t, 30, order, kind)
		first, c := invoicePage(t, srv, tok, 10, "")
		added := s.AddInvoices(2)
		var rest []int64
		for c != "" {
			var ids []int64
			ids, c = invoicePage(t, srv, tok, 10, c)
			rest = append(rest, ids...)
		}
		all := append(slices.Clone(first), rest...)
		switch {
		case order == OrderOldestFirst:
			if !slices.Equal(all, invoiceIDsOf(s.Invoices())) || all[len(all)-1] != added[1].ID {
				t.Fatalf("walk %v does not end with the new invoices %d, %d", all, added[0].ID, added[1].ID)
			}
		case order == OrderNewestFirst && kind == CursorPosition:
			if rest[0] != first[8] || rest[1] != first[9] {
				t.Fatalf("position walk %v then %v: the shift does not repeat two records", first, rest)
			}
		case order == OrderNewestFirst && kind == CursorLastKey:
			if !slices.Equal(all, invoiceIDsOf(s.Invoices())[2:]) {
				t.Fatalf("key walk %v: not the list after the new ones", all)
			}
		}
		// A new walk holds them where the list order puts them.
		if got, want := slices.Concat(invoicePagesOf(t, srv, tok, 10)...), invoiceIDsOf(s.Invoices()); !slices.Equal(got, want) || len(got) != 32 {
			t.Fatalf("new walk %v, list %v", got, want)
		}
	})
}

func TestLastKeyCursorRefused(t *testing.T) {
	t.Parallel()
	s, srv := newSim(t, Options{Invoices: 30, CursorKind: CursorLastKey})
	tok := login(t, srv)
	_, c := invoicePage(t, srv, tok, 10, "")
	const invalid = `{"ok":false,"error":"invalid cursor"}`
	// Tampered: another key with the old checksum.
	good := s.encodeCursor(cursor{gen: 1, key: true, v: 1010})
	other := s.encodeCursor(cursor{gen: 1, key: true, v: 1011})
	if c != good {
		t.Fatalf("cursor %q, want the key of invoice 1010", c)
	}
	tampered := other[:len(other)-8] + good[len(good)-8:]
	if r := get(t, srv, invoiceListPath+"?cursor="+url.QueryEscape(tampered), tok); r.status != 400 || string(r.body) != invalid {
		t.Fatalf("tampered: %d %s", r.status, r.body)
	}
	// A one-list route in cursor mode takes positions only.
	s.SetListPaging(ListPagingCursor, 2)
	if r := get(t, srv, "/accounts/api/cashboxes/?cursor="+url.QueryEscape(s.encodeCursor(cursor{gen: 1, key: true, v: 1})), tok); r.status != 400 {
		t.Fatalf("key cursor on a one-list route: %d %s", r.status, r.body)
	}
	// A position cursor stays one after the switch of kind.
	if ids, _ := invoicePage(t, srv, tok, 10, s.cursor(1, 20)); ids[0] != 1021 {
		t.Fatalf("position cursor under last keys: %v", ids)
	}
	s.InvalidateCursors()
	s.SetCursorRefusal(CursorRefusal404)
	if r := get(t, srv, invoiceListPath+"?cursor="+url.QueryEscape(c), tok); r.status != 404 {
		t.Fatalf("after InvalidateCursors: %d %s", r.status, r.body)
	}
}

// TestRouteHookMidWalk: a hook at the k-th request of a route changes the
// list while a walk reads it, deterministically; requests are counted per
// route.
func TestRouteHookMidWalk(t *testing.T) {
	t.Parallel()
	s, srv := newSim(t, Options{Invoices: 45, ListOrder: OrderNewestFirst})
	tok := login(t, srv)
	var mu sync.Mutex
	var fired []int
	var issued []Invoice
	s.SetRouteHook(invoiceListPath, func(n int) {
		mu.Lock()
		defer mu.Unlock()
		fired = append(fired, n)
		if n == 3 {
			issued = s.AddInvoices(4)
		}
	})
	// Refused before the route: not the route's request, no hook.
	mustDo(t, "GET", srv.URL+invoiceListPath, "Bearer nope", "")
	pages := invoicePagesOf(t, srv, tok, 10)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(fired, []int{1, 2, 3, 4, 5}) || len(pages) != 5 {
		t.Fatalf("hook fired %v over %d pages", fired, len(pages))
	}
	// Issued before the third page was answered: it starts with the last
	// four records of the second again.
	if !slices.Equal(pages[2][:4], pages[1][6:]) {
		t.Fatalf("pages %v", pages)
	}
	if got := s.Invoices(); got[0].ID != issued[3].ID || len(got) != 49 {
		t.Fatalf("list starts with %d, issued %v", got[0].ID, invoiceIDsOf(issued))
	}
	if n := s.RequestCount(invoiceListPath); n != 6 {
		t.Fatalf("%d requests counted, want 6", n)
	}
	s.SetRouteHook(invoiceListPath, nil)
	s.ResetRequests()
	invoicePage(t, srv, tok, 10, "")
	if n, auth := s.RequestCount(invoiceListPath), s.RequestCount("/api/auth/token/"); n != 1 || auth != 0 || len(fired) != 5 {
		t.Fatalf("after reset: %d list requests, %d logins; hook fired %v", n, auth, fired)
	}
}

func TestAddInvoices(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 26, 15, 4, 5, 0, time.UTC)
	o := Options{Invoices: 20, Users: branchUsers, Now: fixedClock(at)}
	s, t2 := New(o), New(o)
	total := s.InvoiceTotal()
	added := s.AddInvoices(3)
	if fmt.Sprint(added) != fmt.Sprint(t2.AddInvoices(3)) {
		t.Fatal("the same seed issued different invoices")
	}
	for i, v := range added {
		want := Invoice{ID: int64(1021 + i), Number: fmt.Sprintf("INV-2026-%06d", 21+i), Date: "2026-11-26",
			UpdatedAt: "2026-11-26T15:04:05Z", CompanyID: 1, BranchID: []int{2, 5, 2}[i]}
		if v.ID != want.ID || v.Number != want.Number || v.Date != want.Date || v.UpdatedAt != want.UpdatedAt ||
			v.CompanyID != 1 || v.BranchID != want.BranchID || v.Customer == "" || !v.TotalBC.IsPositive() {
			t.Errorf("invoice %d: %+v", i, v)
		}
		total = total.Add(v.TotalBC)
	}
	if !s.InvoiceTotal().Equal(total) || !s.ExpectedInvoiceTotal().Equal(total) || s.ExpectedInvoiceCount() != 23 {
		t.Fatalf("totals %s %s, want %s", s.InvoiceTotal(), s.ExpectedInvoiceTotal(), total)
	}
	// Ids go on above whatever is held.
	s.MutateInvoices(func(in []Invoice) []Invoice { return append(in, Invoice{ID: 5000, TotalBC: decimal.New(1, 0)}) })
	if v := s.AddInvoices(1); v[0].ID != 5001 {
		t.Fatalf("after 5000: %d", v[0].ID)
	}
	if got := s.InvoicesOfBranch(2); got[len(got)-1].ID != 5001 {
		t.Fatalf("branch 2 ends with %d", got[len(got)-1].ID)
	}
}

func TestChangeAndDeleteInvoices(t *testing.T) {
	t.Parallel()
	s, srv := newSim(t, Options{Invoices: 25, ListOrder: OrderNewestFirst})
	tok := login(t, srv)
	if n := s.ChangeInvoices(func(v *Invoice) { v.TotalBC = decimal.RequireFromString("1.23"); v.Status = "cancelled" }, 1003, 99999); n != 1 {
		t.Fatalf("changed %d", n)
	}
	all := slices.Concat(invoicePagesOf(t, srv, tok, 10)...)
	if len(all) != 25 || all[22] != 1003 {
		t.Fatalf("the changed invoice moved: %v", all)
	}
	if _, _, bodies := walk(t, srv, tok, 25); !bytes.Contains(bodies[0], []byte(`{"id":1003,"number":"INV-2026-000003",`)) ||
		!bytes.Contains(bodies[0], []byte(`"total_bc":1.23,"status":"cancelled"`)) {
		t.Fatalf("change not served: %s", bodies[0])
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("an edit of the id did not panic")
			}
		}()
		s.ChangeInvoices(func(v *Invoice) { v.ID++ }, 1004)
	}()
	if n := s.DeleteInvoices(1001, 1025, 4242); n != 2 {
		t.Fatalf("deleted %d", n)
	}
	if got := invoiceIDsOf(s.Invoices()); len(got) != 23 || got[0] != 1024 || got[22] != 1002 {
		t.Fatalf("after deleting: %v", got)
	}
	// With the hostile records mixed in, only normal invoices go.
	s.SetHostileInvoices(true)
	n := len(s.Invoices())
	if d := s.DeleteInvoices(9000000001, 1002); d != 1 || len(s.Invoices()) != n-1 {
		t.Fatalf("hostile list: deleted %d, %d left of %d", d, len(s.Invoices()), n)
	}
}

// TestPreEncodedPagesAcrossChanges: after each change, the pages served
// with pre-encoding on are byte for byte the pages served without, in every
// order, cursor kind and scope; and the pages the change does not reach
// are kept.
func TestPreEncodedPagesAcrossChanges(t *testing.T) {
	t.Parallel()
	users := []User{{Username: "b1", Password: "p1", BranchID: 1}, {Username: "b2", Password: "p2", BranchID: 2}}
	changes := []struct {
		name string
		do   func(*Sim)
	}{
		{"add one", func(s *Sim) { s.AddInvoices(1) }},
		{"add a page and more", func(s *Sim) { s.AddInvoices(12) }},
		{"delete early", func(s *Sim) { s.DeleteInvoices(1003, 1004) }},
		{"delete the last page", func(s *Sim) { // 56 records: 50 left, the page before loses has_next
			ids := invoiceIDsOf(s.Invoices())
			s.DeleteInvoices(ids[len(ids)-len(ids)%10:]...)
		}},
		{"add one after a full page", func(s *Sim) { s.AddInvoices(1) }},
		{"change early", func(s *Sim) { s.ChangeInvoices(func(v *Invoice) { v.Status = "draft" }, 1010) }},
		{"move to another branch", func(s *Sim) { s.ChangeInvoices(func(v *Invoice) { v.BranchID = 3 - v.BranchID }, 1020) }},
	}
	for _, scope := range []ListScope{ScopeCompany, ScopeBranch} {
		t.Run(fmt.Sprintf("scope=%d", scope), func(t *testing.T) {
			t.Parallel()
			eachShape(t, func(t *testing.T, order ListOrder, kind CursorKind) {
				s, srv := newSim(t, Options{Invoices: 45, Users: users, ListScope: scope, ListOrder: order, CursorKind: kind, Now: fixedClock(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))})
				toks := []string{loginAs(t, srv, "b1", "p1")}
				if scope == ScopeBranch { // under ScopeCompany both see the same list
					toks = append(toks, loginAs(t, srv, "b2", "p2"))
				}
				s.PreEncodeInvoicePages(10)
				for _, c := range changes {
					c.do(s)
					for _, tok := range toks {
						_, _, served := walk(t, srv, tok, 10)
						_, _, again := walk(t, srv, tok, 10) // pages encoded again on demand, now kept
						s.mu.Lock()
						pre := s.pre
						s.pre = nil
						s.mu.Unlock()
						_, _, plain := walk(t, srv, tok, 10)
						s.mu.Lock()
						s.pre = pre
						s.mu.Unlock()
						if len(served) != len(plain) || len(again) != len(plain) {
							t.Fatalf("%s: %d, %d and %d pages", c.name, len(served), len(again), len(plain))
						}
						for i := range plain {
							if !bytes.Equal(served[i], plain[i]) || !bytes.Equal(again[i], plain[i]) {
								t.Fatalf("%s: page %d differs:\n%s\n%s\n%s", c.name, i, served[i], again[i], plain[i])
							}
						}
					}
				}
			})
		})
	}
}

// TestAddInvoiceKeepsPages: oldest first, one new invoice leaves every
// pre-encoded page but the last as it was; newest first with positions,
// every page shifts.
func TestAddInvoiceKeepsPages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		order ListOrder
		kind  CursorKind
		kept  int
	}{
		{OrderOldestFirst, CursorPosition, 49},
		{OrderOldestFirst, CursorLastKey, 49},
		{OrderNewestFirst, CursorPosition, 0},
		{OrderNewestFirst, CursorLastKey, 0},
	} {
		s := New(Options{Invoices: 5000, ListOrder: tc.order, CursorKind: tc.kind})
		s.PreEncodeInvoicePages(100)
		s.mu.Lock()
		pe := s.pre[preKey{100, listView{company: 1}}]
		first := pe.pages[0]
		s.mu.Unlock()
		s.AddInvoices(1)
		s.mu.Lock()
		kept := 0
		for _, p := range pe.pages {
			if p != nil {
				kept++
			}
		}
		same := pe.pages[0] != nil && &pe.pages[0][0] == &first[0]
		n := len(pe.pages)
		s.mu.Unlock()
		if kept != tc.kept || n != 51 || (tc.kept > 0) != same {
			t.Errorf("%v/%v: %d of %d pages kept (first page the same: %v), want %d", tc.order, tc.kind, kept, n, same, tc.kept)
		}
	}
}

// BenchmarkAddInvoice1M is the cost of issuing one invoice into a list of a
// million pre-encoded invoices, oldest first, and of reading its page.
func BenchmarkAddInvoice1M(b *testing.B) {
	s := New(Options{Invoices: 1_000_000})
	srv := httptest.NewServer(s)
	defer srv.Close()
	s.PreEncodeInvoicePages(100)
	res, err := http.Post(srv.URL+"/api/auth/token/", "application/json", strings.NewReader(`{"username":"erpsync","password":"erpsync-demo-password"}`))
	if err != nil {
		b.Fatal(err)
	}
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	err = json.NewDecoder(res.Body).Decode(&tr)
	res.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s.AddInvoices(1)
		s.mu.Lock()
		last := len(s.listed) - 1
		s.mu.Unlock()
		req, _ := http.NewRequest("GET", srv.URL+invoiceListPath+"?page_size=100&cursor="+url.QueryEscape(s.cursor(1, last-last%100)), nil)
		req.Header.Set("Authorization", "Bearer "+tr.AccessToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 200 {
			b.Fatal(err, res.StatusCode)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
}

func TestJournalEntryOrders(t *testing.T) {
	t.Parallel()
	for _, order := range listOrders {
		for _, slash := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/slash=%v", order, slash), func(t *testing.T) {
				t.Parallel()
				s, srv := newSim(t, Options{ListOrder: order, SlashIDs: slash, Now: fixedClock(time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC))})
				tok := login(t, srv)
				id := func(n int) string { return documentID("JE", n-1, slash) }
				ids := journalIDs(t, srv, tok, 7)
				if got := slices.Sorted(slices.Values(ids)); len(got) != 30 || got[0] != id(1) || got[29] != id(30) || !slices.Equal(ids, entryIDs(s.JournalEntries())) {
					t.Fatalf("listed %v", ids)
				}
				checkOrder := func(ids []string) {
					t.Helper()
					asc, desc := slices.IsSorted(ids), slices.IsSortedFunc(ids, func(a, b string) int { return strings.Compare(b, a) })
					if ok := map[ListOrder]bool{OrderOldestFirst: asc, OrderNewestFirst: desc, OrderUnordered: !asc && !desc}[order]; !ok {
						t.Fatalf("%v: %v", order, ids)
					}
				}
				checkOrder(ids)
				checkOrder(ids[:7])

				added := s.AddJournalEntries(3)
				if added[0].ID != id(31) || added[2].ID != id(33) || added[0].Date != "2026-11-26" || !added[1].Total.IsPositive() {
					t.Fatalf("added %+v", added)
				}
				ids = journalIDs(t, srv, tok, 7)
				checkOrder(ids)
				switch order {
				case OrderOldestFirst:
					if !slices.Equal(ids[30:], []string{id(31), id(32), id(33)}) {
						t.Fatalf("not last: %v", ids)
					}
				case OrderNewestFirst:
					if !slices.Equal(ids[:3], []string{id(33), id(32), id(31)}) {
						t.Fatalf("not first: %v", ids)
					}
				}
				// A new entry's preview balances its total.
				lines := previewLines(t, srv, tok, added[1].ID, 200)
				if len(lines) != 2 || !lines[0].Debit.Equal(added[1].Total) || !lines[1].Credit.Equal(added[1].Total) {
					t.Fatalf("preview of %s: %+v", added[1].ID, lines)
				}
				// Deleted and changed: positions shift, previews follow.
				page := func(start int) []string {
					return listIDs(t, get(t, srv, "/accounts/api/journal-entries/?length=5&start="+strconv.Itoa(start), tok).body)
				}
				before := page(10)
				first := journalIDs(t, srv, tok, 7)[0]
				others := slices.DeleteFunc([]string{id(5), id(6), id(7)}, func(id string) bool { return id == first })
				changed, unchanged := others[0], others[1]
				s.MutateJournalEntries(func(in []JournalEntry) []JournalEntry {
					in = slices.DeleteFunc(in, func(e JournalEntry) bool { return e.ID == first })
					for i := range in {
						if in[i].ID == changed {
							in[i].Total = in[i].Total.Add(decimal.New(1, 0))
						}
					}
					return in
				})
				if after := page(10); after[0] != before[1] {
					t.Fatalf("deleting the first entry did not shift start=10: %v then %v", before, after)
				}
				previewLines(t, srv, tok, first, 404)
				if lines := previewLines(t, srv, tok, changed, 200); len(lines) != 2 {
					t.Fatalf("changed total, fixture lines kept: %+v", lines)
				}
				if lines := previewLines(t, srv, tok, unchanged, 200); len(lines) != 3 {
					t.Fatalf("unchanged entry lost its lines: %+v", lines)
				}
				if r := decode(t, get(t, srv, "/accounts/api/journal-entries/", tok).body); r["recordsTotal"] != json.Number("32") {
					t.Fatalf("recordsTotal %v", r["recordsTotal"])
				}
			})
		}
	}
}

// journalIDs walks the journal-entry list by start/length.
func journalIDs(t *testing.T, srv *httptest.Server, tok string, length int) []string {
	t.Helper()
	var ids []string
	for start := 0; ; start += length {
		r := get(t, srv, fmt.Sprintf("/accounts/api/journal-entries/?draw=1&start=%d&length=%d", start, length), tok)
		page := listIDs(t, r.body)
		if len(page) == 0 {
			return ids
		}
		ids = append(ids, page...)
	}
}

func entryIDs(es []JournalEntry) []string {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	return ids
}

type previewLine struct {
	Debit, Credit decimal.Decimal
}

// previewLines reads the journal preview of entry id, which must answer
// status.
func previewLines(t *testing.T, srv *httptest.Server, tok, id string, status int) []previewLine {
	t.Helper()
	r := get(t, srv, "/accounts/api/journal-entries/"+url.PathEscape(id)+"/journal-preview/", tok)
	if r.status != status {
		t.Fatalf("preview of %s: %d %s", id, r.status, r.body)
	}
	if status != 200 {
		return nil
	}
	var p struct{ Data struct{ Lines []previewLine } }
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	return p.Data.Lines
}
