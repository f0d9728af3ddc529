package erpsim

import (
	"context"
	"net/http"
	"slices"
	"strconv"
)

// Several users of one installation: each token carries the company and
// branch of the user who logged in, and the lists a token reads hold the
// records of its company, or only of its branch, as the installation is
// configured. A company or branch named in a request never widens that.

// ListScope is what the lists of a token hold.
type ListScope int

const (
	// ScopeCompany: a list holds every record of the token's company (the
	// default).
	ScopeCompany ListScope = iota
	// ScopeBranch: a list holds only the records of the token's branch; a
	// journal preview or access list of another branch's record answers
	// 404, and the balance-sheet tree (with BalanceSheetHistory) is the
	// branch's.
	ScopeBranch
)

// RecordLabels is how records name the company and branch they belong to:
// invoices, journal entries, payment and receipt vouchers and cashbox
// reconciliations. Cashboxes carry branch_id whatever this says.
type RecordLabels int

const (
	// LabelsNone: no company or branch fields beyond what records carry
	// anyway (the default).
	LabelsNone RecordLabels = iota
	// LabelsIDs: records end in "company_id":<int>,"branch_id":<int>
	// (cashboxes gain company_id only). An invoice of BranchID -1 has
	// "branch_id":null.
	LabelsIDs
	// LabelsObjects: records end in "company":{"id":<int>,"name":"Company
	// <id>"},"branch":{"id":<int>,"name":"Branch <id>"}. An invoice of
	// BranchID -1 has "branch":null.
	LabelsObjects
)

// SetListScope changes what the lists of every token hold.
func (s *Sim) SetListScope(sc ListScope) { set(s, &s.scope, sc) }

// SetRecordLabels changes how records name their company and branch.
func (s *Sim) SetRecordLabels(l RecordLabels) { set(s, &s.labels, l) }

// Users returns the users who may log in, with their company and branch
// (Options.Users with zero contexts filled in, or the one user of
// Options.Username and Password).
func (s *Sim) Users() []User {
	return slices.Clone(s.opts.Users)
}

// Branches returns the installation's branches, sorted.
func (s *Sim) Branches() []int {
	return slices.Clone(s.branches)
}

// InvoicesOfBranch returns the served invoices (hostile ones included when
// on) that belong to Options.CompanyID and that branch, in list order: what
// a token of that branch lists under ScopeBranch. Branch 0 gives every
// invoice of the company, what ScopeCompany lists.
func (s *Sim) InvoicesOfBranch(branch int) []Invoice {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.invoiceView(listView{company: s.opts.CompanyID, branch: branch})
	out := make([]Invoice, v.len())
	for i := range out {
		out[i] = *v.at(i)
	}
	return out
}

// usersWithDefaults returns opts.Users with zero contexts filled in, or
// the one user of Username and Password when there are none.
func usersWithDefaults(opts Options) []User {
	if len(opts.Users) == 0 {
		return []User{{Username: opts.Username, Password: opts.Password, CompanyID: opts.CompanyID, BranchID: opts.BranchID}}
	}
	users := slices.Clone(opts.Users)
	for i := range users {
		if users[i].CompanyID == 0 {
			users[i].CompanyID = opts.CompanyID
		}
		if users[i].BranchID == 0 {
			users[i].BranchID = opts.BranchID
		}
	}
	return users
}

// installationBranches is the distinct branches of the users of the
// installation's company, sorted, or its one BranchID when there are none.
func installationBranches(opts Options) []int {
	var bs []int
	for _, u := range opts.Users {
		if u.CompanyID == opts.CompanyID {
			bs = append(bs, u.BranchID)
		}
	}
	if len(bs) == 0 {
		return []int{opts.BranchID}
	}
	slices.Sort(bs)
	return slices.Compact(bs)
}

// branchOf is the branch of the i-th (from 0) generated record.
func branchOf(branches []int, i int) int { return branches[i%len(branches)] }

// ---- who asks, and what they see ------------------------------------------------

// viewer is whom a data request's credentials belong to: a user (index into
// opts.Users) or the plugin credentials (user -1), with the context.
type viewer struct{ user, company, branch int }

type viewerKey struct{}

// withViewer hands the viewer to the route handlers.
func withViewer(r *http.Request, v viewer) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), viewerKey{}, v))
}

// pluginViewer is the context of the plugin credentials: Options'.
func (s *Sim) pluginViewer() viewer {
	return viewer{user: -1, company: s.opts.CompanyID, branch: s.opts.BranchID}
}

// listView is the part of the installation a list shows: the records of a
// company, of one branch of it, or (branch 0) of all its branches.
type listView struct{ company, branch int }

// holds reports whether the view shows a record of that company and branch.
func (v listView) holds(company, branch int) bool {
	return company == v.company && (v.branch == 0 || branch == v.branch)
}

// lens is how a request sees the records: which of them, and labelled how.
type lens struct {
	view   listView
	labels RecordLabels
}

