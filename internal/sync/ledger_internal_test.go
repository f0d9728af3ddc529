package sync

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// TestLedger documents what the ledger makes of a login's state without
// the warehouse: whether a list may be followed and why not, the ring of
// anchors it keeps, and what a sweep's pages tell it.
func TestLedger(t *testing.T) {
	swept := db.Checkpoint{LastCompleted: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}

	t.Run("SaysWhyAListIsNotFollowed", func(t *testing.T) {
		cases := []struct {
			name string
			cp   db.Checkpoint
			kept db.Follow
			want model.Order
			why  string
		}{
			{"NoCompleteSweep", db.Checkpoint{}, db.Follow{ListOrder: model.OrderAscending}, "", "the login has no complete sweep yet"},
			{"Demoted", swept, db.Follow{ListOrder: model.OrderAscending, DemotedWhy: "sweep 7 found 2 records"}, "", "sweep 7 found 2 records"},
			{"NoSweepOrderYet", swept, db.Follow{}, "", "its last complete sweeps: none)"},
			{"TooFewIDs", swept, db.Follow{SweepOrders: []model.Order{model.OrderUnknown, model.OrderAscending}}, "", "its last complete sweeps: fewer than two ids, ascending)"},
			{"Unordered", swept, db.Follow{ListOrder: model.OrderUnordered, SweepOrders: []model.Order{model.OrderUnordered}}, "", "not in a strict order of ids (its last complete sweeps: unordered)"},
			{"Ascending", swept, db.Follow{ListOrder: model.OrderAscending}, model.OrderAscending, ""},
			{"Descending", swept, db.Follow{ListOrder: model.OrderDescending}, model.OrderDescending, ""},
		}
		for _, c := range cases {
			l := &ledger{kept: c.kept}
			got, why := l.followOrder(c.cp)
			if got != c.want || (c.why == "") != (why == "") || !strings.Contains(why, c.why) {
				t.Errorf("%s: followOrder = %q, %q; want %q and a reason containing %q", c.name, got, why, c.want, c.why)
			}
		}
	})

	t.Run("KeepsTheEndsOfEachAnchorsPageNewestFirstInARingOfBoundedLength", func(t *testing.T) {
		var ring []db.Anchor
		ring = pushAnchor(ring, db.Anchor{Start: 0, IDs: []string{"1"}})
		ring = pushAnchor(ring, db.Anchor{Start: 1, IDs: []string{"2", "3"}})
		ring = pushAnchor(ring, db.Anchor{Start: 3, IDs: []string{"4", "5", "6", "7"}})
		want := []db.Anchor{{Start: 3, IDs: []string{"4", "7"}}, {Start: 1, IDs: []string{"2", "3"}}, {Start: 0, IDs: []string{"1"}}}
		if !slices.EqualFunc(ring, want, sameAnchor) {
			t.Fatalf("ring %+v, want %+v", ring, want)
		}
		for i := range 2 * keptAnchors {
			ring = pushAnchor(ring, db.Anchor{Start: int64(10 + i), IDs: []string{"x"}})
		}
		if len(ring) != keptAnchors || ring[0].Start != int64(10+2*keptAnchors-1) {
			t.Errorf("after many pushes the ring holds %d anchors, newest at %d; want %d, newest last pushed", len(ring), ring[0].Start, keptAnchors)
		}
	})

	// A follow run of a list in ascending order reads its newest page again
	// each time; were each reading pushed as a new anchor, the ring would
	// soon hold the newest page only, and a window would read one page
	// whatever its size.
	t.Run("KeepsOneAnchorAPageWhenPagesAreReadAgain", func(t *testing.T) {
		var ring []db.Anchor
		for _, start := range []int64{0, 100, 200} {
			ring = pushAnchor(ring, db.Anchor{Start: start, IDs: []string{"a", "b"}})
		}
		for range 2 * keptAnchors { // follow runs: the newest page, read again
			ring = pushAnchor(ring, db.Anchor{Start: 200, IDs: []string{"a", "c"}})
		}
		// A follow from an older anchor reads that page and the newer ones again.
		ring = pushAnchor(ring, db.Anchor{Start: 100, IDs: []string{"a", "d"}})
		ring = pushAnchor(ring, db.Anchor{Start: 200, IDs: []string{"a", "e"}})
		ring = pushAnchor(ring, db.Anchor{Start: 300, IDs: []string{"f"}})
		want := []db.Anchor{{Start: 300, IDs: []string{"f"}}, {Start: 200, IDs: []string{"a", "e"}}, {Start: 100, IDs: []string{"a", "d"}}, {Start: 0, IDs: []string{"a", "b"}}}
		if !slices.EqualFunc(ring, want, sameAnchor) {
			t.Errorf("ring %+v, want %+v: one anchor a page, newest first, each as last read", ring, want)
		}
		// A sweep's anchor knows its page's offset and cursor; a follow run
		// that asks for the page by its cursor knows the cursor only.
		cursors := pushAnchor(pushAnchor(pushAnchor(nil, db.Anchor{Cursor: "c1", Start: 50, IDs: []string{"1"}}), db.Anchor{Cursor: "c2", Start: 100, IDs: []string{"2"}}), db.Anchor{Cursor: "c2", IDs: []string{"2", "3"}})
		if len(cursors) != 2 || cursors[0].Cursor != "c2" || cursors[1].Cursor != "c1" {
			t.Errorf("cursor ring %+v, want c2 then c1", cursors)
		}
	})

	t.Run("TakesAnchorsOfPagesWithRecordsAndCountsInsertsAtOrBelowTheFollowedID", func(t *testing.T) {
		page := func(start int64, ids ...string) *preparedPage {
			p := &preparedPage{}
			p.at = db.Anchor{Start: start}
			p.ids = ids
			return p
		}
		l := &ledger{kept: db.Follow{SweepFollowedKey: idKey("20")}}
		bk := &book{pages: []*preparedPage{page(0, "5", "10"), page(2, "19", "20", "21"), page(5)}, newIDs: []string{"19", "20", "21", "5"}}
		n := l.after(sweepNotes{}, bk)
		want := []db.Anchor{{Start: 2, IDs: []string{"19", "21"}}, {Start: 0, IDs: []string{"5", "10"}}}
		if !slices.EqualFunc(n.anchors, want, sameAnchor) {
			t.Errorf("anchors %+v, want %+v (an empty page is no anchor)", n.anchors, want)
		}
		// 20 is the highest id follows had read, so it is stored and never
		// inserted by a sweep; it is in newIDs here only to show the bound.
		if n.missed != 3 {
			t.Errorf("missed %d, want 3 (19, 20 and 5; not 21)", n.missed)
		}
		never := &ledger{}
		if n := never.after(sweepNotes{}, bk); n.missed != 0 {
			t.Errorf("a login never followed missed %d records, want 0", n.missed)
		}
	})
}

func sameAnchor(a, b db.Anchor) bool {
	return a.Cursor == b.Cursor && a.Start == b.Start && slices.Equal(a.IDs, b.IDs)
}
