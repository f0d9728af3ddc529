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
)

// Prober is a Stream that can look at its route without writing anything:
// one small read, for `erpsync probe`, the first command against an
// installation.
type Prober interface {
	Probe(ctx context.Context, t Target) ProbeReport
}

// ProbeReport is what one small read of a stream's route showed.
type ProbeReport struct {
	Stream     string `json:"stream"`
	Route      string `json:"route"`
	Permission string `json:"permission,omitempty"`
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
func (l *List) Probe(ctx context.Context, t Target) ProbeReport {
	rep := ProbeReport{Stream: l.Stream, Route: t.Path(l.Path), Permission: l.Permission}
	req := l.request(t, "")
	req.PageSize = probePageSize
	lister := t.Client.List(req)
	page, err := lister.Next(ctx)
	if err != nil {
		rep.Failed(err)
		return rep
	}
	defer page.Release()
	rep.Status = http.StatusOK
	rep.Page(page)
	var money []string
	for _, c := range l.Columns {
		if c.Type == Money {
			money = append(money, c.Field)
		}
	}
	rep.Examine(page, []string{"id"}, money, l.Expect)
	return rep
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
			p.Problem = "access refused (403): the integration user lacks the route's permission"
			if p.Permission != "" {
				p.Problem = "access refused (403): the integration user needs " + p.Permission
			}
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

// Page records the envelope and the paging signals of an answer.
func (p *ProbeReport) Page(page *erp.Page) {
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
}

// Examine looks at records as a stream would use them: is the first of
// idFields there (nil: no id needed), do the money fields parse and with
// what scale, which expected fields are missing and which are unexpected
// (when expect is not nil).
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
		if _, ok, err := rec.Text(f); err != nil || ok {
			if _, err := KeyField(rec, f); err != nil {
				return err
			}
			p.WithID++
			return nil
		}
	}
	return fmt.Errorf("record has no %s", strings.Join(idFields, " or "))
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
