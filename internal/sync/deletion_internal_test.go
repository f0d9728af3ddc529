package sync

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// TestGuardHolds documents guardHolds, the deletion guard's rule: whether
// what a read finds gone is held or marked at once.
func TestGuardHolds(t *testing.T) {
	t.Run("HoldsAllLiveRowsGoneOrMoreThanHalfAndMoreThanTen", func(t *testing.T) {
		// A read that finds rows gone is held, not marked, when it would leave
		// the stream without live rows (whatever its size), or when it finds
		// more than half of the live rows gone and more than guardMinRows (10)
		// of them. Everything else is marked at once.
		for _, c := range []struct {
			name       string
			rows, live int64
			holds      bool
		}{
			{"MarksNothingOfAnEmptyStream", 0, 0, false},
			{"MarksNothingWhenNothingIsGone", 0, 30, false},
			{"HoldsTheOneRowOfAStreamOfOneGone", 1, 1, true},
			{"HoldsSixOfSixGoneASmallListEmptied", 6, 6, true},
			{"HoldsTenOfTenGoneTheStreamLeftEmpty", 10, 10, true},
			{"MarksOneOfSixGone", 1, 6, false},
			{"MarksFiveOfSixGoneMoreThanHalfButNotMoreThanTen", 5, 6, false},
			{"MarksTenOfElevenGoneNotMoreThanTenRows", 10, 11, false},
			{"MarksTenOfFifteenGoneMoreThanHalfButNotMoreThanTen", 10, 15, false},
			{"HoldsElevenOfFifteenGoneMoreThanHalfAndMoreThanTen", 11, 15, true},
			{"HoldsElevenOfTwentyOneGoneOneRowOverHalf", 11, 21, true},
			{"MarksElevenOfTwentyTwoGoneExactlyHalf", 11, 22, false},
			{"HoldsTwelveOfTwentyTwoGoneOneMoreThanHalf", 12, 22, true},
			{"MarksFifteenOfThirtyGoneExactlyHalf", 15, 30, false},
			{"HoldsSixteenOfThirtyGoneOneMoreThanHalf", 16, 30, true},
			{"HoldsTwentyFiveOfThirtyGoneABrokenFilterAnsweringFive", 25, 30, true},
			{"HoldsTwentyNineOfThirtyGone", 29, 30, true},
			{"HoldsThirtyOfThirtyGone", 30, 30, true},
			{"MarksFiveOfThirtyGone", 5, 30, false},
			{"MarksElevenOfAHundredGone", 11, 100, false},
			{"HoldsFiftyOneOfAHundredGone", 51, 100, true},
		} {
			t.Run(c.name, func(t *testing.T) {
				if got := guardHolds(c.rows, c.live); got != c.holds {
					t.Errorf("%d of %d live rows gone: holds %t, want %t", c.rows, c.live, got, c.holds)
				}
			})
		}
	})
}

