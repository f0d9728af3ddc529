package streams

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/sync"
)

var update = flag.Bool("update", false, "rewrite what is written from the catalog: docs/how-a-sync-works.md's table of streams, the migrations of new streams")

const (
	streamsDoc        = "../../../docs/how-a-sync-works.md"
	streamsTableStart = "<!-- streams: rendered from the catalog; go test ./internal/sync/streams -run TestTheStreamsTable -update -->\n"
	streamsTableEnd   = "<!-- end of streams -->\n"
)

// streamsTable renders the catalog as docs/how-a-sync-works.md lists it:
// the core streams first, then the others, each by name.
func streamsTable(c *sync.Catalog) string {
	code := func(s string) string { return "`" + s + "`" }
	names := c.Names()
	core := c.Core()
	slices.SortStableFunc(names, func(a, b string) int {
		return boolRank(!slices.Contains(core, a)) - boolRank(!slices.Contains(core, b))
	})
	var b strings.Builder
	b.WriteString("| stream | route | permission | contract | default schedule | core | history | scoped logins read |\n|---|---|---|---|---|---|---|---|\n")
	for _, n := range names {
		s, _ := c.Lookup(n)
		i := s.Declared()
		perm := "none listed"
		if i.Permission != "" {
			perm = code(i.Permission)
			perm = strings.ReplaceAll(perm, ", ", "`, `")
		}
		sched := code(i.ScheduleDefault())
		if i.Follows {
			sched = "follow " + code(i.ScheduleDefault()) + ", "
			if i.WindowSchedule != "" {
				sched += "window " + code(i.WindowSchedule) + ", "
			}
			sched += "sweep " + code(i.SweepScheduleDefault())
		}
		core, history := "", ""
		if i.Core {
			core = "yes"
		}
		if i.History == sync.HistoryOn {
			history = "yes"
		}
		b.WriteString("| " + code(n) + " | " + request.ReplaceAllString(i.Route, "`$0`") + " | " + perm + " | " + i.Contract.String() + " | " + sched + " | " + core + " | " + history + " | " + readers[i.Access] + " |\n")
	}
	return b.String()
}

// request is a request in a route's description: GET and its path.
var request = regexp.MustCompile("GET [^\\s,]+")

// readers says in words what each access rule lets a scoped login read.
var readers = map[sync.Access]string{
	sync.ByCompany: "its companies' rows",
	sync.BySource:  "every row of a source it holds a grant on",
	sync.ByLogin:   "the rows of logins its grants cover",
	sync.Withheld:  "nothing",
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestTheStreamsTable holds the table of streams in docs/how-a-sync-works.md
// to the catalog, so a stream added to the catalog fails here until its
// row is in the docs (go test ./internal/sync/streams -run
// TestTheStreamsTable -update writes it).
func TestTheStreamsTable(t *testing.T) {
	b, err := os.ReadFile(streamsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start, end := strings.Index(doc, streamsTableStart), strings.Index(doc, streamsTableEnd)
	if start < 0 || end < start {
		t.Fatalf("%s has no table between %q and %q", streamsDoc, streamsTableStart, streamsTableEnd)
	}
	want := streamsTable(MustDefault())
	if got := doc[start+len(streamsTableStart) : end]; got != want {
		if *update {
			if err := os.WriteFile(streamsDoc, []byte(doc[:start+len(streamsTableStart)]+want+doc[end:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s's table of streams is not the catalog's; run go test ./internal/sync/streams -run TestTheStreamsTable -update\n got:\n%s\nwant:\n%s", streamsDoc, got, want)
	}
}
