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

// Verifier is a stream whose warehouse rows (Info.Table, with its money
// columns, their sums grouped by Info.Month) can be compared with what the
// ERP lists. Verify reads the stream's route through one login (it is
// called once per login of the source) and hands each page's rows, as a
// sync would write them, to v.Compare; the comparison ends after the last
// login.
type Verifier interface {
	Stream
	Verify(ctx context.Context, v *Verification) error
}

// Verification is one stream of one source being compared, as a Verifier
// sees it while reading through one login: its View, and the comparison.
type Verification struct {
	*View
	conn       *pgx.Conn
	comparison *db.Comparison
	rejected   int64
}

// Rejected counts records the ERP lists that a sync would reject.
func (v *Verification) Rejected(n int64) { v.rejected += n }

// Compare compares a page of rows with the warehouse's table; months
// holds each row's month field as received ("" when absent), for the
// sums.
func (v *Verification) Compare(ctx context.Context, rows []db.Row, months []string) error {
	return v.comparison.Add(ctx, v.conn, v.scope, rows, months)
}

// Verify re-reads each stream's route through every login of the source
// and compares it with the warehouse, writing to neither: the session is
// read-only but for its temporary tables. Each stream is compared while
// holding its lock, so no sync writes it meanwhile. Streams that are not
// Verifiers are reported as not verifiable.
func Verify(ctx context.Context, conn *pgx.Conn, t Target, streams []Stream, o VerifyOptions) ([]VerifyReport, error) {
	// The comparisons' temporary tables are made before the session turns
	// read-only.
	comparisons := make([]*db.Comparison, len(streams))
	for i, s := range streams {
		info := s.Declared()
		if _, ok := s.(Verifier); ok && info.Table != nil && !info.Table.Own {
			c, err := info.Table.db.NewComparison(ctx, conn, info.MoneyColumns(), info.Month, o.Sample)
			if err != nil {
				return nil, err
			}
			comparisons[i] = c
		}
	}
	if err := db.ReadOnly(ctx, conn); err != nil {
		return nil, err
	}
	out := make([]VerifyReport, len(streams))
	for i, s := range streams {
		rep := VerifyReport{Source: t.Source, Stream: s.Declared().Name}
		if vs, ok := s.(Verifier); !ok || comparisons[i] == nil {
			rep.Skipped = "erpsync cannot compare this stream row by row"
		} else if err := verifyStream(ctx, conn, t, s.Declared().Name, vs, comparisons[i], &rep, o); err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			rep.Problem = err.Error()
		}
		out[i] = rep
	}
	return out, nil
}

// verifyStream reads the stream through each login, then compares.
func verifyStream(ctx context.Context, conn *pgx.Conn, t Target, name string, s Verifier, comparison *db.Comparison, rep *VerifyReport, o VerifyOptions) error {
	ctx = erp.WithAsker(ctx, erp.Asker{Stream: name, Kind: erp.KindVerify})
	// Every lock: no run writes the stream while it is compared.
	for _, kind := range writingKinds {
		release, err := waitStreamLock(ctx, conn, t.Source, name, kind, o.LockWait)
		if err != nil {
			return err
		}
		defer release()
	}
	// Every login's context first: a record without labels of its own is
	// expected with the context of the login that first listed it, which
	// need not be the login listing it.
	contexts := make(map[string][2]string, len(t.Logins))
	for _, l := range t.Logins {
		id, err := l.Client.Identity(ctx)
		if err != nil {
			return fmt.Errorf("login %s: %w", l.Name, err)
		}
		contexts[l.Name] = [2]string{id.CompanyID, id.BranchID}
	}
	comparison.SetLogins(contexts)
	for _, l := range t.Logins {
		cb := contexts[l.Name]
		v := &Verification{View: &View{target: t, login: l, scope: model.Scope{Key: model.Key{Source: t.Source, Stream: name, Login: l.Name},
			CompanyID: cb[0], BranchID: cb[1]}}, conn: conn, comparison: comparison}
		if err := s.Verify(ctx, v); err != nil {
			return fmt.Errorf("login %s: %w", l.Name, err)
		}
		rep.Rejected += v.rejected
	}
	d, err := comparison.Compare(ctx, conn, t.Source)
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

// Verify walks the list route through the verification's login, page by
// page, converting records as a sync does; records a sync would reject
// are counted, not compared.
func (l *List) Verify(ctx context.Context, v *Verification) error {
	lister := v.login.Client.List(l.request(v.target, ""))
	n := len(l.Table.Columns)
	for {
		page, err := lister.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		values := make([]any, len(page.Records)*n)
		type read struct {
			row   db.Row
			month string
		}
		var reads []read
		for i := range page.Records {
			row, rec, err := l.convert(page, i, values[i*n:(i+1)*n:(i+1)*n], nil)
			if err != nil {
				v.Rejected(1)
				continue
			}
			month := ""
			if l.Month != "" {
				month, _, _ = rec.Text(l.Month)
			}
			reads = append(reads, read{row, month})
		}
		reads = KeepLast(reads, func(r read) string { return r.row.ID }, nil)
		rows, months := make([]db.Row, len(reads)), make([]string, len(reads))
		for i, r := range reads {
			rows[i], months[i] = r.row, r.month
		}
		err = v.Compare(ctx, rows, months)
		page.Release()
		if err != nil {
			return err
		}
	}
}

// waitStreamLock takes the stream's lock, waiting up to wait while a sync
// holds it, and returns its release.
func waitStreamLock(ctx context.Context, conn *pgx.Conn, source, stream string, kind model.RunKind, wait time.Duration) (func(), error) {
	deadline := time.Now().Add(wait)
	for {
		release, err := db.LockStream(ctx, conn, source, stream, kind)
		if err != nil || release != nil {
			return release, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("a sync of %s/%s held its lock for longer than %s", source, stream, wait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
