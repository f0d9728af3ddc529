package streams_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testdb"
)

// The two worked examples of docs/adding-a-stream.md, verbatim: the test
// below fails if the page shows code that differs from this file.

// CashboxLookup is the cashbox picker of the ERP's forms: id, name, type.
func CashboxLookup() *sync.List {
	return &sync.List{
		Info: sync.Info{
			Name:     "cashbox_lookup",
			Schedule: "@every 1h",
			History:  sync.HistoryOn,
			Table: &sync.Table{Columns: []sync.Column{
				{Name: "name", Field: "name", Type: sync.Text},
				{Name: "type", Field: "type", Type: sync.Text, Lenient: true},
			}},
		},
		Path: "/accounts/api/cashboxes/lookup/",
	}
}

// cashboxDetails reads the detail record of every cashbox listed, one
// request each: it carries what the list does not (the ledger account
// and the opening balance).
type cashboxDetails struct {
	*sync.Fanout[string]
}

// CashboxDetails is the cashbox details stream.
func CashboxDetails() sync.Stream {
	s := &cashboxDetails{}
	s.Fanout = &sync.Fanout[string]{
		Info: sync.Info{
			Name:     "cashbox_details",
			Route:    "GET /accounts/api/cashboxes/{pk}/ per cashbox",
			Schedule: "@every 1h",
			History:  sync.HistoryOn,
			Table: &sync.Table{
				Columns: []sync.Column{
					{Name: "opening_balance", Field: "opening_balance", Type: sync.Money},
					{Name: "account_code", Field: "account_code", Type: sync.Text, Lenient: true},
				},
				Also: map[string]string{"name": "string", "type": "string", "currency_code": "string",
					"balance": "number|string", "is_active": "boolean", "branch_id": "number|string"},
			},
		},
		Parents: sync.ListedParents(erp.ListRequest{Path: "/accounts/api/cashboxes/"}, cashboxID),
		Child:   s.detail,
	}
	return s
}

// cashboxID is the id of a cashbox listed (false: it has none).
func cashboxID(it sync.Item) (string, bool) {
	id, ok, err := it.Record.Text("id")
	return id, err == nil && ok
}

// detail reads one cashbox's detail: the step that writes its row.
func (s *cashboxDetails) detail(ctx context.Context, r *sync.Run, id string) (sync.Child, error) {
	var drift sync.Drift
	row, err := s.row(ctx, r.View, id, &drift, r.Reject)
	r.Drift(drift.Entries()...)
	if err != nil || row == nil {
		return sync.Child{}, err
	}
	return sync.Child{Step: &sync.Step{Write: func(ctx context.Context, tx db.Tx) (model.RunStats, error) {
		return r.Upsert(ctx, tx, s.Table, []db.Row{*row})
	}}}, nil
}

// row reads the detail of one cashbox as the table makes its row; a record
// that cannot be used is handed to reject (nil row).
func (s cashboxDetails) row(ctx context.Context, v *sync.View, id string, drift *sync.Drift, reject func(db.Rejected)) (*db.Row, error) {
	path := erp.DetailPath("/accounts/api/cashboxes/", id, "/")
	body, err := v.Get(ctx, path, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: cashbox %s: %w", s.Name, id, err)
	}
	rec, raw, err := erp.DecodeObject(erp.RouteLabel(path), body)
	var row db.Row
	if err == nil {
		row, err = s.Table.Row(rec, raw, nil, drift)
	}
	if err != nil {
		reject(db.Rejected{RecordID: id, Reason: err.Error(), Record: body})
		return nil, nil
	}
	return &row, nil
}

