package sync

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
)

// The streams of SPEC section 1 that are not one (source, id) list. None
// is enabled unless named in ERPSYNC_STREAMS or the config file.
func init() {
	for name, path := range map[string]string{
		"messaging_conversations": "/messaging/api/conversations/",
		"messaging_messages":      "/messaging/api/messages/",
		"messaging_templates":     "/messaging/api/templates/",
		"messaging_queue":         "/messaging/api/queue/",
	} {
		// Their fields are not shown by the reference: no expectations,
		// no typed columns, everything in payload.
		Register(&Stream{Name: name, Path: path, Paging: OneList})
	}
	Register(&Stream{Name: "messaging_stats", Path: "/messaging/api/stats/", Custom: messagingStats})
	Register(&Stream{Name: "balance_sheet", Path: "/accounts/api/balance-sheet-tree/", Custom: balanceSheet})
	Register(&Stream{Name: "cashbox_access", Path: "/accounts/api/cashboxes/", Custom: cashboxAccess})
	Register(&Stream{Name: "journal_lines", Custom: journalLines})
}

// inTx writes in one transaction, with the rejected records, and adds the
// counts to the run once committed.
func (x *streamRun) inTx(ctx context.Context, rejected []db.Rejected, write func(tx pgx.Tx) (db.RunStats, error)) error {
	tx, err := x.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", db.Describe(err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	st, err := write(tx)
	if err != nil {
		return err
	}
	if err := db.InsertRejected(ctx, tx, x.t.Source, x.s.Name, x.runID, rejected); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", db.Describe(err))
	}
	st.Rejected += int64(len(rejected))
	x.stats.Add(st)
	x.obs().PageCommitted(x.t.Source, x.s.Name, st)
	if x.progress != nil {
		x.progress(x.stats)
	}
	return nil
}

// object returns the object an answer carries, {ok, data: {...}} or the
// answer itself, split and as raw bytes.
func object(route string, body []byte) (erp.Record, json.RawMessage, error) {
	rec, err := erp.ParseRecord(body)
	if err != nil {
		return erp.Record{}, nil, fmt.Errorf("GET %s: %w", route, err)
	}
	if ok, _ := rec.Get("ok"); string(ok) == "false" {
		return erp.Record{}, nil, fmt.Errorf("GET %s: the ERP answered ok=false: %s", route, erp.Truncate(string(body), 200))
	}
	if data, ok := rec.Get("data"); ok && erp.Kind(data) == "object" {
		rec, err := erp.ParseRecord(data)
		return rec, data, err
	}
	return rec, body, nil
}

// text returns a string or number field, or nil.
func text(rec erp.Record, field string) (*string, error) {
	v, ok, err := rec.Text(field)
	if err != nil || !ok {
		return nil, err
	}
	return &v, nil
}

// money returns a decimal field as an exact numeric, or nil.
func money(rec erp.Record, field string) (any, error) {
	d, ok, err := rec.Money(field)
	if err != nil || !ok {
		return nil, err
	}
	return db.Numeric(d), nil
}

func messagingStats(ctx context.Context, x *streamRun) error {
	body, err := x.t.Client.Get(ctx, x.s.Path, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", x.s.Name, err)
	}
	_, payload, err := object(x.s.Path, body)
	if err != nil {
		return fmt.Errorf("%s: %w", x.s.Name, err)
	}
	return x.inTx(ctx, nil, func(tx pgx.Tx) (db.RunStats, error) {
		wrote, err := db.AppendMessagingStats(ctx, tx, x.scope, payload, sha256.Sum256(payload))
		st := db.RunStats{Pages: 1, Seen: 1, Unchanged: 1}
		if wrote {
			st.Inserted, st.Unchanged = 1, 0
		}
		return st, err
	})
}

// maxTreeDepth bounds the recursion into a balance-sheet tree.
const maxTreeDepth = 64

