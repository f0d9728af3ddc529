package erpsim

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Changes to the invoice list while it is read: invoices issued, deleted
// and edited, each at the cost of what it changes, so that a list of a
// million invoices can be followed. The views stay (extended when records
// are appended), and pre-encoded pages are dropped from the first one the
// change reaches; MutateInvoices, for anything else, drops both.

// AddInvoices issues n invoices, as the ERP's users do, and returns them:
// ids above every invoice held, numbered after them, dated today by the
// simulator's clock, updated now, of the installation's company and its
// branches round robin, their customer, currency, total and status drawn
// from the seed and the id. They are held last: listed last oldest first,
// first newest first, anywhere unordered.
func (s *Sim) AddInvoices(n int) []Invoice {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.nextInvoiceID()
	today, now := s.today(), s.now().UTC().Truncate(time.Second).Format(time.RFC3339)
	added := make([]Invoice, max(n, 0))
	for i := range added {
		added[i] = s.issueInvoice(next+int64(i), today, now)
	}
	s.changeInvoices(nil, viewsExtended, func() []int {
		from := len(s.invoices)
		s.invoices = append(s.invoices, added...)
		s.idsSorted = s.idsSorted && (from == 0 || s.invoices[from-1].ID < next)
		return positions(from, len(s.invoices))
	})
	return slices.Clone(added)
}

// DeleteInvoices deletes the invoices of those ids (normal ones; never the
// hostile records) and returns how many it deleted.
func (s *Sim) DeleteInvoices(ids ...int64) int {
	return s.changeByID(ids, viewsShrunk, func(at []int) []int {
		w := at[0]
		for k, p := range at {
			end := len(s.invoices)
			if k+1 < len(at) {
				end = at[k+1]
			}
			w += copy(s.invoices[w:], s.invoices[p+1:end])
		}
		clear(s.invoices[w:]) // let the collector have what they held
		s.invoices = s.invoices[:w]
		return nil
	})
}

// ChangeInvoices applies edit to each invoice of those ids (normal ones),
// in place: content, not id (edit changing an id panics, as that is a bug
// in the test that asks). It returns how many it edited. Records keep
// their place in the list; one moved to another branch changes views.
func (s *Sim) ChangeInvoices(edit func(*Invoice), ids ...int64) int {
	return s.changeByID(ids, viewsKept, func(at []int) []int {
		for _, i := range at {
			v := &s.invoices[i]
			id, company, branch := v.ID, v.CompanyID, v.BranchID
			edit(v)
			if v.ID != id {
				panic(fmt.Sprintf("erpsim: ChangeInvoices: the edit changed id %d to %d", id, v.ID))
			}
			if v.CompanyID != company || v.BranchID != branch {
				s.views = nil
			}
		}
		return at
	})
}

// changeByID runs changeInvoices on the invoices of ids (their positions,
// ascending, handed to apply) and returns how many there are.
func (s *Sim) changeByID(ids []int64, fate viewsFate, apply func(at []int) (after []int)) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := s.invoicePositions(ids)
	if len(at) > 0 {
		s.changeInvoices(at, fate, func() []int { return apply(at) })
	}
	return len(at)
}

