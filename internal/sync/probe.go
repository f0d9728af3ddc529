package sync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// Prober is a stream that can look at its route without writing anything:
// one small read per login, for `erpsync probe`, the first command
// against an installation.
type Prober interface {
	Probe(ctx context.Context, p *Probe) ProbeReport
}

// Probe is one login of a source, as a Prober sees it: its View.
type Probe struct {
	*View
}

// NewProbe is the probe of a login of t whose token carries id's company
// and branch.
func NewProbe(t Target, l Login, id erp.Identity) *Probe {
	return &Probe{View: &View{target: t, login: l,
		scope: model.Scope{Key: model.Key{Source: t.Source, Login: l.Name}, CompanyID: id.CompanyID, BranchID: id.BranchID}}}
}

// Report is the report of stream s for this login, its declarations
// filled in; route, when not "", overrides Info's.
func (p *Probe) Report(s Stream, route string) ProbeReport {
	info := s.Declared()
	return ProbeReport{Stream: s.Declared().Name, Login: p.scope.Login, CompanyID: p.scope.CompanyID, BranchID: p.scope.BranchID,
		Route: cmp.Or(route, info.Route), Permission: info.Permission, Contract: info.Contract}
}

// ProbeReport is what one small read of a stream's route showed through
// one login.
type ProbeReport struct {
	Stream string `json:"stream"`
	// Login and its context, as the token says.
	Login      string   `json:"login"`
	CompanyID  string   `json:"company_id"`
	BranchID   string   `json:"branch_id"`
	Route      string   `json:"route"`
	Permission string   `json:"permission,omitempty"`
	Contract   Contract `json:"contract"`
	// Status is the HTTP status of the answer; 0 when none came.
	Status int `json:"status"`
	// Problem says, in words, what makes the stream unusable; "" when it
	// looks usable.
	Problem  string   `json:"problem,omitempty"`
	Envelope string   `json:"envelope,omitempty"`
	Paging   []string `json:"paging,omitempty"` // the paging signals the answer gave
	Records  int      `json:"records"`
	// WithID counts the records that carry a usable id; Rejected those
	// erpsync would set aside, with the first reason.
	WithID         int          `json:"with_id"`
	Rejected       int          `json:"rejected"`
	RejectedReason string       `json:"rejected_reason,omitempty"`
	Money          []MoneyProbe `json:"money,omitempty"`
	// Missing are expected fields some record lacks; Unexpected are fields
	// erpsync does not expect (kept in payload all the same).
	Missing    []string `json:"missing,omitempty"`
	Unexpected []string `json:"unexpected,omitempty"`
	// Labelled counts the records that carry their own company and branch
	// (their rows are labelled with them), OtherBranch those of them whose
	// branch is not the login's: a sign of company-wide lists.
	Labelled    int `json:"labelled"`
	OtherBranch int `json:"other_branch"`
	// ListScope is what the answers of all the source's logins show of
	// the list: "branch" (each login lists its branch's records),
	// "company" (each lists the whole company's), or "" (cannot tell).
	ListScope string `json:"list_scope,omitempty"`
	// Order is the order of the ids a paged list's first page listed
	// ("ascending", "descending", "unordered"; "" with fewer than two),
	// and Follow the way it would be followed between complete sweeps.
	Order  model.Order `json:"order,omitempty"`
	Follow string      `json:"follow,omitempty"`
	// Warnings are what is worth knowing without making the stream
	// unusable.
	Warnings []string `json:"warnings,omitempty"`
	// IDs are the ids read, to compare what the logins list.
	IDs []string `json:"-"`
}

// MoneyProbe is how one money field of the records read parsed.
type MoneyProbe struct {
	Field  string `json:"field"`
	Parsed int    `json:"parsed"`
	Failed int    `json:"failed"`
	Scales []int  `json:"scales,omitempty"` // fractional digits seen
}

// Usable reports whether the stream looks usable on this installation.
func (p ProbeReport) Usable() bool { return p.Problem == "" }

// probePageSize is how many records a probe asks for.
const probePageSize = 5

