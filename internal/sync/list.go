package sync

import (
	"crypto/sha256"
	"fmt"
	"net/url"
	"strings"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// List is a stream read from one list route into one entity table,
// erp.<Name> (Info.Table: its columns and the fields it expects). Most
// streams are a List; adding one is a value of this type plus the
// migration of its table. Its Info is declared once, in the value; the
// route, whether it follows and its table's name are the list's own.
type List struct {
	Info
	Path   string     // the list route; it may start with a {prefix} (see Target.Prefixes)
	Query  url.Values // filters sent with every page
	Paging erp.Paging // how the first page is asked for; answers' own paging is followed anyway
}

// Declared is the list's Info, with its route, whether it follows and its
// table.
func (l *List) Declared() Info {
	i := l.Info
	i.Route = "GET " + l.Path
	if len(l.Query) > 0 {
		i.Route += "?" + l.Query.Encode()
	}
	i.Follows = l.follows()
	return i
}

// Validate checks the definition and prepares its SQL; Catalog.Add calls it.
func (l *List) Validate() error {
	if !strings.HasPrefix(l.Path, "/") && !strings.HasPrefix(l.Path, "{") {
		return fmt.Errorf("path %q must start with / (or a {prefix})", l.Path)
	}
	if l.Table == nil {
		l.Table = &Table{}
	}
	if err := l.validateTable(); err != nil {
		return err
	}
	if l.Table.Name != l.Name || l.Table.Own {
		return fmt.Errorf("a list's table is its entity table, erp.%s", l.Name)
	}
	return nil
}

// follows: a list paged by cursor or by start/length may be followed
// (read from where the last read ended) between complete sweeps; a list
// read in one answer is read whole every time.
func (l *List) follows() bool { return l.Paging == erp.CursorPaged || l.Paging == erp.OffsetPaged }

// request is the walk of the route for a source, from cursor ("" for the
// first page).
func (l *List) request(t Target, cursor string) erp.ListRequest {
	return erp.ListRequest{Path: t.Path(l.Path), Query: l.Query, Paging: l.Paging, PageSize: t.PageSize, Cursor: cursor}
}

// requestAt is the walk of the route from a position read earlier.
func (l *List) requestAt(t Target, at db.Anchor) erp.ListRequest {
	req := l.request(t, at.Cursor)
	req.Start = at.Start
	return req
}

// prepare checks and converts a page's records. It is pure CPU work, done
// on the fetching side of the pipeline while the previous page is written.
// A page known (answered byte for byte as in the last complete sweep, see
// knownPages) holds rows the warehouse has as they are: only their ids
// (for the seen-list) and drift are taken.
func (l *List) prepare(p *erp.Page, known knownPages, scope model.Scope) *preparedPage {
	records, parsed := p.Records, p.Parsed
	page := &preparedPage{}
	page.received, page.rows = len(records), make([]db.Row, 0, len(records))
	request := known.request(p)
	page.known = known.holds(request, p.Digest)
	var drift Drift
	// One allocation for the typed values of the whole page.
	n := len(l.Table.Columns)
	values := make([]any, len(records)*n)
	for i, raw := range records {
		var row db.Row
		var rec erp.Record
		var err error
		if page.known {
			rec = parsed[i]
			row, err = l.Table.knownRow(rec, values[i*n:(i+1)*n:(i+1)*n], &drift)
		} else {
			row, rec, err = l.convert(p, i, values[i*n:(i+1)*n:(i+1)*n], &drift)
		}
		if err != nil {
			id, _, _ := rec.Text("id") // a zero Record has no id
			page.rejected = append(page.rejected, db.Rejected{RecordID: id, Reason: err.Error(), Record: raw})
			continue
		}
		page.ids = append(page.ids, row.ID)
		if row.Labels.Own {
			page.labelled++
			if row.Labels.CompanyID != scope.CompanyID || row.Labels.BranchID != scope.BranchID {
				page.otherBranch++
			}
		}
		page.rows = append(page.rows, row)
	}
	// A record listed twice in one page keeps its last version: two rows
	// with one key in one INSERT would fail the whole page.
	page.rows = KeepLast(page.rows, func(r db.Row) string { return r.ID }, func(earlier db.Row) {
		drift.add("id", "duplicate", "listed twice on one page; the last copy kept", earlier.ID)
	})
	page.drift = drift.Entries()
	// A page with rejected records is read in full every time, so that
	// each of them is counted and its last_seen kept current.
	if len(page.rejected) == 0 && known.on {
		page.digest = &db.PageDigest{Request: request, Answer: p.Digest}
	}
	return page
}

// reprepare turns a known prepared page into a full one, to be written.
func (l *List) reprepare(page *preparedPage) {
	full := l.prepare(page.answer, knownPages{}, page.scope)
	page.known, page.rows, page.rejected, page.drift, page.ids = false, full.rows, full.rejected, full.drift, full.ids
}

// knownPages are the pages of a stream's last complete sweep, by a digest
// of their request, with the digest of what the ERP answered then. The
// request's digest also covers the stream's definition and the run's
// scope, so a changed definition or scope knows no page. A page holding a
// row changed since that sweep by anything but the sweep (a follow run,
// or a hand in the warehouse: see db.Table.KnownPages) is not known: its
// rows may not be as that answer left them.
type knownPages struct {
	on      bool   // the sweep records its pages (all but bulk loads' pages are looked up)
	context []byte // what the request digest covers besides the request
	answers db.Answers
	changed map[string]bool
}

// digestVersion changes whenever the way records become rows changes: the
// pages a previous version recorded are then known no more.
const digestVersion = "3"

func (l *List) knownPages(sc model.Scope, answers db.Answers, changed []string) knownPages {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s\x00%s\x00", digestVersion, l.Name, sc.Source, sc.Login, sc.CompanyID, sc.BranchID)
	for _, c := range l.Table.Columns {
		fmt.Fprintf(h, "%s\x00%s\x00%q\x00%d\x00%t\x00%d\x00", c.Name, c.Field, c.Alt, c.Type, c.Lenient, c.Scale)
	}
	k := knownPages{on: true, context: h.Sum(nil), answers: answers, changed: make(map[string]bool, len(changed))}
	for _, id := range changed {
		k.changed[id] = true
	}
	return k
}

// touched reports whether one of rows changed since the known pages'
// sweep.
func (k knownPages) touched(rows []db.Row) bool {
	for _, r := range rows {
		if k.changed[r.ID] {
			return true
		}
	}
	return false
}

func (k knownPages) request(p *erp.Page) [sha256.Size]byte {
	if !k.on {
		return [sha256.Size]byte{}
	}
	h := sha256.New()
	h.Write(k.context)
	h.Write([]byte(p.Request))
	return [sha256.Size]byte(h.Sum(nil))
}

func (k knownPages) holds(request, answer [sha256.Size]byte) bool {
	a, ok := k.answers[request]
	return ok && a == answer
}

// convert checks the page's record i and makes its row, typed values in
// values, counting drift. The scanner's parse is used when it made one of
// the record.
func (l *List) convert(p *erp.Page, i int, values []any, drift *Drift) (db.Row, erp.Record, error) {
	raw := p.Records[i]
	var rec erp.Record
	if p.Parsed != nil && p.Parsed[i].IsObject() {
		rec = p.Parsed[i]
	} else {
		var err error
		if rec, err = erp.ParseRecord(raw); err != nil {
			return db.Row{}, erp.Record{}, err
		}
	}
	row, err := l.Table.Row(rec, raw, values, drift)
	return row, rec, err
}
