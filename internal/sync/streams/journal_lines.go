package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// journalLines reads the journal preview of every document that is new or
// changed since its lines were read (the document streams must have
// synced them first), one transaction per document: a crash loses one.
type journalLines struct{}

// JournalLines is the journal lines stream.
func JournalLines() sync.Stream { return journalLines{} }

func (journalLines) Name() string { return "journal_lines" }

func (journalLines) Info() sync.Info {
	var perms []string
	for _, d := range documents {
		perms = append(perms, d.preview)
	}
	return sync.Info{Route: "GET .../{pk}/journal-preview/ below each document route", Permission: strings.Join(perms, ", "),
		Contract: sync.ContractUnreviewed, Schedule: sync.DefaultSchedule, Table: "erp.journal_lines",
		Money: []string{"debit", "credit"}, Typed: []string{"account_code"}}
}

// documentBatch is how many documents are listed from the warehouse at a
// time, so memory does not grow with the number of documents.
const documentBatch = 500

func (s journalLines) Sync(ctx context.Context, r *sync.Run) error {
	for _, d := range documents {
		after := ""
		for {
			var docs []db.Document
			err := r.Read(ctx, func(ctx context.Context, q db.Reader) (err error) {
				docs, err = db.DocumentsNeedingLines(ctx, q, "erp."+d.stream, d.kind, r.Scope(), after, documentBatch)
				return err
			})
			if err != nil {
				return err
			}
			for _, doc := range docs {
				if err := r.Stopped(); err != nil {
					return err
				}
				if err := s.document(ctx, r, d, doc); err != nil {
					return fmt.Errorf("%s: %s %s: %w", s.Name(), d.kind, doc.ID, err)
				}
			}
			if len(docs) < documentBatch {
				break
			}
			after = docs[len(docs)-1].ID
		}
	}
	return nil
}

// document reads and commits the lines of one document. A preview that
// cannot be read as a whole is rejected; the other documents go on.
func (journalLines) document(ctx context.Context, r *sync.Run, d document, doc db.Document) error {
	path := erp.DetailPath(d.path, doc.ID, "/journal-preview/")
	body, err := r.Client().Get(ctx, path, nil)
	var he *erp.HTTPError
	if errors.As(err, &he) && he.Status == http.StatusNotFound {
		r.Log().Warn("document has no journal preview (gone at the ERP?)", "kind", d.kind, "id", doc.ID)
		return nil
	}
	if err != nil {
		return err
	}
	lines, received, err := previewLines(r, path, body)
	if err != nil {
		r.Reject(db.Rejected{RecordID: d.kind + " " + doc.ID, Reason: err.Error(), Record: body})
		return r.Commit(ctx, func(context.Context, pgx.Tx) (model.RunStats, error) {
			return model.RunStats{Pages: 1, Seen: 1}, nil
		})
	}
	return r.Commit(ctx, func(ctx context.Context, tx pgx.Tx) (model.RunStats, error) {
		return model.RunStats{Pages: 1, Seen: int64(received), Inserted: int64(len(lines))},
			db.ReplaceJournalLines(ctx, tx, r.Scope(), d.kind, doc, lines)
	})
}

// previewLines reads {ok, data: {lines: [...]}}, {lines: [...]} or a bare
// array of lines, and how many it listed; a line that cannot be used is
// rejected.
func previewLines(r *sync.Run, path string, body []byte) ([]db.JournalLine, int, error) {
	route := erp.RouteLabel(path)
	list := json.RawMessage(body)
	if erp.Kind(body) != "array" {
		rec, _, err := erp.DecodeObject(route, body)
		if err != nil {
			return nil, 0, err
		}
		var ok bool
		if list, ok = rec.Get("lines"); !ok || erp.Kind(list) != "array" {
			return nil, 0, fmt.Errorf("GET %s: no lines array in the answer", route)
		}
	}
	page, err := erp.DecodePage(route, list)
	if err != nil {
		return nil, 0, err
	}
	var lines []db.JournalLine
	at := map[string]int{} // a line listed twice keeps its last copy
	for i, raw := range page.Records {
		l, err := previewLine(raw, i)
		if err != nil {
			r.Reject(db.Rejected{RecordID: l.Line, Reason: err.Error(), Record: raw})
			continue
		}
		if j, dup := at[l.Line]; dup {
			r.Reject(db.Rejected{RecordID: l.Line, Reason: "line listed twice; the later copy kept", Record: lines[j].Payload})
			lines[j] = l
			continue
		}
		at[l.Line] = len(lines)
		lines = append(lines, l)
	}
	return lines, len(page.Records), nil
}

func previewLine(raw json.RawMessage, index int) (db.JournalLine, error) {
	l := db.JournalLine{Line: strconv.Itoa(index + 1), Payload: raw}
	rec, err := erp.ParseRecord(raw)
	if err == nil {
		err = sync.CheckRecord(rec)
	}
	if err != nil {
		return l, err
	}
	if _, ok, err := rec.Text("line"); err != nil || ok {
		if l.Line, err = sync.KeyField(rec, "line"); err != nil {
			return l, err
		}
	}
	if l.AccountCode, err = sync.TextField(rec, "account_code"); err != nil {
		return l, err
	}
	if l.Debit, err = sync.MoneyField(rec, "debit"); err != nil {
		return l, err
	}
	if l.Credit, err = sync.MoneyField(rec, "credit"); err != nil {
		return l, err
	}
	return l, nil
}

// Probe reads the journal preview of the first journal entry listed.
func (s journalLines) Probe(ctx context.Context, p *sync.Probe) sync.ProbeReport {
	d := documents[0]
	rep := p.Report(s, "GET "+d.path+"{pk}/journal-preview/")
	rep.Permission = d.preview
	docs, err := p.Client().List(erp.ListRequest{Path: d.path, Paging: d.paging, PageSize: 1}).Next(ctx)
	if err != nil {
		rep.Route, rep.Permission = d.path, d.permission // the list refused, not a preview
		rep.Failed(err)
		return rep
	}
	id := ""
	for _, rec := range docs.Parsed {
		if v, ok, err := rec.Text("id"); err == nil && ok && v != "" {
			id = v
			break
		}
	}
	docs.Release()
	if id == "" {
		rep.Status, rep.Problem = http.StatusOK, "no "+d.kind+" with an id is listed: no journal preview to read"
		return rep
	}
	path := erp.DetailPath(d.path, id, "/journal-preview/")
	body, err := p.Client().Get(ctx, path, nil)
	if err != nil {
		rep.Failed(err)
		return rep
	}
	list := json.RawMessage(body)
	if erp.Kind(body) != "array" {
		rec, _, err := erp.DecodeObject(erp.RouteLabel(path), body)
		if err != nil {
			rep.Failed(err)
			return rep
		}
		list, _ = rec.Get("lines")
	}
	page, err := erp.DecodePage(erp.RouteLabel(path), list)
	if err != nil {
		rep.Failed(err)
		return rep
	}
	rep.Status = http.StatusOK
	rep.Page(page, 0)
	rep.Examine(page, p.Scope, nil, []string{"debit", "credit"}, nil)
	return rep
}
