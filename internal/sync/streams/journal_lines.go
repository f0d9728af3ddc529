package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// journalLines reads the journal preview of every document that is new or
// changed since its lines were read (the document streams must have
// synced them first), one transaction per document: a crash loses one.
type journalLines struct {
	*sync.Fanout[documentRow]
}

// JournalLines is the journal lines stream.
func JournalLines() sync.Stream {
	var perms []string
	for _, d := range documents {
		perms = append(perms, d.preview)
	}
	s := &journalLines{}
	s.Fanout = &sync.Fanout[documentRow]{
		Info: sync.Info{Name: "journal_lines", Route: "GET .../{pk}/journal-preview/ below each document route", Permission: strings.Join(perms, ", "),
			Contract: sync.ContractUnreviewed, History: sync.HistoryOn,
			Table: &sync.Table{Name: "journal_lines", Own: true, Columns: []sync.Column{{Name: "debit", Type: sync.Money}, {Name: "credit", Type: sync.Money}}}},
		Parents: sync.StoredParents(documentBatch, documentsNeedingLines),
		Child:   s.document,
	}
	return s
}

// documentRow is a document whose lines are to be read, and its kind.
type documentRow struct {
	kind int // in documents
	db.Document
}

// documentBatch is how many documents are listed from the warehouse at a
// time, so memory does not grow with the number of documents.
const documentBatch = 500

// documentsNeedingLines lists, kind after kind in the order of documents,
// up to limit documents after after whose lines the login is to read.
func documentsNeedingLines(ctx context.Context, q db.Reader, sc model.Scope, after *documentRow, limit int) ([]documentRow, error) {
	kind, id := 0, ""
	if after != nil {
		kind, id = after.kind, after.ID
	}
	var out []documentRow
	for ; kind < len(documents) && len(out) < limit; kind, id = kind+1, "" {
		d := documents[kind]
		docs, err := db.DocumentsNeedingLines(ctx, q, "erp."+d.stream, d.kind, sc, id, limit-len(out))
		if err != nil {
			return nil, err
		}
		for _, doc := range docs {
			out = append(out, documentRow{kind: kind, Document: doc})
		}
	}
	return out, nil
}

// document reads the lines of one document, as the step that replaces
// them. A preview that cannot be read as a whole is rejected (its step
// writes nothing); the other documents go on. A document the ERP no
// longer has is left as it is (no step).
func (s *journalLines) document(ctx context.Context, r *sync.Run, row documentRow) (sync.Child, error) {
	d, doc := documents[row.kind], row.Document
	path := erp.DetailPath(d.path, doc.ID, "/journal-preview/")
	body, err := r.Get(ctx, path, nil)
	var he *erp.HTTPError
	if errors.As(err, &he) && he.Status == http.StatusNotFound {
		r.Log().Warn("document has no journal preview (gone at the ERP?)", "kind", d.kind, "id", doc.ID)
		return sync.Child{}, nil
	}
	if err != nil {
		return sync.Child{}, fmt.Errorf("%s: %s %s: %w", s.Name, d.kind, doc.ID, err)
	}
	lines, received, err := previewLines(r, path, body)
	if err != nil {
		r.Reject(db.Rejected{RecordID: d.kind + " " + doc.ID, Reason: err.Error(), Record: body})
		return sync.Child{Step: &sync.Step{Read: model.RunStats{Pages: 1, Seen: 1}}}, nil
	}
	return sync.Child{Step: &sync.Step{Read: model.RunStats{Pages: 1, Seen: int64(received)}, Write: func(ctx context.Context, tx db.Tx) (model.RunStats, error) {
		return model.RunStats{Inserted: int64(len(lines))}, db.ReplaceJournalLines(ctx, tx, r.Scope(), d.kind, doc, lines)
	}}}, nil
}

// Reset forgets which documents' previews the login read: their lines
// are read again (and kept meanwhile).
func (journalLines) Reset(ctx context.Context, tx db.Tx, scope model.Scope) (string, error) {
	var n int64
	for _, d := range documents {
		m, err := db.ForgetJournalLines(ctx, tx, "erp."+d.stream, d.kind, scope)
		if err != nil {
			return "", err
		}
		n += m
	}
	return fmt.Sprintf("the journal lines of %d documents will be read again", n), nil
}

// decodePreview reads a journal preview: {ok, data: {lines: [...]}},
// {lines: [...]} or a bare array of lines.
func decodePreview(path string, body []byte) (*erp.Page, error) {
	route := erp.RouteLabel(path)
	list := json.RawMessage(body)
	if erp.Kind(body) != "array" {
		rec, _, err := erp.DecodeObject(route, body)
		if err != nil {
			return nil, err
		}
		var ok bool
		if list, ok = rec.Get("lines"); !ok || erp.Kind(list) != "array" {
			return nil, fmt.Errorf("GET %s: no lines array in the answer", route)
		}
	}
	return erp.DecodePage(route, list)
}

// previewLines reads the lines of a journal preview, and how many it
// listed; a line that cannot be used is rejected.
func previewLines(r *sync.Run, path string, body []byte) ([]db.JournalLine, int, error) {
	page, err := decodePreview(path, body)
	if err != nil {
		return nil, 0, err
	}
	var lines []db.JournalLine
	var drift sync.Drift
	for i, raw := range page.Records {
		l, err := previewLine(raw, i, &drift)
		if err != nil {
			r.Reject(db.Rejected{RecordID: l.Line, Reason: err.Error(), Record: raw})
			continue
		}
		lines = append(lines, l)
	}
	r.Drift(drift.Entries()...)
	lines = sync.KeepLast(lines, func(l db.JournalLine) string { return l.Line }, func(earlier db.JournalLine) {
		r.Reject(db.Rejected{RecordID: earlier.Line, Reason: "line listed twice; the later copy kept", Record: earlier.Payload})
	})
	return lines, len(page.Records), nil
}

// lineFields are the fields a journal line is expected to carry: the
// ones the stream reads, and the account's name.
var lineFields = sync.NewExpectation(map[string]string{
	"line": "number|string", "account_code": "string", "account_name": "string",
	"debit": "number|string", "credit": "number|string",
})

// previewLine reads the line at index of a preview, counting in drift
// how it differs from lineFields.
func previewLine(raw json.RawMessage, index int, drift *sync.Drift) (db.JournalLine, error) {
	l := db.JournalLine{Line: strconv.Itoa(index + 1), Payload: raw}
	rec, err := erp.ParseRecord(raw)
	if err == nil {
		err = sync.CheckRecord(rec)
	}
	if err != nil {
		return l, err
	}
	lineFields.Check(rec, l.Line, drift)
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
	docs, err := p.FirstPage(ctx, erp.ListRequest{Path: d.path, Paging: d.paging, PageSize: 1})
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
	body, err := p.Get(ctx, path, nil)
	if err == nil {
		var page *erp.Page
		if page, err = decodePreview(path, body); err == nil {
			rep.Status = http.StatusOK
			rep.Page(page, 0)
			rep.Examine(page, nil, s.Declared().MoneyColumns(), lineFields.Fields())
			return rep
		}
	}
	rep.Failed(err)
	return rep
}
