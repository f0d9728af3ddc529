package erpsim

import (
	"hash/fnv"
	"slices"
	"sort"
)

// The order of the paged lists (invoices, journal entries) and what an
// invoice cursor encodes. The reference states neither, and installations
// differ: a client that follows a list must find out which it has.

// ListOrder is the order in which the invoice list and the journal-entry
// list serve their records.
type ListOrder int

const (
	// OrderOldestFirst serves records as they are held: issued last,
	// listed last. Generated and added records have ascending ids, so the
	// list is ids ascending until MutateInvoices or MutateJournalEntries
	// holds them otherwise (the default).
	OrderOldestFirst ListOrder = iota
	// OrderNewestFirst serves records held last first: ids descending.
	OrderNewestFirst
	// OrderUnordered serves records in an order that says nothing of
	// their ids, as a table read without ORDER BY returns its rows: a
	// fixed shuffle, by a hash of the id. A new record, as an old one,
	// lands anywhere in the list, and a page of ten records is all but
	// never in id order either way.
	OrderUnordered
)

// CursorKind is what an invoice-list cursor encodes.
type CursorKind int

const (
	// CursorPosition: the position in the list of the next page's first
	// record (the default). A record deleted before it shifts the records
	// after it back by one, and the page asked next skips one of them; a
	// record added before it shifts them forward, and a record is served
	// twice.
	CursorPosition CursorKind = iota
	// CursorLastKey: the id of the last record served. The next page is
	// the records after that id in list order, whatever was deleted or
	// added before it; the cursor of a deleted record still works.
	CursorLastKey
)

// SetListOrder changes the order of the invoice list and the journal-entry
// list. Pre-encoded invoice pages are dropped.
func (s *Sim) SetListOrder(o ListOrder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.order = o
	s.views, s.pre = nil, nil
}

// SetCursorKind changes what the invoice cursors issued from now on
// encode. A cursor already issued is read as what it encodes. Pre-encoded
// invoice pages are dropped.
func (s *Sim) SetCursorKind(k CursorKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cursorKind = k
	s.pre = nil
}

// scramble is the place of a record in OrderUnordered, from the hash of
// its id: a bijection of the 64-bit integers (SplitMix64's finaliser), so
// that no two ids share a place.
func scramble(id uint64) uint64 {
	id ^= id >> 30
	id *= 0xbf58476d1ce4e5b9
	id ^= id >> 27
	id *= 0x94d049bb133111eb
	return id ^ id>>31
}

// scrambleText is scramble for a text id (a journal entry's).
func scrambleText(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return scramble(h.Sum64())
}

// sortUnordered sorts recs into OrderUnordered by place, ties (equal ids)
// in the order held.
func sortUnordered[T any](recs []T, place func(T) uint64) {
	slices.SortStableFunc(recs, func(a, b T) int {
		pa, pb := place(a), place(b)
		switch {
		case pa < pb:
			return -1
		case pa > pb:
			return 1
		}
		return 0
	})
}

// inListOrder returns recs (held oldest first) in the order o serves
// them; recs itself for OrderOldestFirst.
func inListOrder[T any](recs []T, o ListOrder, place func(T) uint64) []T {
	switch o {
	case OrderNewestFirst:
		out := slices.Clone(recs)
		slices.Reverse(out)
		return out
	case OrderUnordered:
		out := slices.Clone(recs)
		sortUnordered(out, place)
		return out
	}
	return recs
}

// ---- invoice views in list order -------------------------------------------------

// invoiceView is the part of the served invoice list that one view holds,
// in list order: all of it, or the records at idx. Indices, not copies, so
// that a million invoices split over branches cost 4 bytes each.
type invoiceView struct {
	all   []Invoice
	idx   []int32 // positions in all, in list order (read backwards when rev); nil: every record of all
	rev   bool    // served from the last position to the first (OrderNewestFirst)
	order ListOrder
	// sorted: the ids ascend (descend when rev) as held, or the view is in
	// OrderUnordered, which is sorted by place; a last-key cursor is then
	// found by binary search.
	sorted bool
}

