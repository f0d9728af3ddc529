package mutation

import (
	"fmt"
	"path"
	"strings"
)

// An Equivalent is a mutant of a target that its tests rightly let live:
// the change cannot alter what the program does (an equivalent mutant), or
// alters only what no one relies on (a log's wording, a request more).
// Such mutants are listed with why, not chased with tests bent to kill
// them; they are reported, and not counted against the goal.
//
// A mutant is named by what it changes rather than where, so that an edit
// elsewhere in the file leaves the entry true: its mutator, the line it
// mutates (trimmed) and the text its column begins. An entry that no
// longer names a mutant, or names one the tests kill, is reported as
// stale, and fails the goal: the list stays as true as the code.
type Equivalent struct {
	Mutator string // gremlins's mutator: CONDITIONALS_BOUNDARY, ...
	Line    string // the line it mutates, without its indentation
	At      string // the text of the line from the mutant's column on
	Why     string // why it may live
}

// matches reports whether e names m.
func (e Equivalent) matches(m Mutant) bool {
	return m.Type == e.Mutator && m.Source == e.Line && strings.HasPrefix(m.At, e.At)
}

const (
	boundary = "CONDITIONALS_BOUNDARY"
	negation = "CONDITIONALS_NEGATION"
	operator = "ARITHMETIC_BASE"
	negative = "INVERT_NEGATIVES"
)

// shortNames are the mutators of Equivalents as the docs' table names them.
var shortNames = map[string]string{boundary: "boundary", negation: "negation", operator: "operator", negative: "sign"}

// Lines that more than one listed mutant changes, and why those live.
const (
	betweenBounds = "if compareIDs(low, id) < 0 && compareIDs(id, high) < 0 {"
	boundSeen     = "a gone id never equals a page's bound: the bound was seen in this sweep"
	emptyPageLine = `return l.unfollowable(fmt.Sprintf("recordsTotal is %d but the page from %d is empty", p.RecordsTotal, l.read-int64(len(p.Records))))`
	emptyPageWhy  = "it subtracts the length of an empty page, 0"
	sketchBit     = "bit <<= (uint(n) + uint(key[0])*7 + uint(key[n-1])*13) & 63"
	sketchWhy     = "the sketch picks another bit for a key: any bit a key always gets is as right, and only the comparisons it spares change"
)

