package sync

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/erpsync/erpsync/internal/model"
)

// The order of ids is the one rule by which erpsync tells how a list is
// sorted: ids that are whole numbers (digits, no leading zero) compare by
// value and come before any other id; other ids compare by their bytes.
// idKey writes an id as text whose byte order is that order, so that the
// warehouse can keep the highest id read and compare it with COLLATE "C".
func idKey(id string) string {
	if wholeNumber(id) {
		return fmt.Sprintf("0%04d%s", len(id), id)
	}
	return "1" + id
}

// wholeNumber: id is digits only, without a leading zero (0 itself is
// one).
func wholeNumber(id string) bool {
	return digitsOnly(id) && (len(id) == 1 || id[0] != '0')
}

// compareIDs orders two ids by the rule above, as their keys compare,
// without writing them: a sweep compares every id it reads, between two
// commits, and a key per comparison was most of the CPU a sweep of
// unchanged pages spent there.
func compareIDs(a, b string) int {
	wa, wb := wholeNumber(a), wholeNumber(b)
	switch {
	case wa != wb:
		if wa {
			return -1
		}
		return 1
	case !wa:
		return strings.Compare(a, b)
	case len(a) < 10000 && len(b) < 10000:
		// Keyed by a length of four digits, then the digits.
		if c := cmp.Compare(len(a), len(b)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	}
	// A length of five digits or more sorts by its bytes.
	return strings.Compare(idKey(a), idKey(b))
}

// orderTrail follows the order of the ids a walk reads, page after page:
// strictly ascending, strictly descending, or neither (unordered, for
// good). A page may begin with ids of the page before it (a list shifted
// by records added ahead of the reader, read again): those are skipped.
type orderTrail struct {
	order model.Order     // unknown while fewer than two ids were read
	last  string          // the last id read
	prev  map[string]bool // the ids of the page before (nil: not known)
	max   string          // the sort key of the highest id read
}

// extend adds a page's ids, in list order, and returns the order so far.
func (o *orderTrail) extend(ids []string) model.Order {
	i := 0
	for i < len(ids) && o.prev[ids[i]] {
		i++
	}
	prev := o.last
	seen := make(map[string]bool, len(ids))
	top := ""
	for j, id := range ids {
		seen[id] = true
		if j == 0 || compareIDs(id, top) > 0 {
			top = id
		}
	}
	if len(ids) > 0 {
		if k := idKey(top); k > o.max {
			o.max = k
		}
	}
	for _, id := range ids[i:] {
		if prev != "" {
			step := model.OrderUnordered
			switch c := compareIDs(prev, id); {
			case c < 0:
				step = model.OrderAscending
			case c > 0:
				step = model.OrderDescending
			}
			switch {
			case o.order == model.OrderUnknown:
				o.order = step
			case o.order != step:
				o.order = model.OrderUnordered
			}
		}
		prev = id
	}
	if len(ids) > 0 {
		o.last, o.prev = ids[len(ids)-1], seen
	}
	return o.order
}

// listOrder is what the orders of a list's last complete sweeps (newest
// first) say of it: ascending or descending when the last one is that
// strict order and the one before it, if any, did not show another
// (one that read fewer than two ids shows none); unordered when it did,
// when the last one is in no strict order, or when follow runs were found
// to miss records (demoted); unknown before a sweep. So the first load is
// the first of the sweeps that learn a list's order: follow runs begin
// after it, checking the order on every page they read, and the next
// sweep confirms it or says otherwise.
func listOrder(orders []model.Order, demoted bool) model.Order {
	switch {
	case demoted:
		return model.OrderUnordered
	case len(orders) == 0 || orders[0] == model.OrderUnknown:
		return model.OrderUnknown
	case !orders[0].Strict():
		return model.OrderUnordered
	case len(orders) == 1 || orders[1] == orders[0] || orders[1] == model.OrderUnknown:
		return orders[0]
	}
	return model.OrderUnordered
}
