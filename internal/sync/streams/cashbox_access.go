package streams

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// cashboxAccess mirrors who may use each cashbox: one request per cashbox
// the ERP lists, one transaction per cashbox.
type cashboxAccess struct{ path string }

// CashboxAccess is the cashbox access stream.
func CashboxAccess() sync.Stream { return cashboxAccess{path: "/accounts/api/cashboxes/"} }

func (cashboxAccess) Name() string { return "cashbox_access" }

func (s cashboxAccess) Info() sync.Info {
	return sync.Info{Route: "GET " + s.path + ", then GET " + s.path + "{cashbox_id}/access/ per cashbox", Schedule: sync.DefaultSchedule,
		Table: "erp.cashbox_access"}
}

func (s cashboxAccess) Sync(ctx context.Context, r *sync.Run) error {
	boxes, err := s.cashboxes(ctx, r)
	if err != nil {
		return err
	}
	ids := make([]string, len(boxes))
	for i, box := range boxes {
		if err := r.Stopped(); err != nil {
			return err
		}
		if err := s.grants(ctx, r, box); err != nil {
			return err
		}
		ids[i] = box.id
	}
	boxes = nil
	// Grants of cashboxes the (whole) list no longer holds are gone.
	return r.Commit(ctx, func(ctx context.Context, tx pgx.Tx) (model.RunStats, error) {
		gone, live, _, err := db.CashboxAccessGone(ctx, tx, r.Scope(), ids, false)
		if err != nil {
			return model.RunStats{}, err
		}
		n, err := r.MarkGone(ctx, tx, sync.Deletions{
			Rows: gone,
			Live: live,
			Digest: func() ([]byte, error) {
				_, _, d, err := db.CashboxAccessGone(ctx, tx, r.Scope(), ids, true)
				return d, err
			},
			Mark: func() (int64, error) { return db.MarkCashboxAccessGone(ctx, tx, r.Scope(), ids) },
		})
		return model.RunStats{Deleted: n}, err
	})
}

// cashbox is a cashbox listed: its id and the labels it carries, which
// its grants take.
type cashbox struct {
	id     string
	labels db.Labels
}

// cashboxes lists the cashboxes, reading the list page by page. A cashbox
// without a usable id is skipped: the cashboxes stream reports it.
func (s cashboxAccess) cashboxes(ctx context.Context, r *sync.Run) ([]cashbox, error) {
	var ids []cashbox
	l := r.Client().List(erp.ListRequest{Path: s.path})
	for {
		page, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			return ids, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name(), err)
		}
		for i, raw := range page.Records {
			rec := page.Parsed[i]
			if !rec.IsObject() {
				var perr error
				if rec, perr = erp.ParseRecord(raw); perr != nil {
					continue
				}
			}
			if id, ok, err := rec.Text("id"); err == nil && ok && id != "" {
				ids = append(ids, cashbox{id: id, labels: sync.RecordLabels(rec)})
			}
		}
		page.Release()
	}
}

// grants reads and commits the access list of one cashbox. A cashbox whose
// access route answers 404 (deleted since it was listed) keeps what the
// warehouse has until the list drops it.
func (s cashboxAccess) grants(ctx context.Context, r *sync.Run, c cashbox) error {
	box := c.id
	path := erp.DetailPath(s.path, box, "/access/")
	var rows []db.AccessRow
	at := map[string]int{} // a user listed twice keeps the last grant
	seen := 0
	l := r.Client().List(erp.ListRequest{Path: path})
	for {
		page, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		var he *erp.HTTPError
		if errors.As(err, &he) && he.Status == http.StatusNotFound {
			r.Log().Warn("cashbox access route answered 404; keeping its grants", "cashbox", box)
			r.Note("cashbox %s: access route answered 404 (cashbox gone?); its grants were kept", box)
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: cashbox %s: %w", s.Name(), box, err)
		}
		for _, raw := range page.Records {
			seen++
			raw = bytes.Clone(raw) // the page's memory is reused once released
			user, err := grantUser(raw)
			if err != nil {
				r.Reject(db.Rejected{RecordID: box, Reason: fmt.Sprintf("cashbox %s: %v", box, err), Record: raw})
				continue
			}
			row := db.AccessRow{User: user, Payload: raw, Hash: db.PayloadHash(raw)}
			if i, dup := at[user]; dup {
				r.Reject(db.Rejected{RecordID: box, Reason: fmt.Sprintf("cashbox %s: user %s listed twice; the later grant kept", box, user), Record: rows[i].Payload})
				rows[i] = row
				continue
			}
			at[user] = len(rows)
			rows = append(rows, row)
		}
		page.Release()
	}
	return r.Commit(ctx, func(ctx context.Context, tx pgx.Tx) (model.RunStats, error) {
		up, deleted, err := db.UpsertCashboxAccess(ctx, tx, r.Scope(), box, c.labels, rows)
		return model.RunStats{Pages: 1, Seen: int64(seen), Inserted: up.Inserted, Updated: up.Updated,
			Unchanged: up.Unchanged, Deleted: deleted}, err
	})
}

// grantUser names the user of a grant: the first of user_id, user, id or
// username that is there.
func grantUser(raw []byte) (string, error) {
	rec, err := erp.ParseRecord(raw)
	if err == nil {
		err = sync.CheckRecord(rec)
	}
	if err != nil {
		return "", err
	}
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
	boxes := p.Client().List(erp.ListRequest{Path: s.path})
	page, err := boxes.Next(ctx)
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
	access, err := p.Client().List(erp.ListRequest{Path: erp.DetailPath(s.path, box, "/access/")}).Next(ctx)
	if err != nil {
		rep.Failed(err)
		return rep
	}
	defer access.Release()
	rep.Status = http.StatusOK
	rep.Page(access, 0)
	rep.Examine(access, p.Scope, []string{"user_id", "user", "id", "username"}, nil, nil)
	return rep
}
