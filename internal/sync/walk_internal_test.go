package sync

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/erpsync/erpsync/internal/db"
)

// TestCommitter documents the committer of a walk: the groups of a bulk
// load, their rows, and the ids it remembers writing.
func TestCommitter(t *testing.T) {
	t.Run("BoundsAGroupInRows", func(t *testing.T) {
		// A group of a bulk load takes pages while it holds fewer than
		// maxGroupRows rows: a crash re-fetches at most that (and a page).
		for rows, full := range map[int]bool{0: false, 1: false, maxGroupRows - 1: false, maxGroupRows: true, maxGroupRows + 1: true} {
			if got := groupFull(rows); got != full {
				t.Errorf("groupFull(%d) = %v, want %v", rows, got, full)
			}
		}
	})

	t.Run("StreamsTheRowsOfAGroupPageAfterPage", func(t *testing.T) {
		// The rows of a group stream into one COPY page after page: the next page
		// is asked for, with the count of rows handed out so far, only once the
		// page before is written out; the group ends at the walk's last page, at
		// errNotYet, or at an error, which it keeps.
		drain := func(g *pageRows) []string {
			var out []string
			for g.Next() {
				out = append(out, g.Row().ID)
			}
			return out
		}

		t.Run("AreThoseOfItsPagesInOrderAskedForWithTheRowsHandedOut", func(t *testing.T) {
			more := []*preparedPage{rowsPage(false), rowsPage(false, "c", "d", "e"), rowsPage(true, "f")}
			var asked []int
			g := newPageRows(rowsPage(false, "a", "b"), func(rows int) (*preparedPage, error) {
				asked = append(asked, rows)
				p := more[0]
				more = more[1:]
				return p, nil
			})
			if got := drain(g); !slices.Equal(got, []string{"a", "b", "c", "d", "e", "f"}) {
				t.Errorf("rows %v", got)
			}
			if !slices.Equal(asked, []int{2, 2, 5}) {
				t.Errorf("pages asked for after %v rows, want [2 2 5]", asked)
			}
			if len(g.pages) != 4 || g.pullErr != nil {
				t.Errorf("%d pages taken (%v), want 4", len(g.pages), g.pullErr)
			}
			if ids := g.ids(); !slices.Equal(ids, []string{"a", "b", "c", "d", "e", "f"}) {
				t.Errorf("ids %v", ids)
			}
			if g.Next() {
				t.Error("a group that ended at the last page goes on")
			}
		})

		t.Run("EndAtErrNotYetWithoutAnError", func(t *testing.T) {
			g := newPageRows(rowsPage(false, "a"), func(int) (*preparedPage, error) { return nil, fmt.Errorf("wrapped: %w", errNotYet) })
			if got := drain(g); !slices.Equal(got, []string{"a"}) || g.pullErr != nil || len(g.pages) != 1 {
				t.Errorf("rows %v, error %v, %d pages", got, g.pullErr, len(g.pages))
			}
		})

		t.Run("EndAtAPageThatCouldNotBeFetchedKeepingItsError", func(t *testing.T) {
			boom := errors.New("page 2 failed")
			g := newPageRows(rowsPage(false, "a"), func(int) (*preparedPage, error) { return nil, boom })
			if got := drain(g); !slices.Equal(got, []string{"a"}) || !errors.Is(g.pullErr, boom) {
				t.Errorf("rows %v, error %v", got, g.pullErr)
			}
		})

		t.Run("OfOnePageWithoutPullAreThatPages", func(t *testing.T) {
			g := newPageRows(rowsPage(false, "a", "b"), nil)
			if got := drain(g); !slices.Equal(got, []string{"a", "b"}) {
				t.Errorf("rows %v", got)
			}
		})
	})

	t.Run("RemembersTheIDsItWroteUpToMaxWritten", func(t *testing.T) {
		// A walk remembers the ids it wrote, so that a known page holding one is
		// compared after all; past maxWritten ids it stops remembering and treats
		// every page as possibly written.
		row := func(id string) []db.Row { return []db.Row{{ID: "other"}, {ID: id}} }
		c := &committer{}
		if c.mayHaveWritten(row("a")) {
			t.Error("a walk that wrote nothing may have written a")
		}
		c.wrote(nil)
		if c.written != nil || c.skipOff {
			t.Error("writing no ids changed what the walk remembers")
		}
		c.wrote([]string{"a", "b"})
		if !c.mayHaveWritten(row("a")) || !c.mayHaveWritten(row("b")) || c.mayHaveWritten(row("c")) {
			t.Error("the walk wrote a and b, not c")
		}
		ids := make([]string, maxWritten-2)
		for i := range ids {
			ids[i] = fmt.Sprint("n", i)
		}
		c.wrote(ids)
		if c.skipOff || len(c.written) != maxWritten {
			t.Fatalf("at maxWritten ids the walk still remembers them: skipOff %v, %d ids", c.skipOff, len(c.written))
		}
		c.wrote([]string{"one more"})
		if !c.skipOff || c.written != nil {
			t.Errorf("past maxWritten ids the walk remembers them still: skipOff %v, %d ids", c.skipOff, len(c.written))
		}
		if !c.mayHaveWritten(row("c")) {
			t.Error("past maxWritten ids, a page is not treated as possibly written")
		}
		c.wrote([]string{"x"})
		if c.written != nil {
			t.Error("a walk past maxWritten ids remembers new ones")
		}
	})
}

func rowsPage(last bool, ids ...string) *preparedPage {
	p := &preparedPage{}
	p.last = last
	for _, id := range ids {
		p.rows = append(p.rows, db.Row{ID: id})
	}
	return p
}