// Probe reads the first page of the route.
func (l *List) Probe(ctx context.Context, p *Probe) ProbeReport {
	rep := p.Report(l, "GET "+p.Path(l.Path))
	req := l.request(p.target, "")
	req.PageSize = probePageSize
	page, err := p.FirstPage(ctx, req)
	if err != nil {
		rep.Failed(err)
		return rep
	}
	defer page.Release()
	rep.Status = http.StatusOK
	rep.Page(page, req.Asked())
	rep.Examine(page, []string{"id"}, l.Table.columnsOf(true), l.Table.Expected())
	if l.follows() {
		var trail orderTrail
		rep.Order = trail.extend(rep.IDs)
		rep.Follow = followStrategy(rep.Order)
	}
	return rep
}

// followStrategy says how a list whose ids come in order would be
// followed between its complete sweeps.
func followStrategy(order model.Order) string {
	switch order {
	case model.OrderAscending:
		return "new records last: follow runs ask again from the last page read and read on"
	case model.OrderDescending:
		return "new records first: follow runs read from the first page to one the warehouse has"
	case model.OrderUnordered:
		return "not in a strict order of ids: every run is a complete sweep"
	}
	return "too few records to tell the order: complete sweeps until one shows it"
}

// Failed records what an error says of the route: its status, and a 403
// or 404 in the words an administrator needs.
func (p *ProbeReport) Failed(err error) {
	var he *erp.HTTPError
	var ae *erp.AuthError
	var ee *erp.EnvelopeError
	var pe *erp.PagingError
	switch {
	case errors.As(err, &he):
		p.Status = he.Status
		switch he.Status {
		case http.StatusForbidden:
			p.Problem = "access refused (403): " + Forbidden(p.Permission)
		case http.StatusNotFound:
			p.Problem = "route absent (404): this ERP release does not serve it"
		default:
			p.Problem = err.Error()
		}
	case errors.As(err, &ae):
		p.Status, p.Problem = ae.Status, err.Error()
	case errors.As(err, &ee):
		p.Status, p.Problem = http.StatusOK, err.Error()
	case errors.As(err, &pe):
		p.Status, p.Problem = http.StatusOK, err.Error()
	default:
		p.Problem = err.Error()
	}
}

// Forbidden names every cause the API reference gives for a 403 on a
// read: a permission the integration user lacks (by name, when the
// reference names one), the licence, or the login's company or branch
// context.
func Forbidden(permission string) string {
	perm := "the integration user lacks the route's permission"
	if permission != "" {
		perm = "the integration user lacks " + permission
	}
	return perm + ", or the ERP's licence does not cover the route, or the login's company or branch context cannot reach it"
}

// refusedBecause adds to a 403 the causes an administrator should look
// at (Forbidden), so that a failed run's error says what probe would.
func refusedBecause(err error, permission string) error {
	var he *erp.HTTPError
	if errors.As(err, &he) && he.Status == http.StatusForbidden {
		return fmt.Errorf("%w: %s", err, Forbidden(permission))
	}
	return err
}

// Page records the envelope and the paging signals of an answer to a
// request that asked for asked records (0: asked for no page size), and
// warns of a list that may be cut.
func (p *ProbeReport) Page(page *erp.Page, asked int) {
	p.Envelope = page.Envelope
	if page.Pagination {
		p.Paging = append(p.Paging, "has_next="+strconv.FormatBool(page.HasNext))
		if page.NextCursor != "" {
			p.Paging = append(p.Paging, "next_cursor")
		}
	}
	if page.Next != "" {
		p.Paging = append(p.Paging, "next")
	}
	if page.Count >= 0 {
		p.Paging = append(p.Paging, "count="+strconv.FormatInt(page.Count, 10))
	}
	if page.RecordsTotal >= 0 {
		p.Paging = append(p.Paging, "recordsTotal="+strconv.FormatInt(page.RecordsTotal, 10))
	}
	if mayBeCut(page, asked) {
		p.Warnings = append(p.Warnings, cutWarning(len(page.Records)))
	}
}