// lensOf is the lens of a request that ServeHTTP authorized.
func (s *Sim) lensOf(r *http.Request) lens {
	v, ok := r.Context().Value(viewerKey{}).(viewer)
	if !ok {
		v = s.pluginViewer()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return lens{view: s.viewOf(v), labels: s.labels}
}

// viewOf is the view of a viewer under the scope in force. Caller holds s.mu.
func (s *Sim) viewOf(v viewer) listView {
	if s.scope == ScopeBranch {
		return listView{company: v.company, branch: v.branch}
	}
	return listView{company: v.company}
}

// viewsInUse is every view some user or the plugin credentials see under
// the scope in force, for pre-encoding. Caller holds s.mu.
func (s *Sim) viewsInUse() []listView {
	views := []listView{s.viewOf(s.pluginViewer())}
	for i, u := range s.opts.Users {
		if v := s.viewOf(viewer{user: i, company: u.CompanyID, branch: u.BranchID}); !slices.Contains(views, v) {
			views = append(views, v)
		}
	}
	return views
}

// ---- fixture records ------------------------------------------------------------

// owned is a fixture record of a branch of the installation's company.
type owned interface{ branchOf() int }

func (c cashbox) branchOf() int        { return c.BranchID }
func (r reconciliation) branchOf() int { return r.branch }
func (j journalEntry) branchOf() int   { return j.branch }
func (v voucher) branchOf() int        { return v.branch }

// visible returns the records of items the view holds; items itself when
// it holds them all.
func visible[T owned](s *Sim, items []T, v listView) []T {
	if v.company != s.opts.CompanyID {
		return []T{}
	}
	if v.branch == 0 {
		return items
	}
	out := []T{}
	for _, it := range items {
		if it.branchOf() == v.branch {
			out = append(out, it)
		}
	}
	return out
}

// serveOwned serves a list of records of the installation's company: those
// the request's view holds, labelled as RecordLabels says. hasBranchID
// names a record kind that carries branch_id anyway (cashboxes).
func serveOwned[T owned](s *Sim, pick func(*fixtures) []T, lay layout, hasBranchID bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ln := s.lensOf(r)
		serveVisible(s, w, r, visible(s, pick(s.fixtures()), ln.view), ln.labels, lay, hasBranchID)
	}
}

// serveVisible serves the records a request's view holds, labelled as
// labels says.
func serveVisible[T owned](s *Sim, w http.ResponseWriter, r *http.Request, items []T, labels RecordLabels, lay layout, hasBranchID bool) {
	recs, err := encodeEach(items)
	if err != nil {
		serverError(w, err)
		return
	}
	if labels != LabelsNone {
		for i := range recs {
			recs[i] = labelRecord(recs[i], labels, s.opts.CompanyID, items[i].branchOf(), hasBranchID)
		}
	}
	s.serveRecords(w, r, recs, lay)
}

// sees reports whether the request may read a record of that branch of the
// installation's company (its journal preview or access list).
func (s *Sim) sees(r *http.Request, branch int) bool {
	return s.lensOf(r).view.holds(s.opts.CompanyID, branch)
}

// ---- labels ------------------------------------------------------------------------

// labelRecord returns the JSON object rec with the label fields appended;
// rec is not changed (it may share its array with other records).
func labelRecord(rec []byte, mode RecordLabels, company, branch int, hasBranchID bool) []byte {
	n := len(rec)
	if n < 2 || rec[n-1] != '}' {
		return rec
	}
	out := make([]byte, 0, n+80)
	out = append(out, rec[:n-1]...)
	at := len(out)
	out = appendLabels(out, mode, company, branch, hasBranchID)
	if n == 2 && len(out) > at {
		out = append(out[:at], out[at+1:]...) // an empty object takes no comma
	}
	return append(out, '}')
}

// appendLabels appends the label fields of mode, each after a comma. A
// negative branch is written as null. It does not allocate beyond b's
// growth: the invoice encoder calls it for every record.
func appendLabels(b []byte, mode RecordLabels, company, branch int, hasBranchID bool) []byte {
	switch mode {
	case LabelsIDs:
		b = append(b, `,"company_id":`...)
		b = strconv.AppendInt(b, int64(company), 10)
		if !hasBranchID {
			b = append(b, `,"branch_id":`...)
			b = appendLabelID(b, branch)
		}
	case LabelsObjects:
		b = append(b, `,"company":`...)
		b = appendLabelObject(b, "Company ", company)
		b = append(b, `,"branch":`...)
		b = appendLabelObject(b, "Branch ", branch)
	}
	return b
}

func appendLabelID(b []byte, id int) []byte {
	if id < 0 {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, int64(id), 10)
}

// appendLabelObject writes {"id":<id>,"name":"<kind><id>"}, or null for a
// negative id.
func appendLabelObject(b []byte, kind string, id int) []byte {
	if id < 0 {
		return append(b, "null"...)
	}
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, int64(id), 10)
	b = append(b, `,"name":"`...)
	b = append(b, kind...)
	b = strconv.AppendInt(b, int64(id), 10)
	return append(b, `"}`...)
}
