package sync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// VerifyReport is what `erpsync verify` found for one stream of a source.
type VerifyReport struct {
	Source string `json:"source"`
	Stream string `json:"stream"`
	// Problem says why the stream could not be verified; "" when it was.
	Problem string `json:"problem,omitempty"`
	// Skipped says why the stream is not compared row by row (it is not
	// a list route); it does not count as a disagreement.
	Skipped       string `json:"skipped,omitempty"`
	ERPRows       int64  `json:"erp_rows"`
	WarehouseRows int64  `json:"warehouse_rows"`
	// Rejected are records the ERP lists that erpsync cannot store (see
	// erp.rejected_records); they are left out of the comparison.
	Rejected     int64       `json:"rejected"`
	Missing      int64       `json:"missing"`
	Extra        int64       `json:"extra"`
	Different    int64       `json:"different"`
	MissingIDs   []string    `json:"missing_ids,omitempty"`
	ExtraIDs     []string    `json:"extra_ids,omitempty"`
	DifferentIDs []string    `json:"different_ids,omitempty"`
	Sums         []VerifySum `json:"sums,omitempty"`
}

// VerifySum is the exact sum of one money column over one company,
// branch and month, in the ERP and in the warehouse.
type VerifySum struct {
	CompanyID string          `json:"company_id"`
	BranchID  string          `json:"branch_id"`
	Month     string          `json:"month"`
	Column    string          `json:"column"`
	ERP       decimal.Decimal `json:"erp"`
	Warehouse decimal.Decimal `json:"warehouse"`
	Agree     bool            `json:"agree"`
}

// Mismatched counts the rows that differ between the ERP and the
// warehouse.
func (r VerifyReport) Mismatched() int64 { return r.Missing + r.Extra + r.Different }

// Agree reports whether nothing differs (or the stream was skipped).
func (r VerifyReport) Agree() bool {
	if r.Problem != "" || r.Mismatched() > 0 {
		return false
	}
	for _, s := range r.Sums {
		if !s.Agree {
			return false
		}
	}
	return true
}

// VerifyOptions tune a verification.
type VerifyOptions struct {
	Sample   int           // ids listed per kind of difference
	LockWait time.Duration // how long to wait for a stream a sync is writing
}

// Verify re-reads each stream's list route and compares it with the
// warehouse, writing to neither: the session is read-only but for its
// temporary tables. Each stream is compared while holding its lock, so no
// sync writes it meanwhile. Streams that are not list routes are
// reported as not verifiable.
func Verify(ctx context.Context, conn *pgx.Conn, t Target, streams []Stream, o VerifyOptions) ([]VerifyReport, error) {
	comparisons := make([]*db.Comparison, len(streams))
	for i, s := range streams {
		if l, ok := s.(*List); ok {
			c, err := l.table.NewComparison(ctx, conn, l.moneyColumns(), l.Month, o.Sample)
			if err != nil {
				return nil, err
			}
			comparisons[i] = c
		}
	}
	if err := db.ReadOnly(ctx, conn); err != nil {
		return nil, err
	}
	id, err := t.Client.Identity(ctx)
	if err != nil {
		return nil, err
	}
	sc := model.Scope{Source: t.Source, CompanyID: id.CompanyID, BranchID: id.BranchID}
	out := make([]VerifyReport, len(streams))
	for i, s := range streams {
		rep := VerifyReport{Source: t.Source, Stream: s.Name()}
		if l, ok := s.(*List); !ok {
			rep.Skipped = "not a list route: nothing to compare row by row"
		} else if err := l.verify(ctx, conn, t, sc, comparisons[i], o, &rep); err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			rep.Problem = err.Error()
		}
		out[i] = rep
	}
	return out, nil
}

func (l *List) moneyColumns() []string {
	var out []string
	for _, c := range l.Columns {
		if c.Type == Money {
			out = append(out, c.Name)
		}
	}
	return out
}

// verify walks the route into the comparison, then compares.
func (l *List) verify(ctx context.Context, conn *pgx.Conn, t Target, sc model.Scope, c *db.Comparison, o VerifyOptions, rep *VerifyReport) error {
	if err := waitStreamLock(ctx, conn, t.Source, l.Stream, o.LockWait); err != nil {
		return err
	}
	defer db.UnlockStream(context.WithoutCancel(ctx), conn, t.Source, l.Stream)
	lister := t.Client.List(l.request(t, ""))
	for {
		page, err := lister.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		rows, months, rejected := l.verifyRows(page)
		page.Release()
		rep.Rejected += rejected
		if err := c.Add(ctx, conn, sc, rows, months); err != nil {
			return err
		}
	}
	d, err := c.Compare(ctx, conn, sc)
	if err != nil {
		return err
	}
	rep.ERPRows, rep.WarehouseRows = d.ERPRows, d.WarehouseRows
	rep.Missing, rep.Extra, rep.Different = d.Missing, d.Extra, d.Different
	rep.MissingIDs, rep.ExtraIDs, rep.DifferentIDs = d.MissingIDs, d.ExtraIDs, d.DifferentIDs
	for _, s := range d.Sums {
		rep.Sums = append(rep.Sums, VerifySum{CompanyID: s.CompanyID, BranchID: s.BranchID, Month: s.Month,
			Column: s.Column, ERP: s.ERP, Warehouse: s.Warehouse, Agree: s.Agree()})
	}
	return nil
}

// verifyRows converts a page's records as a sync would; records a sync
// would reject are counted, not compared.
func (l *List) verifyRows(p *erp.Page) (rows []db.Row, months []string, rejected int64) {
	n := len(l.Columns)
	values := make([]any, len(p.Records)*n)
	for i := range p.Records {
		row, rec, err := l.convert(p, i, values[i*n:(i+1)*n:(i+1)*n])
		if err != nil {
			rejected++
			continue
		}
		month := ""
		if l.Month != "" {
			month, _, _ = rec.Text(l.Month)
		}
		rows, months = append(rows, row), append(months, month)
	}
	return rows, months, rejected
}

// waitStreamLock takes the stream's lock, waiting up to wait while a sync
// holds it.
func waitStreamLock(ctx context.Context, conn *pgx.Conn, source, stream string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		ok, err := db.TryStreamLock(ctx, conn, source, stream)
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a sync of %s/%s held its lock for longer than %s", source, stream, wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