// Examine looks at records as a stream would use them, read through the
// report's login: is the first of idFields there (nil: no id needed), do
// the money fields parse and with what scale, which expected fields are
// missing and which are unexpected (when expect is not nil), and which
// company and branch the records carry.
func (p *ProbeReport) Examine(page *erp.Page, idFields, money []string, expect map[string]string) {
	p.Records = len(page.Records)
	probes := make([]MoneyProbe, len(money))
	missing, unexpected := map[string]bool{}, map[string]bool{}
	for i, raw := range page.Records {
		rec := page.Parsed[i]
		var err error
		if !rec.IsObject() {
			rec, err = erp.ParseRecord(raw)
		}
		if err == nil {
			err = CheckRecord(rec)
		}
		if err == nil {
			err = p.checkID(rec, idFields)
		}
		if lb := RecordLabels(rec); lb.Own {
			p.Labelled++
			if lb.CompanyID != p.CompanyID || lb.BranchID != p.BranchID {
				p.OtherBranch++
			}
		}
		for j, field := range money {
			probes[j].Field = field
			d, ok, merr := rec.Money(field)
			switch {
			case merr == nil && ok:
				merr = db.CheckNumeric(d)
			case merr == nil:
				continue
			}
			if merr != nil {
				probes[j].Failed++
				err = cmp.Or(err, merr)
				continue
			}
			probes[j].Parsed++
			if s := max(int(-d.Exponent()), 0); !slices.Contains(probes[j].Scales, s) {
				probes[j].Scales = append(probes[j].Scales, s)
			}
		}
		if err != nil {
			p.Rejected++
			if p.RejectedReason == "" {
				p.RejectedReason = err.Error()
			}
		}
		if expect == nil || !rec.IsObject() {
			continue
		}
		for field := range expect {
			if _, ok := rec.Get(field); !ok {
				missing[field] = true
			}
		}
		for k := range rec.Len() {
			if key, _ := rec.Field(k); expect[string(key)] == "" {
				unexpected[string(key)] = true
			}
		}
	}
	for _, m := range probes {
		slices.Sort(m.Scales)
	}
	p.Money = probes
	p.Missing, p.Unexpected = sortedKeys(missing), sortedKeys(unexpected)
	if p.Records > 0 && p.WithID == 0 && idFields != nil {
		p.Problem = fmt.Sprintf("no record has a usable %s", strings.Join(idFields, " or "))
	}
}

func (p *ProbeReport) checkID(rec erp.Record, idFields []string) error {
	if idFields == nil {
		p.WithID++
		return nil
	}
	for _, f := range idFields {
		if v, ok, err := rec.Text(f); err != nil || ok {
			if _, err := KeyField(rec, f); err != nil {
				return err
			}
			p.WithID++
			p.IDs = append(p.IDs, v)
			return nil
		}
	}
	return fmt.Errorf("record has no %s", strings.Join(idFields, " or "))
}

// ListScopes decides, for each stream, whether its lists are scoped to
// the login's branch or company-wide, from what every login of one source
// read (reports of one source, every stream and login): records of
// another branch say company-wide; logins of different branches that
// read the same records say company-wide, and that read none in common,
// branch-scoped. One login whose records all carry its own branch says
// branch-scoped; without labels, one login cannot tell.
func ListScopes(reports []ProbeReport) {
	byStream := map[string][]int{}
	for i, r := range reports {
		if r.Problem == "" && r.Records > 0 {
			byStream[r.Stream] = append(byStream[r.Stream], i)
		}
	}
	for _, idx := range byStream {
		scope := ""
		for _, i := range idx {
			r := reports[i]
			switch {
			case r.OtherBranch > 0:
				scope = "company"
			case scope == "" && r.Labelled == r.Records:
				scope = "branch"
			}
		}
		for a := 0; a < len(idx) && scope != "company"; a++ {
			for b := a + 1; b < len(idx); b++ {
				ra, rb := reports[idx[a]], reports[idx[b]]
				if ra.CompanyID != rb.CompanyID || ra.BranchID == rb.BranchID {
					continue
				}
				if shared(ra.IDs, rb.IDs) {
					scope = "company"
				} else if len(ra.IDs) > 0 && len(rb.IDs) > 0 {
					scope = "branch"
				}
			}
		}
		for _, i := range idx {
			reports[i].ListScope = scope
		}
	}
}

func shared(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
