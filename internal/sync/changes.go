package sync

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// Where a list changes. Every read of a paged list (a sweep, a follow run,
// a window run) notes the pages on which it changed records, and a read
// that decides deletions the pages of the rows it marked, with how far
// each lay from the list's newest end: for a list in descending order its
// first page is the newest end; for one in ascending order the read knows
// it once it has read its last page. A login's window is sized from these
// (windowSize), so it follows where changes are, whichever kind of run saw
// them: once window runs take the recent changes, sweeps no longer see
// them, and a window sized from sweeps alone would shrink.

// changedPage notes the page of bk when it changed records.
func changedPage(kind model.RunKind, readID int64, order model.Order, bk *book) db.ChangedPages {
	c := db.ChangedPages{Kind: kind, ReadID: readID}
	if bk.updated == 0 || len(bk.pages) != 1 {
		return c
	}
	page := bk.pages[0].number
	c.Pages, c.FromEnd, c.Changes = []int64{page}, []int64{fromEnd(order, page)}, []int64{bk.updated}
	return c
}

// fromEnd is how many pages from the newest end page lies, when a read
// knows it as it writes the page (-1: once it read the last page).
func fromEnd(order model.Order, page int64) int64 {
	if order == model.OrderDescending {
		return page - 1
	}
	return -1
}

// goneAt notes the pages of the rows a read marked deleted, by the bounds
// of its pages: a row lies on the page whose range holds its id, or the
// page after the two it falls between (beyond the last: the last).
func goneAt(kind model.RunKind, readID int64, order model.Order, bounds []db.Bound, marked []string) db.ChangedPages {
	c := db.ChangedPages{Kind: kind, ReadID: readID}
	if !order.Strict() || len(bounds) == 0 || len(marked) == 0 {
		return c
	}
	at := map[int64]int64{}
	for _, id := range marked {
		page := bounds[len(bounds)-1].Page
		for _, b := range bounds {
			c := compareIDs(id, b.Last)
			if order == model.OrderAscending && c <= 0 || order == model.OrderDescending && c >= 0 {
				page = b.Page
				break
			}
		}
		at[page]++
	}
	for _, page := range slices.Sorted(maps.Keys(at)) {
		c.Pages, c.FromEnd, c.Changes = append(c.Pages, page), append(c.FromEnd, fromEnd(order, page)), append(c.Changes, at[page])
	}
	return c
}

// placeChanges sets, at the end of a read of a list in ascending order
// whose last page was last, how far from that end its changes lay.
func placeChanges(ctx context.Context, tx db.Querier, k model.Key, kind model.RunKind, readID int64, order model.Order, last int64) error {
	if order == model.OrderDescending {
		return nil
	}
	return db.PlaceChanges(ctx, tx, k, kind, readID, last)
}

// Window sizes. A window reads at least minWindowPages, at most
// maxWindowPages (the anchors a login keeps to start from); until enough
// changes were seen to learn from, it reads untaught pages.
const (
	minWindowPages   = 2
	maxWindowPages   = model.MaxWindowPages
	untaughtPages    = model.UntaughtWindowPages
	learnFromChanges = 20
	// windowShare of the changes seen over the last learnWindow lay
	// within the window's pages.
	windowShare = 0.95
	learnWindow = 7 * 24 * time.Hour
)

// windowSize is how many pages a window reads, and why: set (a setting,
// 0 when not set) wins; else the fewest pages from the newest end that
// held windowShare of the changes seen (by pages from the end), within
// the bounds; untaughtPages until learnFromChanges changes were seen.
func windowSize(set int, seen map[int64]int64) (int, string) {
	if set > 0 {
		return set, fmt.Sprintf("%d pages, as window_pages sets", set)
	}
	var total int64
	for _, n := range seen {
		total += n
	}
	if total < learnFromChanges {
		return untaughtPages, fmt.Sprintf("%d pages until changes are seen (%d seen in the last %s, %d needed to learn from)",
			untaughtPages, total, days(learnWindow), learnFromChanges)
	}
	positions := slices.Sorted(maps.Keys(seen))
	var within int64
	pages := positions[len(positions)-1] + 1
	for _, at := range positions {
		within += seen[at]
		if float64(within) >= windowShare*float64(total) {
			pages = at + 1
			break
		}
	}
	n := int(min(max(pages, minWindowPages), maxWindowPages))
	return n, fmt.Sprintf("%d pages: %.0f%% of the %d changes seen in the last %s lay within %d pages of the newest end (bounds %d to %d)",
		n, 100*windowShare, total, days(learnWindow), pages, minWindowPages, maxWindowPages)
}

// days writes a duration of whole days.
func days(d time.Duration) string { return fmt.Sprintf("%d days", int(d.Hours()/24)) }
