package streams

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// cashboxAccess mirrors who may use each cashbox: one request per cashbox
// the ERP lists, one transaction per cashbox, then, through the deletion
// decision, the grants no longer listed (their cashbox's list, or the
// whole list of cashboxes, no longer holds them) are marked deleted, so
// that access lists answered empty by an ERP that withdrew a permission do
// not wipe every grant.
type cashboxAccess struct {
	*sync.Fanout[cashbox]
	path string
}

// CashboxAccess is the cashbox access stream.
func CashboxAccess() sync.Stream {
	s := &cashboxAccess{path: "/accounts/api/cashboxes/"}
	s.Fanout = &sync.Fanout[cashbox]{
		Info: sync.Info{Name: "cashbox_access", Route: "GET " + s.path + ", then GET " + s.path + "{cashbox_id}/access/ per cashbox",
			Table: &sync.Table{Name: "cashbox_access", Own: true}},
		// A cashbox without a usable id is skipped: the cashboxes stream
		// reports it.
		Parents: sync.ListedParents(erp.ListRequest{Path: s.path}, func(it sync.Item) (cashbox, bool) {
			id, ok, err := it.Record.Text("id")
			return cashbox{id: id, labels: sync.RecordLabels(it.Record)}, err == nil && ok && id != ""
		}),
		Child:    s.grants,
		Children: db.CashboxAccess,
	}
	return s
}

// cashbox is a cashbox listed: its id and the labels it carries, which
// its grants take.
type cashbox struct {
	id     string
	labels db.Labels
}

// grants reads the access list of one cashbox: the step that writes it,
// and the users it lists. A cashbox whose access route answers 404
// (deleted since it was listed) keeps what the warehouse has until the
// list drops it (kept).
func (s *cashboxAccess) grants(ctx context.Context, r *sync.Run, c cashbox) (sync.Child, error) {
	box := c.id
	listed, err := r.ReadList(ctx, erp.ListRequest{Path: erp.DetailPath(s.path, box, "/access/")})
	var he *erp.HTTPError
	if errors.As(err, &he) && he.Status == http.StatusNotFound {
		r.Log().Warn("cashbox access route answered 404; keeping its grants", "cashbox", box)
		r.Note("cashbox %s: access route answered 404 (cashbox gone?); its grants were kept", box)
		return sync.Child{Parent: box, Kept: true}, nil
	}
	if err != nil {
		return sync.Child{}, fmt.Errorf("%s: cashbox %s: %w", s.Name, box, err)
	}
	var rows []db.AccessRow
	var drift sync.Drift
	seen := 0
	for it := range listed.Items() {
		seen++
		user, err := grantUser(it, box, &drift)
		if err != nil {
			r.Reject(db.Rejected{RecordID: box, Reason: fmt.Sprintf("cashbox %s: %v", box, err), Record: it.Raw})
			continue
		}
		rows = append(rows, db.AccessRow{User: user, Payload: it.Raw, Hash: db.PayloadHash(it.Raw)})
	}
	rows = sync.KeepLast(rows, func(g db.AccessRow) string { return g.User }, func(earlier db.AccessRow) {
		r.Reject(db.Rejected{RecordID: box, Reason: fmt.Sprintf("cashbox %s: user %s listed twice; the later grant kept", box, earlier.User), Record: earlier.Payload})
	})
	r.Drift(drift.Entries()...)
	users := make([]string, len(rows))
	for i, g := range rows {
		users[i] = g.User
	}
	return sync.Child{Parent: box, Keys: users, Step: &sync.Step{Hold: listed, Read: model.RunStats{Pages: 1, Seen: int64(seen)},
		Write: func(ctx context.Context, tx db.Tx) (model.RunStats, error) {
			up, err := db.UpsertCashboxAccess(ctx, tx, r.Scope(), box, c.labels, rows)
			return model.RunStats{Inserted: up.Inserted, Updated: up.Updated, Unchanged: up.Unchanged}, err
		}}}, nil
}

// grantFields are the fields a grant has been seen to carry. The
// reference shows none: an installation whose grants differ records
// drift, as a list does, while the grant is kept whole in payload.
var grantFields = sync.NewExpectation(map[string]string{
	"user_id": "number|string", "username": "string", "can_view": "boolean", "can_post": "boolean",
})

// grantUser names the user of a grant of cashbox box: the first of
// user_id, user, id or username that is there. How the grant differs
// from grantFields goes to drift.
func grantUser(it sync.Item, box string, drift *sync.Drift) (string, error) {
	rec := it.Record
	if !rec.IsObject() {
		_, err := erp.ParseRecord(it.Raw)
		return "", err
	}
	if err := sync.CheckRecord(rec); err != nil {
		return "", err
	}
	grantFields.Check(rec, box, drift)
	for _, field := range []string{"user_id", "user", "id", "username"} {
		if _, ok, err := rec.Text(field); err != nil || ok {
			return sync.KeyField(rec, field)
		}
	}
	return "", errors.New("grant names no user (user_id, user, id or username)")
}

// Probe reads the access list of the first cashbox listed.
func (s cashboxAccess) Probe(ctx context.Context, p *sync.Probe) sync.ProbeReport {
	rep := p.Report(s, "GET "+s.path+"{cashbox_id}/access/")
	page, err := p.FirstPage(ctx, erp.ListRequest{Path: s.path})
	if err != nil {
		rep.Route = "GET " + s.path // the cashbox list refused, not an access list
		rep.Failed(err)
		return rep
	}
	box := ""
	for _, rec := range page.Parsed {
		if id, ok, err := rec.Text("id"); err == nil && ok && id != "" {
			box = id
			break
		}
	}
	page.Release()
	if box == "" {
		rep.Status, rep.Problem = http.StatusOK, "no cashbox with an id is listed: no access list to read"
		return rep
	}
	access, err := p.FirstPage(ctx, erp.ListRequest{Path: erp.DetailPath(s.path, box, "/access/")})
	if err != nil {
		rep.Failed(err)
		return rep
	}
	defer access.Release()
	rep.Status = http.StatusOK
	rep.Page(access, 0)
	rep.Examine(access, []string{"user_id", "user", "id", "username"}, nil, grantFields.Fields())
	return rep
}
