package sync

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestOrder documents the order of ids: how two ids compare, the order a
// walk's pages show, the order a list keeps, and whether it may be
// followed.
func TestOrder(t *testing.T) {
	// The order of ids: ids that are whole numbers (digits, no leading zero)
	// compare by value and come before any other id; other ids compare by
	// their bytes. idKey's byte order is that order, which the warehouse
	// compares with COLLATE "C".
	t.Run("PutsWholeNumbersByValueBeforeAnyOtherID", func(t *testing.T) {
		// Each id is below every id after it.
		ascendingIDs := []string{"0", "1", "2", "9", "10", "11", "99", "100", "1000000", "00", "007", "01", "09", "1a", "A-1", "a", "b", "ba"}
		for i, a := range ascendingIDs {
			for j, b := range ascendingIDs {
				want := 0
				switch {
				case i < j:
					want = -1
				case i > j:
					want = 1
				}
				if got := compareIDs(a, b); got != want {
					t.Errorf("compareIDs(%q, %q) = %d, want %d", a, b, got, want)
				}
				if got := strings.Compare(idKey(a), idKey(b)); got != want {
					t.Errorf("idKey(%q) against idKey(%q): %d, want %d", a, b, got, want)
				}
			}
		}
	})

	t.Run("TakesASingleDigitForAWholeNumberZeroIncluded", func(t *testing.T) {
		for _, id := range []string{"0", "5", "9"} {
			if k := idKey(id); !strings.HasPrefix(k, "0") || k != "00001"+id {
				t.Errorf("idKey(%q) = %q, want the key of a whole number, 00001%s", id, k, id)
			}
		}
	})

	t.Run("TakesNoDigitsWithALeadingZeroForAWholeNumber", func(t *testing.T) {
		for _, id := range []string{"00", "01", "0123"} {
			if k := idKey(id); k != "1"+id {
				t.Errorf("idKey(%q) = %q, want %q (compared by bytes)", id, k, "1"+id)
			}
		}
	})

	t.Run("ComparesOtherIDsByTheirBytes", func(t *testing.T) {
		for _, id := range []string{"a", "JE-2026-1", "12x", " 1", "-1", ""} {
			if k := idKey(id); k != "1"+id {
				t.Errorf("idKey(%q) = %q, want %q", id, k, "1"+id)
			}
		}
	})

	t.Run("ComparesIDsAsTheirKeysCompareWhateverTheirLengths", func(t *testing.T) {
		long := func(n int, digit byte) string { return "9" + strings.Repeat(string(digit), n-1) }
		ids := []string{"", "0", "7", "10", "0123", "a", "1a", "99999", long(9999, '9'), long(10000, '0'), long(10000, '1'),
			long(10001, '0'), "1" + strings.Repeat("0", 9999), "x" + strings.Repeat("9", 10000)}
		for _, a := range ids {
			for _, b := range ids {
				if got, want := compareIDs(a, b), strings.Compare(idKey(a), idKey(b)); got != want {
					t.Errorf("compareIDs of ids of %d and %d bytes = %d, their keys compare %d", len(a), len(b), got, want)
				}
			}
		}
	})

	t.Run("ComparesIDsWithoutWritingAKey", func(t *testing.T) {
		// A sweep compares every id it reads, on the path between two
		// commits.
		order := 0
		if n := testing.AllocsPerRun(100, func() { order += compareIDs("1000001", "A-1000002") + compareIDs("999", "1000") }); n != 0 {
			t.Errorf("compareIDs allocated %.0f times a call", n)
		}
	})

	t.Run("KeysWholeNumbersByTheirLengthThenTheirDigits", func(t *testing.T) {
		for id, want := range map[string]string{"10": "0000210", "123456": "00006123456"} {
			if k := idKey(id); k != want {
				t.Errorf("idKey(%q) = %q, want %q", id, k, want)
			}
		}
	})

	t.Run("IsTrailedPageAfterPage", func(t *testing.T) {
		// orderTrail follows the order of the ids a walk reads, page after page:
		// strictly ascending, strictly descending, or unordered for good; a page
		// may begin with ids of the page before it (read again), which are
		// skipped; it keeps the sort key of the highest id read.
		type step struct {
			ids  []string
			want model.Order
		}
		cases := []struct {
			rule  string
			pages []step
			max   string // the id whose key is the highest read
		}{
			{"OneIDSaysNoOrderYet", []step{{[]string{"5"}, ""}}, "5"},
			{"AnEmptyPageSaysNothing", []step{{nil, ""}, {[]string{}, ""}}, ""},
			{"TwoRisingIDsAreAscending", []step{{[]string{"1", "2"}, ascending}}, "2"},
			{"TwoFallingIDsAreDescending", []step{{[]string{"2", "1"}, descending}}, "2"},
			{"TheSameIDTwiceInARowIsNoStrictOrder", []step{{[]string{"3", "3"}, unordered}}, "3"},
			{"TheSameIDTwiceAfterARiseIsNoStrictOrder", []step{{[]string{"1", "2", "2"}, unordered}}, "2"},
			{"TheSameIDTwiceAfterAFallIsNoStrictOrder", []step{{[]string{"3", "2", "2"}, unordered}}, "3"},
			{"ARiseThenAFallIsUnordered", []step{{[]string{"1", "3", "2"}, unordered}}, "3"},
			{"AFallThenARiseIsUnordered", []step{{[]string{"3", "1", "2"}, unordered}}, "3"},
			{"WholeNumbersRiseByValueNotByBytes", []step{{[]string{"9", "10", "11"}, ascending}}, "11"},
			{"WholeNumbersFallByValueNotByBytes", []step{{[]string{"100", "20", "3"}, descending}}, "100"},
			{"TheOrderRunsOnAcrossPages", []step{{[]string{"1", "2"}, ascending}, {[]string{"3", "4"}, ascending}}, "4"},
			{"APagesFirstIDIsComparedWithThePageBeforesLast", []step{{[]string{"1", "5"}, ascending}, {[]string{"4", "6"}, unordered}}, "6"},
			{"ASingleIDOnTheNextPageSetsTheOrder", []step{{[]string{"7"}, ""}, {[]string{"8"}, ascending}}, "8"},
			{"ASingleIDOnTheNextPageLowerIsDescending", []step{{[]string{"8"}, ""}, {[]string{"7"}, descending}}, "8"},
			{"UnorderedIsForGood", []step{{[]string{"1", "3", "2"}, unordered}, {[]string{"4", "5"}, unordered}}, "5"},
			{"IDsOfThePageBeforeReadAgainAreSkipped", []step{{[]string{"1", "2", "3"}, ascending}, {[]string{"2", "3", "4", "5"}, ascending}}, "5"},
			{"IDsOfThePageBeforeReadAgainAreSkippedWhenDescending", []step{{[]string{"9", "8", "7"}, descending}, {[]string{"8", "7", "6"}, descending}}, "9"},
			{"APageOfNothingButThePageBeforesIDsChangesNothing", []step{{[]string{"1", "2"}, ascending}, {[]string{"1", "2"}, ascending}, {[]string{"3"}, ascending}}, "3"},
			{"OnlyALeadingRunOfThePageBeforesIDsIsSkipped", []step{{[]string{"1", "2", "3"}, ascending}, {[]string{"4", "2"}, unordered}}, "4"},
			{"AnEmptyPageKeepsThePageBeforeToCompareWith", []step{{[]string{"1", "5"}, ascending}, {nil, ascending}, {[]string{"4"}, unordered}}, "5"},
			{"TheHighestIDMayBeInTheMiddleOfAPage", []step{{[]string{"3", "10", "2"}, unordered}}, "10"},
			{"TheHighestIDByTheOrderNotByBytes", []step{{[]string{"9", "10"}, ascending}}, "10"},
			{"AnIDThatIsNotANumberIsAboveEveryNumber", []step{{[]string{"99", "a"}, ascending}}, "a"},
		}
		for _, c := range cases {
			t.Run(c.rule, func(t *testing.T) {
				var o orderTrail
				for i, p := range c.pages {
					if got := o.extend(p.ids); got != p.want {
						t.Fatalf("after page %d %v: order %q, want %q", i+1, p.ids, got, p.want)
					}
				}
				want := ""
				if c.max != "" {
					want = idKey(c.max)
				}
				if o.max != want {
					t.Errorf("highest key %q, want %q (id %s)", o.max, want, c.max)
				}
			})
		}

		t.Run("ThePageBeforeIsTheLastNonEmptyPage", func(t *testing.T) {
			var o orderTrail
			o.extend([]string{"1", "2"})
			o.extend(nil)
			if o.last != "2" || !o.prev["1"] || !o.prev["2"] || len(o.prev) != 2 {
				t.Errorf("after an empty page: last %q, page before %v", o.last, o.prev)
			}
			o.extend([]string{"3", "4"})
			if o.last != "4" || o.prev["1"] || !o.prev["3"] || !o.prev["4"] {
				t.Errorf("after a page: last %q, page before %v", o.last, o.prev)
			}
		})
	})

	t.Run("OfAListIsWhatItsLastSweepsShow", func(t *testing.T) {
		// A list's order is the strict order its last complete sweep (newest
		// first) showed, unless the sweep before it showed another; the
		// first load alone sets it. A list found to make follow runs miss
		// records is unordered until reset.
		unknown := model.OrderUnknown
		cases := []struct {
			orders  []model.Order
			demoted bool
			want    model.Order
		}{
			{nil, false, unknown},
			{[]model.Order{unknown}, false, unknown},
			{[]model.Order{ascending}, false, ascending},
			{[]model.Order{descending}, false, descending},
			{[]model.Order{unordered}, false, unordered},
			{[]model.Order{ascending, ascending}, false, ascending},
			{[]model.Order{descending, descending}, false, descending},
			{[]model.Order{ascending, unknown}, false, ascending},
			{[]model.Order{unknown, ascending}, false, unknown},
			{[]model.Order{ascending, ascending, descending}, false, ascending},
			{[]model.Order{descending, descending, unordered}, false, descending},
			{[]model.Order{ascending, descending}, false, unordered},
			{[]model.Order{descending, ascending}, false, unordered},
			{[]model.Order{unordered, unordered}, false, unordered},
			{[]model.Order{ascending, unordered}, false, unordered},
			{[]model.Order{unordered, ascending, ascending}, false, unordered},
			{[]model.Order{ascending}, true, unordered},
			{[]model.Order{ascending, ascending}, true, unordered},
			{[]model.Order{descending, descending}, true, unordered},
			{nil, true, unordered},
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("orders=%v,demoted=%v", c.orders, c.demoted), func(t *testing.T) {
				if got := listOrder(c.orders, c.demoted); got != c.want {
					t.Errorf("listOrder(%v, %v) = %q, want %q", c.orders, c.demoted, got, c.want)
				}
			})
		}
	})

	t.Run("IsFollowableOnlyWhenStrict", func(t *testing.T) {
		// Only a list in a strict order of ids may be followed.
		for order, want := range map[model.Order]bool{ascending: true, descending: true, unordered: false, "": false, "sideways": false} {
			if got := order.Strict(); got != want {
				t.Errorf("%q.Strict() = %t, want %t", order, got, want)
			}
		}
	})
}

