package sync

import "testing"

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
				if got := guardHolds(Deletions{Rows: c.rows, Live: c.live}); got != c.holds {
					t.Errorf("%d of %d live rows gone: holds %t, want %t", c.rows, c.live, got, c.holds)
				}
			})
		}
	})
}