// Equivalents are the mutants of each target known to change nothing that
// matters, by target file.
var Equivalents = map[string][]Equivalent{
	"internal/sync/deletion.go": {
		{boundary, "if ev.stated >= 0 && ev.distinct < ev.stated {", ">=",
			"with a stated total of 0 no count of distinct rows falls short of it"},
		{boundary, betweenBounds, "< 0 &&", boundSeen},
	},
	"internal/sync/sweep.go": {
		{boundary, "if next.notes.missed > 0 {", "> 0",
			"it adds 0 to the missed-records counter, which a sweep that missed nothing leaves as it was"},
	},
	"internal/sync/follow.go": {
		{negation, "if p.order == model.OrderAscending {", "==",
			"a newest-first follow never reads anchors, and the next sweep writes them anew"},
		{boundary, "if i < 0 {", "<",
			"differs only when the page's last record is its first: the follow then reads one page more"},
		{boundary, "if key := idKey(id); key >= k.low && key <= k.high {", ">=",
			"the lowest id of the range was read and written, so it is held either way"},
		{boundary, "if key := idKey(id); key >= k.low && key <= k.high {", "<=",
			"the highest id of the range was read and written, so it is held either way"},
	},
	"internal/sync/walk.go": {
		{boundary, "db.UpsertOptions{SeenBy: u.plan.seenBy, CountOthers: len(u.run.target.Logins) > 1})", "> 1",
			"with one login no row was listed first by another: counting them finds 0"},
	},
	"internal/sync/window.go": {
		{negation, `if !first || w.order != model.OrderAscending || w.at.Cursor == "" && w.at.Start == 0 {`, `== "" &&`,
			"an anchor with a cursor has a start too (the records read before it): only the first page has none of either, so the start is proved at every anchor either way, and at the first page, whose first record the warehouse holds"},
		{boundary, `if next.lowest == "" || compareIDs(id, next.lowest) < 0 {`, "< 0",
			"it assigns the lowest id the value already held"},
		{negative, "seenList: true, rows: next.rows, seen: ev.Seen, distinct: ev.Distinct, pages: next.pages, stated: -1,", "-1",
			"a stated length of 1 stops nothing: a window that read a record saw at least one, and one that read none decides nothing"},
		{operator, "seenList: true, rows: next.rows, seen: ev.Seen, distinct: ev.Distinct, pages: next.pages, stated: -1,", "-1",
			"a stated length of 1 stops nothing: a window that read a record saw at least one, and one that read none decides nothing"},
	},
	"internal/sync/ledger.go": {
		{boundary, "if n := len(a.IDs); n > 2 {", "> 2",
			"a page of two ids trimmed to its first and last is the same two ids"},
	},
	"internal/sync/order.go": {
		{boundary, "if k := idKey(top); k > o.max {", ">",
			"it assigns the value already held"},
		{boundary, "if j == 0 || compareIDs(id, top) > 0 {", "> 0",
			"it takes as the highest an id equal to the one held"},
	},
	"internal/erp/envelope.go": {
		{boundary, "if len(body) > maxBody {", ">",
			"only a body of exactly the 2 GiB limit tells them apart"},
	},
	"internal/erp/lister.go": {
		{operator, emptyPageLine, "-int64", emptyPageWhy},
		{negative, emptyPageLine, "-int64", emptyPageWhy},
	},
	"internal/erp/scan.go": {
		{negation, "for c := 0x20; c < utf8.RuneSelf; c++ {", "<",
			"the table only speeds the scan up: a byte outside it takes the slow path to the same answer"},
		{boundary, `if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {`, "<=",
			"differs only for an input cut right after a surrogate pair, with the same error at the same offset"},
		{boundary, "case c < 0x20:", "<",
			"a space, 0x20, never reaches this switch: strPlain passes it before"},
		{boundary, "if exp < expCeiling {", "<",
			"the exponent's clamp makes both sides equal"},
		{boundary, "if d := int(min(int64(intLen-lead)+exp, statCeiling)); d > s.st.IntDigits {", "> s.st",
			"it stores a value equal to the one held"},
		{boundary, "if d := int(min(int64(fracLen)-exp, statCeiling)); d > s.st.FracDigits {", "> s.st",
			"it stores a value equal to the one held"},
		{boundary, "if index == nil && !escaped && len(dst)-from < smallObject {", "< smallObject",
			"an object is indexed from one field later: only the speed changes"},
		{operator, sketchBit, "+ uint(key[0])", sketchWhy},
		{operator, sketchBit, "*7", sketchWhy},
		{operator, sketchBit, "+ uint(key[n-1])", sketchWhy},
		{operator, sketchBit, "*13", sketchWhy},
		{negation, "if *sketch&bit == 0 {", "==",
			"the sketch never gets a bit, so every key is searched for among the fields: slower, the same fields"},
		{operator, "index := make(map[uint64]int32, 4*smallObject)", "*smallObject",
			"a map's capacity hint"},
	},
}

// EquivalentsTable is Equivalents as the Markdown table of docs/testing.md,
// which a test keeps equal to it: the docs name every mutant left alive,
// and this list is where each is decided.
func EquivalentsTable() string {
	var b strings.Builder
	b.WriteString("| file | line | mutant | why it may live |\n|---|---|---|---|\n")
	for _, t := range Targets {
		for _, e := range Equivalents[t.File] {
			fmt.Fprintf(&b, "| `%s` | `%s` | %s at `%s` | %s |\n", path.Base(t.File),
				strings.ReplaceAll(e.Line, "|", `\|`), shortNames[e.Mutator], strings.ReplaceAll(e.At, "|", `\|`), e.Why)
		}
	}
	return b.String()
}
