package sync

import "testing"

// TestTheDeletionGuardRule: a read that finds rows gone is held, not
// marked, when it would leave the stream without live rows (whatever its
// size), or when it finds more than half of the live rows gone and more
// than guardMinRows (10) of them. Everything else is marked at once.
func TestTheDeletionGuardRule(t *testing.T) {
	for _, c := range []struct {
		name       string
		rows, live int64
		holds      bool
	}{
		{"marks nothing of an empty stream", 0, 0, false},
		{"marks nothing when nothing is gone", 0, 30, false},
		{"holds the one row of a stream of one gone", 1, 1, true},
		{"holds six of six gone: a small list emptied", 6, 6, true},
		{"holds ten of ten gone: the stream left empty", 10, 10, true},
		{"marks one of six gone", 1, 6, false},
		{"marks five of six gone: more than half, but not more than ten", 5, 6, false},
		{"marks ten of eleven gone: not more than ten rows", 10, 11, false},
		{"marks ten of fifteen gone: more than half, but not more than ten", 10, 15, false},
		{"holds eleven of fifteen gone: more than half and more than ten", 11, 15, true},
		{"holds eleven of twenty-one gone: one row over half", 11, 21, true},
		{"marks eleven of twenty-two gone: exactly half", 11, 22, false},
		{"holds twelve of twenty-two gone: one more than half", 12, 22, true},
		{"marks fifteen of thirty gone: exactly half", 15, 30, false},
		{"holds sixteen of thirty gone: one more than half", 16, 30, true},
		{"holds twenty-five of thirty gone: a broken filter answering five", 25, 30, true},
		{"holds twenty-nine of thirty gone", 29, 30, true},
		{"holds thirty of thirty gone", 30, 30, true},
		{"marks five of thirty gone", 5, 30, false},
		{"marks eleven of a hundred gone", 11, 100, false},
		{"holds fifty-one of a hundred gone", 51, 100, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := guardHolds(Deletions{Rows: c.rows, Live: c.live}); got != c.holds {
				t.Errorf("%d of %d live rows gone: holds %t, want %t", c.rows, c.live, got, c.holds)
			}
		})
	}
}