// invoicePositions is where in s.invoices the invoices of ids are, in
// order. Caller holds s.mu.
func (s *Sim) invoicePositions(ids []int64) []int {
	var at []int
	if s.idsSorted && !s.hostileInvoices {
		for _, id := range ids {
			i, ok := slices.BinarySearchFunc(s.invoices, id, func(v Invoice, id int64) int {
				return compareInt64(v.ID, id)
			})
			for ; ok && i < len(s.invoices) && s.invoices[i].ID == id; i++ {
				at = append(at, i)
			}
		}
		slices.Sort(at)
		return slices.Compact(at)
	}
	want := make(map[int64]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	for i := range s.invoices {
		if want[s.invoices[i].ID] {
			at = append(at, i)
		}
	}
	return at
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// positions is from, from+1, ..., to-1.
func positions(from, to int) []int {
	out := make([]int, 0, max(to-from, 0))
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// nextInvoiceID is the id above every invoice held. Caller holds s.mu.
func (s *Sim) nextInvoiceID() int64 {
	if len(s.invoices) == 0 {
		return firstInvoice
	}
	if s.idsSorted && !s.hostileInvoices {
		return s.invoices[len(s.invoices)-1].ID + 1
	}
	top := int64(math.MinInt64)
	for i := range s.invoices {
		top = max(top, s.invoices[i].ID)
	}
	return max(top+1, firstInvoice)
}

// issueInvoice draws the invoice of that id as AddInvoices issues it, from
// the seed and the id alone. Caller holds s.mu.
func (s *Sim) issueInvoice(id int64, date, updatedAt string) Invoice {
	i := id - firstInvoice
	v := drawInvoice(newRand(s.opts.Seed, 0xadd1<<48^uint64(id)), customerNames())
	v.ID = id
	v.Number = fmt.Sprintf("INV-2026-%06d", i+1)
	v.Date = date
	v.UpdatedAt = updatedAt
	v.CompanyID = s.opts.CompanyID
	v.BranchID = branchOf(s.branches, int(max(i, -i)))
	return v
}

// viewsFate is what a change of the held invoices does to the views.
type viewsFate int

const (
	viewsKept     viewsFate = iota // records stay where they were (apply may drop the views itself)
	viewsExtended                  // records were appended
	viewsShrunk                    // the records at before were deleted
)

// changeInvoices runs apply, which changes s.invoices, and keeps what
// stays true: the views as fate says, and the pre-encoded pages before
// the first one the change reaches in each view. before is the positions
// in the list of the records apply edits or deletes, as they are before
// it; apply returns the positions of the records it edited or appended, as
// they are after it. With the hostile records mixed in, the list is built
// again and the pre-encoded pages are dropped. Caller holds s.mu.
func (s *Sim) changeInvoices(before []int, fate viewsFate, apply func() (after []int)) {
	if s.hostileInvoices {
		apply()
		s.relist()
		return
	}
	type mark struct{ first, oldLen int }
	marks := make(map[preKey]mark, len(s.pre))
	for k := range s.pre {
		v := s.invoiceView(k.view)
		marks[k] = mark{first: s.firstServed(v, k.view, before), oldLen: v.len()}
	}
	from := len(s.listed)
	after := apply()
	s.listed = s.invoices
	switch fate {
	case viewsKept:
		for lv, v := range s.views {
			v.all = s.listed
			s.views[lv] = v
		}
	case viewsExtended:
		s.extendViews(from)
	case viewsShrunk:
		s.shrinkViews(before)
	}
	for k, pe := range s.pre {
		v, m := s.invoiceView(k.view), marks[k]
		first := min(m.first, s.firstServed(v, k.view, after))
		if first != math.MaxInt || m.oldLen != v.len() {
			pe.forget(first, m.oldLen, v.len(), k.ps)
		}
	}
}

// extendViews adds the records appended at positions from.. of the list to
// the views, or drops a view that cannot take them so (an unordered one, or
// a whole one they are not all in). Caller holds s.mu.
func (s *Sim) extendViews(from int) {
	for lv, v := range s.views {
		v.all = s.listed
		var in []int32
		for p := from; p < len(s.listed); p++ {
			if lv.holds(s.invoiceOwner(&s.listed[p])) {
				in = append(in, int32(p))
			}
		}
		v.sorted = v.sorted && s.idsSorted
		switch {
		case v.order == OrderUnordered || v.idx == nil && len(in) < len(s.listed)-from:
			delete(s.views, lv)
			continue
		case v.idx != nil:
			v.idx = append(v.idx, in...)
		}
		s.views[lv] = v
	}
}

// shrinkViews takes the records deleted from positions at (ascending) of
// the list out of the views, which keep their order. Caller holds s.mu.
func (s *Sim) shrinkViews(at []int) {
	for lv, v := range s.views {
		v.all = s.listed
		if v.idx != nil {
			kept := v.idx[:0:0]
			for _, p := range v.idx {
				k, gone := slices.BinarySearch(at, int(p))
				if !gone {
					kept = append(kept, p-int32(k))
				}
			}
			v.idx = kept
		}
		s.views[lv] = v
	}
}

// firstServed is the lowest index at which v (the view lv) serves one of
// the records at positions at of its list; MaxInt when it serves none.
// Caller holds s.mu.
func (s *Sim) firstServed(v invoiceView, lv listView, at []int) int {
	first := math.MaxInt
	for _, p := range at {
		if lv.holds(s.invoiceOwner(&v.all[p])) {
			first = min(first, v.servedIndex(p))
		}
	}
	return first
}