// cashboxIDs lists the ids of the cashboxes.
func cashboxIDs(ctx context.Context, v *sync.View) ([]string, error) {
	var ids []string
	for it, err := range v.Records(ctx, erp.ListRequest{Path: "/accounts/api/cashboxes/"}) {
		if err != nil {
			return nil, err
		}
		if id, ok := cashboxID(it); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Verify lets `erpsync verify` compare the table with the ERP: every
// detail read again, as a sync reads it.
func (s cashboxDetails) Verify(ctx context.Context, v *sync.Verification) error {
	ids, err := cashboxIDs(ctx, v.View)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	var rows []db.Row
	for _, id := range ids {
		row, err := s.row(ctx, v.View, id, nil, func(db.Rejected) { v.Rejected(1) })
		if err != nil {
			return err
		}
		if row != nil {
			rows = append(rows, *row)
		}
	}
	return v.Compare(ctx, rows, make([]string, len(rows)))
}

// Probe reads the first cashbox's detail, for `erpsync probe`.
func (s cashboxDetails) Probe(ctx context.Context, p *sync.Probe) sync.ProbeReport {
	rep := p.Report(s, "")
	ids, err := cashboxIDs(ctx, p.View)
	if err == nil && len(ids) == 0 {
		err = errors.New("no cashbox is listed: no detail to read")
	}
	var body []byte
	if err == nil {
		body, err = p.Get(ctx, erp.DetailPath("/accounts/api/cashboxes/", ids[0], "/"), nil)
	}
	if err == nil {
		var rec erp.Record
		var raw json.RawMessage
		if rec, raw, err = erp.DecodeObject("/accounts/api/cashboxes/{pk}/", body); err == nil {
			rep.Status = http.StatusOK
			page := &erp.Page{Records: []json.RawMessage{raw}, Parsed: []erp.Record{rec}}
			rep.Examine(page, []string{"id"}, s.Declared().MoneyColumns(), s.Table.Expected())
			return rep
		}
	}
	rep.Failed(err)
	return rep
}

// TestAddingAStreamDoc keeps docs/adding-a-stream.md honest: both its
// streams, defined outside package sync with only its exported API, do
// what the page says.
func TestAddingAStreamDoc(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/adding-a-stream.md")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("ShowsTheEnginesStreamInterfaceAndTheCodeOfThisFile", func(t *testing.T) {
		self, err := os.ReadFile("adding_a_stream_test.go")
		if err != nil {
			t.Fatal(err)
		}
		goBlocks := codeBlocks(string(doc), "go")
		if len(goBlocks) < 3 {
			t.Fatalf("the page has %d Go blocks, want the interface and the two examples", len(goBlocks))
		}
		stream, err := os.ReadFile("../stream.go")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(stream), goBlocks[0]) {
			t.Errorf("the page's Stream interface is not the one in internal/sync/stream.go:\n%s", goBlocks[0])
		}
		for _, b := range goBlocks[1:] {
			if !strings.Contains(string(self), b) {
				t.Errorf("the page shows code that is not in adding_a_stream_test.go:\n%s", b)
			}
		}
	})

	pool, url := testdb.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !t.Run("ItsMigrationsAreWhatTheDeclarationsWriteAndApply", func(t *testing.T) {
		blocks := codeBlocks(string(doc), "sql")
		examples := []sync.Stream{CashboxLookup(), CashboxDetails()}
		if len(blocks) != len(examples) {
			t.Fatalf("the page has %d migrations, want one per example", len(blocks))
		}
		for i, s := range examples {
			if want, err := sync.Migration(s); err != nil || blocks[i] != want {
				t.Errorf("the page's migration of %s is not the one its declaration writes (%v):\n%s\nwant:\n%s", s.Declared().Name, err, blocks[i], want)
			}
		}
		for _, m := range blocks {
			up, _, _ := strings.Cut(m, "-- +goose Down")
			if _, err := pool.Exec(ctx, up); err != nil {
				t.Fatalf("the page's migration does not apply: %v\n%s", err, up)
			}
		}
	}) {
		return
	}

	sim := erpsim.New(erpsim.Options{})
	srv := httptest.NewServer(sim)
	defer srv.Close()
	client, err := erp.New(erp.Options{BaseURL: srv.URL, Username: "erpsync", Password: "erpsync-demo-password"})
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := sync.NewCatalog(CashboxLookup(), CashboxDetails())
	if err != nil {
		t.Fatal(err)
	}
	runner := &sync.Runner{Pool: pool, Prefetch: 1}
	target := sync.Target{Source: "doc", Logins: []sync.Login{{Name: "erpsync", Client: client}}, PageSize: 50}
	run := func(t *testing.T, name string) sync.Result {
		t.Helper()
		s, _ := catalog.Lookup(name)
		res := runner.Run(ctx, nil, target, s, nil)[0]
		if res.Status != model.StatusSucceeded {
			t.Fatalf("%s: %s %v", name, res.Status, res.Err)
		}
		return res
	}
	if !t.Run("BothStreamsSyncAndAnUnchangedReSyncWritesNothing", func(t *testing.T) {
		for _, name := range catalog.Names() {
			run(t, name)
			if res := run(t, name); res.Stats.Inserted+res.Stats.Updated != 0 {
				t.Errorf("%s: an unchanged re-sync wrote %+v", name, res.Stats)
			}
		}
	}) {
		return
	}

	analyst := testdb.PoolAs(t, url, testdb.Role(t, "erpsync_analyst"))
	t.Run("AnAnalystReadsBothTablesWithTheERPsMoney", func(t *testing.T) {

		// What the ERP lists, read here independently: the cashboxes' ids and
		// opening balances, decoded with encoding/json (numbers as text).
		want := map[string]decimal.Decimal{}
		for id := 1; id <= 4; id++ {
			body, err := client.Get(ctx, fmt.Sprintf("/accounts/api/cashboxes/%d/", id), nil)
			if err != nil {
				t.Fatal(err)
			}
			var d struct {
				Data struct {
					OpeningBalance json.Number `json:"opening_balance"`
				}
			}
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.UseNumber()
			if err := dec.Decode(&d); err != nil {
				t.Fatal(err)
			}
			want[fmt.Sprint(id)] = decimal.RequireFromString(d.Data.OpeningBalance.String())
		}

		var lookup string
		if err := analyst.QueryRow(ctx, `SELECT string_agg(id || ' ' || name || ' ' || type, ', ' ORDER BY id) FROM erp.cashbox_lookup`).Scan(&lookup); err != nil {
			t.Fatal(err)
		}
		if lookup != "1 Main till cash, 2 Operating account bank, 3 Euro account bank, 4 Petty cash cash" {
			t.Errorf("erp.cashbox_lookup = %s", lookup)
		}
		rows, err := analyst.Query(ctx, `SELECT id, opening_balance::text FROM erp.cashbox_details ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]decimal.Decimal{}
		for rows.Next() {
			var id, bal string
			if err := rows.Scan(&id, &bal); err != nil {
				t.Fatal(err)
			}
			got[id] = decimal.RequireFromString(bal)
		}
		if len(got) != len(want) {
			t.Errorf("erp.cashbox_details: %d rows, want %d", len(got), len(want))
		}
		for id, w := range want {
			if !got[id].Equal(w) {
				t.Errorf("cashbox %s: opening balance %s, the ERP's %s", id, got[id], w)
			}
		}

	})

	t.Run("TheStreamOfItsOwnKeepsTheVersionAChangeReplaces", func(t *testing.T) {
		sim.SetFieldDrift("/accounts/api/cashboxes/2/", map[string]json.RawMessage{"account_code": json.RawMessage(`"1999"`)}, []string{"account_code"})
		if res := run(t, "cashbox_details"); res.Stats.Updated != 1 {
			t.Errorf("after one cashbox changed: %+v, want one updated", res.Stats)
		}
		var versions int
		var before string
		if err := analyst.QueryRow(ctx, `SELECT count(*), min(account_code) FROM erp.cashbox_details_history`).Scan(&versions, &before); err != nil {
			t.Fatal(err)
		}
		if versions != 1 || before != "1002" {
			t.Errorf("history: %d versions, account %q; want one, 1002", versions, before)
		}

	})

	// The warehouse agrees with the ERP, and a row changed behind
	// erpsync's back is found.
	t.Run("TheStreamOfItsOwnIsVerified", func(t *testing.T) {
		verify := func() sync.VerifyReport {
			t.Helper()
			c, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release()
			conn := c.Hijack()
			defer conn.Close(ctx)
			s, _ := catalog.Lookup("cashbox_details")
			reps, err := sync.Verify(ctx, conn, target, []sync.Stream{s}, sync.VerifyOptions{Sample: 5, LockWait: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return reps[0]
		}
		if rep := verify(); !rep.Agree() || rep.ERPRows != 4 {
			t.Errorf("verify after a sync: %+v", rep)
		}
		if _, err := pool.Exec(ctx, `UPDATE erp.cashbox_details SET opening_balance = opening_balance + 1 WHERE id = '3'`); err != nil {
			t.Fatal(err)
		}
		if rep := verify(); rep.Agree() || rep.Different != 1 || strings.Join(rep.DifferentIDs, ",") != "3" {
			t.Errorf("verify after a change behind erpsync's back: %+v, want cashbox 3 different", rep)
		}

	})

	t.Run("TheStreamOfItsOwnIsProbedLikeAList", func(t *testing.T) {
		id, err := client.Identity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := catalog.Lookup("cashbox_details")
		rep := s.(sync.Prober).Probe(ctx, sync.NewProbe(target, target.Logins[0], id))
		if !rep.Usable() || rep.Records != 1 || rep.WithID != 1 || len(rep.Money) != 1 || rep.Money[0].Parsed != 1 {
			t.Errorf("probe: %+v", rep)
		}
	})
}

// codeBlocks returns the fenced blocks of a language in a Markdown text.
func codeBlocks(md, lang string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}