func balanceSheet(ctx context.Context, x *streamRun) error {
	asOf := time.Now().UTC().Format(time.DateOnly)
	body, err := x.t.Client.Get(ctx, x.s.Path, url.Values{"date_to": {asOf}})
	if err != nil {
		return fmt.Errorf("%s: %w", x.s.Name, err)
	}
	page, err := erp.DecodePage(erp.RouteLabel(x.s.Path), body)
	if err != nil {
		return fmt.Errorf("%s: %w", x.s.Name, err)
	}
	var nodes []db.TreeNode
	var rejected []db.Rejected
	var walk func(records []json.RawMessage, parent string, depth int) error
	walk = func(records []json.RawMessage, parent string, depth int) error {
		if depth > maxTreeDepth {
			return fmt.Errorf("%s: tree deeper than %d levels", x.s.Name, maxTreeDepth)
		}
		for i, raw := range records {
			n, children, err := treeNode(raw, parent, depth, i)
			if err != nil {
				rejected = append(rejected, db.Rejected{RecordID: n.Node, Reason: err.Error(), Record: raw})
				continue
			}
			nodes = append(nodes, n)
			if children != nil {
				sub, err := erp.DecodePage(erp.RouteLabel(x.s.Path), children)
				if err != nil {
					return fmt.Errorf("%s: children of %s: %w", x.s.Name, n.Node, err)
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
	return x.inTx(ctx, rejected, func(tx pgx.Tx) (db.RunStats, error) {
		wrote, err := db.ReplaceBalanceSheet(ctx, tx, x.scope, asOf, nodes)
		st := db.RunStats{Pages: 1, Seen: int64(len(nodes) + len(rejected)), Unchanged: int64(len(nodes))}
		if wrote {
			st.Inserted, st.Unchanged = int64(len(nodes)), 0
		}
		return st, err
	})
}

// treeNode reads one node; its key is its id, else its code, else its
// position under its parent.
func treeNode(raw json.RawMessage, parent string, depth, index int) (db.TreeNode, json.RawMessage, error) {
	n := db.TreeNode{Parent: parent, Depth: depth, Payload: raw, Hash: sha256.Sum256(raw)}
	rec, err := erp.ParseRecord(raw)
	if err != nil {
		return n, nil, err
	}
	if n.Code, err = text(rec, "code"); err != nil {
		return n, nil, err
	}
	if n.Name, err = text(rec, "name"); err != nil {
		return n, nil, err
	}
	id, err := text(rec, "id")
	switch {
	case err != nil:
		return n, nil, err
	case id != nil:
		n.Node = *id
	case n.Code != nil:
		n.Node = *n.Code
	default:
		n.Node = parent + "/" + strconv.Itoa(index)
	}
	if n.Balance, err = money(rec, "balance"); err != nil {
		return n, nil, err
	}
	children, _ := rec.Get("children")
	if erp.Kind(children) != "array" {
		children = nil
	}
	return n, children, nil
}

func cashboxAccess(ctx context.Context, x *streamRun) error {
	boxes, err := x.t.Client.ListAll(ctx, x.s.Path, nil, erp.Paging{})
	if err != nil {
		return fmt.Errorf("%s: %w", x.s.Name, err)
	}
	var rows []db.AccessRow
	var rejected []db.Rejected
	for _, raw := range boxes {
		box, err := erp.ParseRecord(raw)
		if err != nil {
			continue // the cashboxes stream reports bad cashboxes
		}
		id, ok, err := box.Text("id")
		if err != nil || !ok {
			continue
		}
		path := x.s.Path + url.PathEscape(id) + "/access/"
		grants, err := x.t.Client.ListAll(ctx, path, nil, erp.Paging{})
		if err != nil {
			return fmt.Errorf("%s: cashbox %s: %w", x.s.Name, id, err)
		}
		for _, g := range grants {
			rec, err := erp.ParseRecord(g)
			var user *string
			for _, field := range []string{"user_id", "user", "id", "username"} {
				if err == nil && user == nil {
					user, err = text(rec, field)
				}
			}
			if err == nil && user == nil {
				err = errors.New("grant names no user (user_id, user, id or username)")
			}
			if err != nil {
				rejected = append(rejected, db.Rejected{RecordID: id, Reason: fmt.Sprintf("cashbox %s: %v", id, err), Record: g})
				continue
			}
			rows = append(rows, db.AccessRow{CashboxID: id, User: *user, Payload: g, Hash: sha256.Sum256(g)})
		}
	}
	return x.inTx(ctx, rejected, func(tx pgx.Tx) (db.RunStats, error) {
		up, deleted, err := db.UpsertCashboxAccess(ctx, tx, x.scope, rows)
		return db.RunStats{Pages: int64(len(boxes)), Seen: int64(len(rows) + len(rejected)), Inserted: up.Inserted,
			Updated: up.Updated, Unchanged: up.Unchanged, Deleted: deleted}, err
	})
}

// documentKinds are the documents that have journal lines.
var documentKinds = []struct{ kind, table, path string }{
	{"journal_entry", "erp.journal_entries", "/accounts/api/journal-entries/"},
	{"payment_voucher", "erp.payment_vouchers", "/accounts/api/payment-vouchers/"},
	{"receipt_voucher", "erp.receipt_vouchers", "/accounts/api/receipt-vouchers/"},
}

// journalLines reads the journal preview of every document that is new or
// changed since its lines were read (the document streams must have
// synced them), one transaction per document: a crash loses one.
func journalLines(ctx context.Context, x *streamRun) error {
	for _, k := range documentKinds {
		docs, err := db.DocumentsNeedingLines(ctx, x.conn, k.table, k.kind, x.t.Source)
		if err != nil {
			return err
		}
		for _, doc := range docs {
			path := k.path + url.PathEscape(doc.ID) + "/journal-preview/"
			body, err := x.t.Client.Get(ctx, path, nil)
			var he *erp.HTTPError
			if errors.As(err, &he) && he.Status == http.StatusNotFound {
				x.log.Warn("document has no journal preview (gone at the ERP?)", "kind", k.kind, "id", doc.ID)
				continue
			}
			if err != nil {
				return fmt.Errorf("%s: %s %s: %w", x.s.Name, k.kind, doc.ID, err)
			}
			lines, rejected, err := previewLines(path, body)
			if err != nil {
				return fmt.Errorf("%s: %s %s: %w", x.s.Name, k.kind, doc.ID, err)
			}
			err = x.inTx(ctx, rejected, func(tx pgx.Tx) (db.RunStats, error) {
				return db.RunStats{Pages: 1, Seen: int64(len(lines) + len(rejected)), Inserted: int64(len(lines))},
					db.ReplaceJournalLines(ctx, tx, x.scope, k.kind, doc, lines)
			})
			if err != nil {
				return fmt.Errorf("%s: %s %s: %w", x.s.Name, k.kind, doc.ID, err)
			}
		}
	}
	return nil
}

// previewLines reads {ok, data: {lines: [...]}}, {lines: [...]} or a bare
// array of lines.
func previewLines(path string, body []byte) ([]db.JournalLine, []db.Rejected, error) {
	route := erp.RouteLabel(path)
	var raws []json.RawMessage
	if erp.Kind(body) == "array" {
		page, err := erp.DecodePage(route, body)
		if err != nil {
			return nil, nil, err
		}
		raws = page.Records
	} else {
		rec, _, err := object(route, body)
		if err != nil {
			return nil, nil, err
		}
		list, ok := rec.Get("lines")
		if !ok || erp.Kind(list) != "array" {
			return nil, nil, fmt.Errorf("GET %s: no lines array in the answer", route)
		}
		page, err := erp.DecodePage(route, list)
		if err != nil {
			return nil, nil, err
		}
		raws = page.Records
	}
	var lines []db.JournalLine
	var rejected []db.Rejected
	seen := map[string]bool{}
	for i, raw := range raws {
		l, err := previewLine(raw, i)
		if err == nil && seen[l.Line] {
			err = fmt.Errorf("line %s listed twice", l.Line)
		}
		if err != nil {
			rejected = append(rejected, db.Rejected{RecordID: l.Line, Reason: err.Error(), Record: raw})
			continue
		}
		seen[l.Line] = true
		lines = append(lines, l)
	}
	return lines, rejected, nil
}

func previewLine(raw json.RawMessage, index int) (db.JournalLine, error) {
	l := db.JournalLine{Line: strconv.Itoa(index + 1), Payload: raw}
	rec, err := erp.ParseRecord(raw)
	if err != nil {
		return l, err
	}
	if n, err := text(rec, "line"); err != nil {
		return l, err
	} else if n != nil {
		l.Line = *n
	}
	if l.AccountCode, err = text(rec, "account_code"); err != nil {
		return l, err
	}
	if l.Debit, err = money(rec, "debit"); err != nil {
		return l, err
	}
	if l.Credit, err = money(rec, "credit"); err != nil {
		return l, err
	}
	return l, nil
}