// The orders, as the tests write them.
const (
	ascending  = model.OrderAscending
	descending = model.OrderDescending
	unordered  = model.OrderUnordered
)

// TestIDKeyInSQL documents erp.id_key, the order of ids in SQL, by which a
// window run's range and held rows are found: the same key as idKey for
// every id, so the two orders are one.
func TestIDKeyInSQL(t *testing.T) {
	t.Run("KeysEveryIDAsGoDoes", func(t *testing.T) {
		pool, _ := testdb.Pool(t)
		ids := []string{"0", "1", "9", "10", "99", "100", "007", "01", "0x1", "1a", "a", "A", "-1", "+1", "1.5", " 1", "1 ", "１",
			"12345678901234567890", strings.Repeat("9", 10001), strings.Repeat("1", 9999), "é", "Z", "", "2026-01", "INV-001"}
		for _, id := range ids {
			var got string
			if err := pool.QueryRow(context.Background(), `SELECT erp.id_key($1)`, id).Scan(&got); err != nil {
				t.Fatalf("erp.id_key(%q): %v", id, err)
			}
			if want := idKey(id); got != want {
				t.Errorf("erp.id_key(%.20q) = %.30q, idKey says %.30q", id, got, want)
			}
		}
		// And they order ids alike, compared as the warehouse compares them.
		var sorted []string
		if err := pool.QueryRow(context.Background(), `SELECT array_agg(id ORDER BY erp.id_key(id) COLLATE "C") FROM unnest($1::text[]) AS u(id)`,
			ids).Scan(&sorted); err != nil {
			t.Fatal(err)
		}
		if !slices.IsSortedFunc(sorted, compareIDs) {
			t.Errorf("ordered by erp.id_key, ids are not in the order of compareIDs: %.200v", sorted)
		}
	})
}

// TestWindowSize documents windowSize: how many pages a window reads.
func TestWindowSize(t *testing.T) {
	for _, c := range []struct {
		name string
		set  int
		seen map[int64]int64
		want int
	}{
		{"ASizeSetWins", 7, map[int64]int64{0: 100}, 7},
		{"UntaughtUntilEnoughChangesWereSeen", 0, map[int64]int64{0: learnFromChanges - 1}, untaughtPages},
		{"NothingSeenIsUntaught", 0, nil, untaughtPages},
		{"ChangesOnTheNewestPageGiveTheSmallestWindow", 0, map[int64]int64{0: 100}, minWindowPages},
		{"TheFewestPagesHoldingNinetyFivePercent", 0, map[int64]int64{0: 50, 3: 45, 40: 5}, 4},
		{"OneMorePageWhenNinetyFivePercentNeedsIt", 0, map[int64]int64{0: 50, 3: 44, 40: 6}, 41},
		{"NoMoreThanTheLargestWindow", 0, map[int64]int64{500: 100}, maxWindowPages},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, why := windowSize(c.set, c.seen); got != c.want || why == "" {
				t.Errorf("windowSize(%d, %v) = %d (%q), want %d", c.set, c.seen, got, why, c.want)
			}
		})
	}
}
