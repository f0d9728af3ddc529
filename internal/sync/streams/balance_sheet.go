package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// balanceSheet keeps the balance-sheet tree of each login's context as of
// today and as of the last day of each closed month, going back `months`.
// Each run reads today's tree, the month ends not kept yet, and the most
// recent `reread_months` month ends again, so that closing entries posted
// late into a past month land; a tree that changed is rewritten, its
// previous nodes kept in erp.balance_sheet_snapshot_history.
//
// The reference does not say what date_to, branch_id and scope_mode do.
// erpsync asks with date_to alone: the login's token carries its company
// and branch, and a branch_id or scope_mode that the installation reads
// otherwise would mix other branches into the login's tree.
type balanceSheet struct {
	*sync.Fanout[string]
	path string
}

// BalanceSheet is the balance-sheet stream: one tree per date.
func BalanceSheet() sync.Stream {
	s := &balanceSheet{path: "/accounts/api/balance-sheet-tree/"}
	s.Fanout = &sync.Fanout[string]{
		Info: sync.Info{Name: "balance_sheet", Route: "GET " + s.path + "?date_to=D", Permission: "accounts.report.balance_sheet",
			Table: &sync.Table{Name: "balance_sheet_snapshots", Own: true, Columns: []sync.Column{{Name: "balance", Type: sync.Money}}}, History: sync.HistoryOn,
			Settings: []sync.Setting{sync.IntSetting("months", 24, 0, 600), sync.IntSetting("reread_months", 3, 0, 600)}},
		Parents: dates,
		Child:   s.tree,
		Before:  keepRead,
	}
	return s
}

// maxTreeDepth bounds the recursion into a balance-sheet tree.
const maxTreeDepth = 64

// nodeFields are the fields a node is expected to carry.
var nodeFields = sync.NewExpectation(map[string]string{
	"id": "number|string", "code": "string", "name": "string", "balance": "number|string", "children": "array",
})

// MonthEnds lists, newest first, the last day of each of the months
// closed as of today, going back months.
func MonthEnds(today time.Time, months int) []string {
	out := make([]string, months)
	first := time.Date(today.Year(), today.Month(), 1, 0, 0, 0, 0, time.UTC)
	for i := range out {
		out[i] = first.AddDate(0, -i, -1).Format(time.DateOnly)
	}
	return out
}

// tree is one date's balance sheet as read.
type tree struct {
	asOf  string
	nodes []db.TreeNode
	seen  int // nodes listed, rejected ones included
}

// dates are the dates to read, in one batch: today's first, then the
// month ends to read, newest first (those not kept yet, and the most
// recent reread_months again; every one after a reset).
func dates(ctx context.Context, r *sync.Run) iter.Seq2[[]string, error] {
	return func(yield func([]string, error) bool) {
		now := time.Now().UTC()
		months, err := r.Int("months")
		if err != nil {
			yield(nil, err)
			return
		}
		reread, err := r.Int("reread_months")
		if err != nil {
			yield(nil, err)
			return
		}
		if after, err := r.AfterReset(ctx); err != nil {
			yield(nil, err)
			return
		} else if after {
			reread = months // the stream was reset: every month end again
		}
		var kept map[string]bool
		if err := r.Read(ctx, func(ctx context.Context, q db.Reader) (err error) {
			kept, err = db.BalanceSheetDates(ctx, q, r.Scope())
			return err
		}); err != nil {
			yield(nil, err)
			return
		}
		out := []string{now.Format(time.DateOnly)}
		for i, d := range MonthEnds(now, months) {
			if i < reread || !kept[d] {
				out = append(out, d)
			}
		}
		yield(out, nil)
	}
}

// tree reads the tree as of a date, as the step that replaces it if it
// changed. Today's, the first read, also claims the snapshots written
// before logins.
func (s *balanceSheet) tree(ctx context.Context, r *sync.Run, asOf string) (sync.Child, error) {
	t, err := s.read(ctx, r, asOf)
	if err != nil {
		return sync.Child{}, err
	}
	today := asOf == time.Now().UTC().Format(time.DateOnly)
	return sync.Child{Value: t, Step: &sync.Step{Read: model.RunStats{Pages: 1, Seen: int64(t.seen)}, Write: func(ctx context.Context, tx db.Tx) (model.RunStats, error) {
		if today {
			if err := db.ClaimLegacySnapshots(ctx, tx, r.Scope()); err != nil {
				return model.RunStats{}, err
			}
		}
		wrote, err := db.ReplaceBalanceSheet(ctx, tx, r.Scope(), t.asOf, t.nodes)
		if wrote {
			return model.RunStats{Inserted: int64(len(t.nodes))}, err
		}
		return model.RunStats{Unchanged: int64(len(t.nodes))}, err
	}}}, nil
}

// keepRead keeps every tree read, unless every date gave the very same
// tree: the installation does not read date_to, and storing it under
// each month end would be wrong; only today's is kept, and the operator
// told.
func keepRead(r *sync.Run, read []sync.Child) []sync.Child {
	trees := make([]tree, len(read))
	for i, c := range read {
		trees[i] = c.Value.(tree)
	}
	if !ignored(trees) {
		return read
	}
	r.Warn("the ERP answers the same balance-sheet tree whatever date_to says (%d dates read): only today's is kept", len(trees))
	return read[:1]
}

