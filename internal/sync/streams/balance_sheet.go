package streams

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// balanceSheet stores one snapshot of the balance-sheet tree per day
// (date_to = today, UTC), rewritten only when the day's tree changed.
type balanceSheet struct{ path string }

// BalanceSheet is the balance-sheet stream.
func BalanceSheet() sync.Stream { return balanceSheet{path: "/accounts/api/balance-sheet-tree/"} }

func (balanceSheet) Name() string { return "balance_sheet" }

func (s balanceSheet) Info() sync.Info {
	return sync.Info{Route: "GET " + s.path + "?date_to=D", Permission: "accounts.report.balance_sheet", Schedule: sync.DefaultSchedule,
		Table: "erp.balance_sheet_snapshots", Money: []string{"balance"}, Typed: []string{"code", "name"}}
}

// maxTreeDepth bounds the recursion into a balance-sheet tree.
const maxTreeDepth = 64

func (s balanceSheet) Sync(ctx context.Context, r *sync.Run) error {
	asOf := time.Now().UTC().Format(time.DateOnly)
	route := erp.RouteLabel(s.path)
	body, err := r.Client().Get(ctx, s.path, url.Values{"date_to": {asOf}})
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name(), err)
	}
	page, err := erp.DecodePage(route, body)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name(), err)
	}
	var nodes []db.TreeNode
	at := map[string]int{} // a node listed twice keeps its last copy
	rejected := 0
	var walk func(records []json.RawMessage, parent string, depth int) error
	walk = func(records []json.RawMessage, parent string, depth int) error {
		if depth > maxTreeDepth {
			return fmt.Errorf("%s: tree deeper than %d levels", s.Name(), maxTreeDepth)
		}
		for i, raw := range records {
			n, children, err := treeNode(raw, parent, depth, i)
			switch _, dup := at[n.Node]; {
			case err != nil:
				r.Reject(db.Rejected{RecordID: n.Node, Reason: err.Error(), Record: raw})
				rejected++
			case dup:
				i := at[n.Node]
				r.Reject(db.Rejected{RecordID: n.Node, Reason: "node listed twice in the tree; the later copy kept", Record: nodes[i].Payload})
				rejected++
				nodes[i] = n
			default:
				at[n.Node] = len(nodes)
				nodes = append(nodes, n)
			}
			if children != nil {
				sub, err := erp.DecodePage(route, children)
				if err != nil {
					return fmt.Errorf("%s: children of %s: %w", s.Name(), n.Node, err)
				}
				if err := walk(sub.Records, n.Node, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(page.Records, "", 0); err != nil {
		return err
	}
	return r.Commit(ctx, func(ctx context.Context, tx pgx.Tx) (model.RunStats, error) {
		wrote, err := db.ReplaceBalanceSheet(ctx, tx, r.Scope(), asOf, nodes)
		st := model.RunStats{Pages: 1, Seen: int64(len(nodes) + rejected), Unchanged: int64(len(nodes))}
		if wrote {
			st.Inserted, st.Unchanged = int64(len(nodes)), 0
		}
		return st, err
	})
}

// treeNode reads one node; its key is its id, else its code, else its
// position under its parent. Its children come back even when the node
// itself cannot be used, so one bad node does not lose its subtree.
func treeNode(raw json.RawMessage, parent string, depth, index int) (db.TreeNode, json.RawMessage, error) {
	n := db.TreeNode{Parent: parent, Depth: depth, Payload: raw, Hash: sha256.Sum256(raw)}
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
	if n.Name, err = sync.TextField(rec, "name"); err != nil {
		return n, children, err
	}
	if n.Balance, err = sync.MoneyField(rec, "balance"); err != nil {
		return n, children, err
	}
	return n, children, nil
}

// Probe reads today's tree.
func (s balanceSheet) Probe(ctx context.Context, p *sync.Probe) sync.ProbeReport {
	rep := p.Report(s, "")
	body, err := p.Client().Get(ctx, s.path, url.Values{"date_to": {time.Now().UTC().Format(time.DateOnly)}})
	if err == nil {
		var page *erp.Page
		if page, err = erp.DecodePage(erp.RouteLabel(s.path), body); err == nil {
			rep.Status = http.StatusOK
			rep.Page(page, 0)
			rep.Examine(page, p.Scope, nil, []string{"balance"}, nil)
			return rep
		}
	}
	rep.Failed(err)
	return rep
}