// TestDecideDeletions documents decideDeletions, the one deletion
// decision: from the evidence a read gathered, which rows it marks
// deleted, which it holds for the next read, and what the guard holds.
func TestDecideDeletions(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	// sweep is the evidence of a complete sweep of three ascending pages
	// (ids 1-10, 20-30, 40-50) that committed 30 rows and saw each once.
	sweep := func(gone ...string) deletionEvidence {
		return deletionEvidence{stream: "invoices", read: "sweep 7", within: wholeList, seenList: true, rows: 30, seen: 30, distinct: 30,
			pages: 3, stated: -1, order: model.OrderAscending, gone: gone, live: 30 + int64(len(gone)), now: now,
			bounds: []db.Bound{{Page: 1, First: "1", Last: "10"}, {Page: 2, First: "20", Last: "30"}, {Page: 3, First: "40", Last: "50"}}}
	}
	with := func(ev deletionEvidence, change func(*deletionEvidence)) deletionEvidence {
		change(&ev)
		return ev
	}
	noted := func(d deletionDecision, part string) bool {
		return slices.ContainsFunc(d.said, func(s saying) bool { return strings.Contains(s.note, part) })
	}
	cases := []struct {
		rule string
		ev   deletionEvidence
		mark []string
		hold []string
		// setHold: the held rows are replaced (by hold); note: part of a
		// note the decision must say.
		setHold bool
		note    string
	}{
		{"MarksARowGoneInsideAPagesRange", sweep("5"), []string{"5"}, nil, true, ""},
		{"MarksARowGoneBeyondTheFirstOrLastPage", sweep("0", "60"), []string{"0", "60"}, nil, true, ""},
		{"HoldsARowGoneBetweenTwoPages", sweep("15"), nil, []string{"15"}, true, "where two of its pages meet"},
		{"MarksARowBetweenTwoPagesThatTheLastReadHeldToo",
			with(sweep("15"), func(e *deletionEvidence) { e.candidates = map[string]bool{"15": true} }), []string{"15"}, nil, true, ""},
		{"HoldsARowBetweenPagesOfADescendingList",
			with(sweep("15"), func(e *deletionEvidence) {
				e.order = model.OrderDescending
				e.bounds = []db.Bound{{Page: 1, First: "50", Last: "40"}, {Page: 2, First: "30", Last: "20"}, {Page: 3, First: "10", Last: "1"}}
			}), nil, []string{"15"}, true, ""},
		{"HoldsEveryRowOfAnUnorderedReadOfSeveralPages",
			with(sweep("5"), func(e *deletionEvidence) { e.order = model.OrderUnordered }), nil, []string{"5"}, true, ""},
		{"MarksEveryRowOfAReadOfOnePage",
			with(sweep("5", "15"), func(e *deletionEvidence) { e.pages, e.order = 1, model.OrderUnordered }), []string{"5", "15"}, nil, true, ""},
		{"MarksNothingOfABulkLoad", with(sweep("5"), func(e *deletionEvidence) { e.bulkLoad = true }), nil, nil, false, ""},
		{"MarksNothingWhenItsSeenListIsLost", with(sweep("5"), func(e *deletionEvidence) { e.seen = 29 }), nil, nil, false, "seen-list lost"},
		{"MarksNothingWhenItSawFewerRecordsThanStated", with(sweep("5"), func(e *deletionEvidence) { e.stated = 31 }), nil, nil, false, "the ERP stated 31"},
		{"MarksWhenItSawAsManyRecordsAsStated", with(sweep("5"), func(e *deletionEvidence) { e.stated = 30 }), []string{"5"}, nil, true, ""},
		{"MarksNothingOfAListThatMayBeCut", with(sweep("5"), func(e *deletionEvidence) { e.cut = 100 }), nil, nil, false, "exactly 100 records"},
		{"LeavesAListThatMayBeCutAloneWhenNothingIsGone", with(sweep(), func(e *deletionEvidence) { e.cut = 100 }), nil, nil, true, ""},
		{"MarksNothingOutsideItsRange",
			with(sweep("5", "39", "40", "45", "60"), func(e *deletionEvidence) { e.within = idRange{from: "40", order: model.OrderAscending} }),
			[]string{"40", "45", "60"}, nil, true, ""},
		{"MarksNothingOutsideTheRangeOfADescendingList",
			with(sweep("5", "39", "40", "45"), func(e *deletionEvidence) {
				e.order, e.pages = model.OrderDescending, 1
				e.within = idRange{from: "40", order: model.OrderDescending}
			}), []string{"40", "45"}, nil, true, ""},
		{"MarksNothingInARangeOfNoStrictOrder",
			with(sweep("45"), func(e *deletionEvidence) { e.within = idRange{from: "40", order: model.OrderUnordered} }), nil, nil, true, ""},
		{"ChildrenWithoutPagesAreMarkedAsTheGuardSays",
			deletionEvidence{within: wholeList, stated: -1, gone: []string{"a"}, live: 5, now: now}, []string{"a"}, nil, false, ""},
	}
	t.Run("MarksHoldsOrLeavesWhatTheEvidenceSays", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.rule, func(t *testing.T) {
				d := decideDeletions(c.ev)
				if !slices.Equal(d.Mark, c.mark) || !slices.Equal(d.Hold, c.hold) || d.SetHold != c.setHold {
					t.Errorf("mark %v, hold %v (set %t); want mark %v, hold %v (set %t)", d.Mark, d.Hold, d.SetHold, c.mark, c.hold, c.setHold)
				}
				if c.note != "" && !noted(d, c.note) {
					t.Errorf("said %+v, want a note with %q", d.said, c.note)
				}
			})
		}
	})

	// gone are 20 rows of 30 live, beyond the guard's bound.
	many := func() deletionEvidence {
		ev := sweep()
		ev.pages, ev.rows, ev.seen, ev.distinct = 1, 10, 10, 10
		for i := range 20 {
			ev.gone = append(ev.gone, string(rune('a'+i)))
		}
		ev.live = 30
		return ev
	}
	t.Run("HoldsADeletionTooLargeForOneRead", func(t *testing.T) {
		d := decideDeletions(many())
		if d.Mark != nil || !d.SetHeld || d.Held.Rows != 20 || d.Held.Sweeps != 1 || !d.Held.Since.Equal(now) || d.heldRows != 20 {
			t.Errorf("mark %v, held %+v (set %t, rows %d); want nothing marked, 20 rows held by 1 sweep since now", d.Mark, d.Held, d.SetHeld, d.heldRows)
		}
		if !bytes.Equal(d.Held.Digest, idsDigest(many().gone)) || !noted(d, "deletion held: 20 of 30") || !noted(d, "--confirm-deletions invoices") {
			t.Errorf("held digest or note wrong: %+v", d)
		}
	})
	t.Run("CountsTheReadsThatAgreeOnAHeldDeletion", func(t *testing.T) {
		ev := many()
		ev.held = db.Held{Rows: 20, Digest: idsDigest(ev.gone), Sweeps: 1, Since: now.Add(-time.Hour)}
		d := decideDeletions(ev)
		if d.Mark != nil || d.Held.Sweeps != 2 || !d.Held.Since.Equal(now.Add(-time.Hour)) {
			t.Errorf("mark %v, held %+v; want nothing marked, 2 sweeps agreeing since the first", d.Mark, d.Held)
		}
	})
	t.Run("StartsCountingAgainWhenOtherRowsAreGone", func(t *testing.T) {
		ev := many()
		ev.held = db.Held{Rows: 20, Digest: []byte("other rows"), Sweeps: 2, Since: now.Add(-time.Hour)}
		if d := decideDeletions(ev); d.Mark != nil || d.Held.Sweeps != 1 || !d.Held.Since.Equal(now) {
			t.Errorf("mark %v, held %+v; want a new count from now", d.Mark, d.Held)
		}
		ev.held = db.Held{Rows: 19, Digest: idsDigest(ev.gone), Sweeps: 2}
		if d := decideDeletions(ev); d.Held.Sweeps != 1 {
			t.Errorf("held %+v with another count of rows; want a new count", d.Held)
		}
	})
	t.Run("MarksAHeldDeletionWhenThreeReadsAgree", func(t *testing.T) {
		ev := many()
		ev.held = db.Held{Rows: 20, Digest: idsDigest(ev.gone), Sweeps: guardConfirmations, Since: now.Add(-time.Hour)}
		d := decideDeletions(ev)
		if len(d.Mark) != 20 || !d.SetHeld || d.Held.Rows != 0 || d.heldRows != 0 || !noted(d, "in 3 complete sweeps in a row") {
			t.Errorf("mark %d rows, held %+v (set %t); want 20 marked and nothing held", len(d.Mark), d.Held, d.SetHeld)
		}
	})
	t.Run("MarksAtOnceWhatAnOperatorConfirms", func(t *testing.T) {
		ev := many()
		ev.confirmed = true
		if d := decideDeletions(ev); len(d.Mark) != 20 || d.SetHeld || !noted(d, "as the operator confirmed") {
			t.Errorf("mark %d rows, held set %t; want 20 marked at once", len(d.Mark), d.SetHeld)
		}
	})
	t.Run("ForgetsAHeldDeletionWhenTheRowsAreGoneNoMore", func(t *testing.T) {
		ev := sweep()
		ev.held = db.Held{Rows: 20, Digest: []byte("x"), Sweeps: 2}
		if d := decideDeletions(ev); !d.SetHeld || d.Held.Rows != 0 || d.Mark != nil {
			t.Errorf("held %+v (set %t), mark %v; want the held deletion forgotten", d.Held, d.SetHeld, d.Mark)
		}
		if d := decideDeletions(sweep()); d.SetHeld {
			t.Error("a read with nothing held and nothing gone records the guard's state")
		}
	})
}