// ignored reports trees of at least three dates that are all the same:
// an installation that does not read date_to.
func ignored(trees []tree) bool {
	if len(trees) < 3 {
		return false
	}
	first := db.TreeDigest(trees[0].nodes)
	for _, t := range trees[1:] {
		if db.TreeDigest(t.nodes) != first {
			return false
		}
	}
	return true
}

// read reads the tree as of a date. Nodes that cannot be used are
// rejected; a node listed twice keeps its later copy.
func (s balanceSheet) read(ctx context.Context, r *sync.Run, asOf string) (tree, error) {
	route := erp.RouteLabel(s.path)
	body, err := r.Get(ctx, s.path, url.Values{"date_to": {asOf}})
	if err != nil {
		return tree{}, fmt.Errorf("%s as of %s: %w", s.Name, asOf, err)
	}
	page, err := erp.DecodePage(route, body)
	if err != nil {
		return tree{}, fmt.Errorf("%s as of %s: %w", s.Name, asOf, err)
	}
	t := tree{asOf: asOf}
	var drift sync.Drift
	var walk func(records []json.RawMessage, parent string, depth int) error
	walk = func(records []json.RawMessage, parent string, depth int) error {
		if depth > maxTreeDepth {
			return fmt.Errorf("%s as of %s: tree deeper than %d levels", s.Name, asOf, maxTreeDepth)
		}
		for i, raw := range records {
			t.seen++
			n, children, err := treeNode(raw, parent, depth, i, &drift)
			if err != nil {
				r.Reject(db.Rejected{RecordID: n.Node, Reason: err.Error(), Record: raw})
			} else {
				t.nodes = append(t.nodes, n)
			}
			if children != nil {
				sub, err := erp.DecodePage(route, children)
				if err != nil {
					return fmt.Errorf("%s as of %s: children of %s: %w", s.Name, asOf, n.Node, err)
				}
				if err := walk(sub.Records, n.Node, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(page.Records, "", 0); err != nil {
		return tree{}, err
	}
	r.Drift(drift.Entries()...)
	t.nodes = sync.KeepLast(t.nodes, func(n db.TreeNode) string { return n.Node }, func(earlier db.TreeNode) {
		r.Reject(db.Rejected{RecordID: earlier.Node, Reason: "node listed twice in the tree; the later copy kept", Record: earlier.Payload})
	})
	return t, nil
}

// treeNode reads one node; its key is its id, else its code, else its
// position under its parent. Its children come back even when the node
// itself cannot be used, so one bad node does not lose its subtree.
func treeNode(raw json.RawMessage, parent string, depth, index int, drift *sync.Drift) (db.TreeNode, json.RawMessage, error) {
	n := db.TreeNode{Parent: parent, Depth: depth, Payload: raw, Hash: db.PayloadHash(raw)}
	rec, err := erp.ParseRecord(raw)
	if err != nil {
		return n, nil, err
	}
	children, _ := rec.Get("children")
	if erp.Kind(children) != "array" {
		children = nil
	}
	if n.Code, err = sync.TextField(rec, "code"); err != nil {
		return n, children, err
	}
	id, err := sync.TextField(rec, "id")
	switch {
	case err != nil:
		return n, children, err
	case id != nil:
		n.Node = *id
	case n.Code != nil:
		n.Node = *n.Code
	default:
		n.Node = parent + "/" + strconv.Itoa(index)
	}
	if err := db.CheckKey("node", n.Node); err != nil {
		return n, children, err
	}
	if err := sync.CheckRecord(rec); err != nil {
		return n, children, err
	}
	nodeFields.Check(rec, n.Node, drift)
	if n.Name, err = sync.TextField(rec, "name"); err != nil {
		return n, children, err
	}
	if n.Balance, err = sync.MoneyField(rec, "balance"); err != nil {
		return n, children, err
	}
	return n, children, nil
}

// Probe reads today's tree and the last month end's, and warns when they
// are the same bytes (an installation that may not read date_to).
func (s balanceSheet) Probe(ctx context.Context, p *sync.Probe) sync.ProbeReport {
	rep := p.Report(s, "")
	now := time.Now().UTC()
	body, err := p.Get(ctx, s.path, url.Values{"date_to": {now.Format(time.DateOnly)}})
	if err == nil {
		var page *erp.Page
		if page, err = erp.DecodePage(erp.RouteLabel(s.path), body); err == nil {
			rep.Status = http.StatusOK
			rep.Page(page, 0)
			rep.Examine(page, nil, s.Declared().MoneyColumns(), nodeFields.Fields())
			monthEnd := MonthEnds(now, 1)[0]
			if past, err := p.Get(ctx, s.path, url.Values{"date_to": {monthEnd}}); err == nil && string(past) == string(body) {
				rep.Warnings = append(rep.Warnings, "the tree as of "+monthEnd+" is the same as today's: the ERP may not read date_to (sync warns if three dates agree)")
			}
			return rep
		}
	}
	rep.Failed(err)
	return rep
}