func (v invoiceView) len() int {
	if v.idx == nil {
		return len(v.all)
	}
	return len(v.idx)
}

// pos is the position in all of the i-th record served.
func (v invoiceView) pos(i int) int {
	if v.rev {
		i = v.len() - 1 - i
	}
	if v.idx == nil {
		return i
	}
	return int(v.idx[i])
}

func (v invoiceView) at(i int) *Invoice { return &v.all[v.pos(i)] }

// after reports whether a record of id a is served after one of id b, by
// the key of the order.
func (v invoiceView) after(a, b int64) bool {
	switch v.order {
	case OrderNewestFirst:
		return a < b
	case OrderUnordered:
		pa, pb := scramble(uint64(a)), scramble(uint64(b))
		return pa > pb || pa == pb && a > b
	}
	return a > b
}

// startAfter is the index of the first record served after the one of id
// key: right after it while it is listed, else after where it was. A list
// not sorted by its key (hostile records, invoices held out of order) is
// searched from the end for the key, then from the start for a record
// after it.
func (v invoiceView) startAfter(key int64) int {
	n := v.len()
	if v.sorted {
		return sort.Search(n, func(i int) bool { return v.after(v.at(i).ID, key) })
	}
	for i := n - 1; i >= 0; i-- {
		if v.at(i).ID == key {
			return i + 1
		}
	}
	for i := range n {
		if v.after(v.at(i).ID, key) {
			return i
		}
	}
	return n
}

// servedIndex is the index at which the view serves the record at position
// p of all; the view must hold it.
func (v invoiceView) servedIndex(p int) int {
	if v.order == OrderUnordered {
		id := v.all[p].ID
		i := sort.Search(v.len(), func(i int) bool { return !v.after(id, v.at(i).ID) })
		for i+1 < v.len() && v.pos(i) != p && v.at(i+1).ID == id {
			i++ // equal ids: the one at p
		}
		return i
	}
	k := p
	if v.idx != nil {
		k, _ = slices.BinarySearch(v.idx, int32(p))
	}
	if v.rev {
		k = v.len() - 1 - k
	}
	return k
}

// invoiceView returns the view's part of the served list in list order,
// computed once per list and order. Caller holds s.mu.
func (s *Sim) invoiceView(lv listView) invoiceView {
	if v, ok := s.views[lv]; ok {
		return v
	}
	v := s.orderedView(func(inv *Invoice) bool { return lv.holds(s.invoiceOwner(inv)) })
	if s.views == nil {
		s.views = map[listView]invoiceView{}
	}
	s.views[lv] = v
	return v
}

// orderedView is the records of the served list that holds keeps (all of
// them when holds is nil), in list order. Caller holds s.mu.
func (s *Sim) orderedView(holds func(*Invoice) bool) invoiceView {
	v := invoiceView{all: s.listed, order: s.order, sorted: s.order == OrderUnordered || s.idsSorted}
	if holds != nil {
		for i := range s.listed {
			if !holds(&s.listed[i]) {
				v.idx = []int32{}
				break
			}
		}
	}
	if v.idx != nil {
		for i := range s.listed {
			if holds(&s.listed[i]) {
				v.idx = append(v.idx, int32(i))
			}
		}
	}
	switch s.order {
	case OrderNewestFirst:
		v.rev = true
	case OrderUnordered:
		if v.idx == nil {
			v.idx = make([]int32, len(s.listed))
			for i := range v.idx {
				v.idx[i] = int32(i)
			}
		}
		type placed struct {
			place uint64
			pos   int32
		}
		ps := make([]placed, len(v.idx))
		for i, p := range v.idx {
			ps[i] = placed{scramble(uint64(s.listed[p].ID)), p}
		}
		sortUnordered(ps, func(p placed) uint64 { return p.place })
		for i := range ps {
			v.idx[i] = ps[i].pos
		}
	}
	return v
}

// idsAscend reports whether the ids of inv never decrease.
func idsAscend(inv []Invoice) bool {
	for i := 1; i < len(inv); i++ {
		if inv[i].ID < inv[i-1].ID {
			return false
		}
	}
	return true
}
