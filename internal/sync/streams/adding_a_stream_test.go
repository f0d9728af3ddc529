package streams_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
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
		Stream:  "cashbox_lookup",
		Path:    "/accounts/api/cashboxes/lookup/",
		Columns: []sync.Column{{Name: "name", Field: "name", Type: sync.Text}},
		Expect:  map[string]string{"id": "number|string", "name": "string", "type": "string"},
		History: sync.HistoryOn,
	}
}

// cashboxBalances keeps one balance per cashbox per day (UTC), so the cash
// position can be followed over time.
type cashboxBalances struct{}

// CashboxBalances is the daily cashbox balances stream.
func CashboxBalances() sync.Stream { return cashboxBalances{} }

func (cashboxBalances) Name() string { return "cashbox_balances" }

func (cashboxBalances) Info() sync.Info {
	return sync.Info{Route: "GET /accounts/api/cashboxes/", Schedule: "@every 1h", Table: "erp.cashbox_balances", Money: []string{"balance"}}
}

func (s cashboxBalances) Sync(ctx context.Context, r *sync.Run) error {
	var ids []string
	var balances []pgtype.Numeric
	pages := r.Client().List(erp.ListRequest{Path: "/accounts/api/cashboxes/"})
	for !pages.Done() {
		page, err := pages.Next(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
		for i, raw := range page.Records {
			id, balance, err := cashboxBalance(page.Parsed[i])
			if err != nil {
				// Copied: the page's memory is reused once released.
				r.Reject(db.Rejected{RecordID: id, Reason: err.Error(), Record: bytes.Clone(raw)})
				continue
			}
			ids, balances = append(ids, id), append(balances, db.Numeric(balance))
		}
		page.Release()
	}
	return r.Commit(ctx, func(ctx context.Context, tx pgx.Tx) (model.RunStats, error) {
		tag, err := tx.Exec(ctx, `
INSERT INTO erp.cashbox_balances (source, day, cashbox_id, balance)
SELECT $1, (now() AT TIME ZONE 'UTC')::date, b.id, b.balance
FROM unnest($2::text[], $3::numeric[]) AS b(id, balance)
ON CONFLICT (source, day, cashbox_id) DO UPDATE SET balance = EXCLUDED.balance
WHERE erp.cashbox_balances.balance IS DISTINCT FROM EXCLUDED.balance`, r.Scope().Source, ids, balances)
		st := model.RunStats{Pages: 1, Seen: int64(len(ids))}
		st.Inserted = tag.RowsAffected()
		st.Unchanged = st.Seen - st.Inserted
		return st, err
	})
}

// cashboxBalance reads a cashbox's id and balance.
func cashboxBalance(rec erp.Record) (string, decimal.Decimal, error) {
	id, hasID, err := rec.Text("id")
	if err != nil || !hasID {
		return id, decimal.Decimal{}, cmp.Or(err, errors.New("cashbox has no id"))
	}
	balance, hasBalance, err := rec.Money("balance")
	if err != nil || !hasBalance {
		return id, balance, cmp.Or(err, errors.New("cashbox has no balance"))
	}
	return id, balance, nil
}

// TestAddingAStreamDoc keeps docs/adding-a-stream.md honest: its Go blocks
// are this file's code, its migrations apply, and both streams, defined
// outside package sync with only its exported API, sync the simulator.
func TestAddingAStreamDoc(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/adding-a-stream.md")
	if err != nil {
		t.Fatal(err)
	}
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

	pool, _ := testdb.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range codeBlocks(string(doc), "sql") {
		up, _, _ := strings.Cut(m, "-- +goose Down")
		if _, err := pool.Exec(ctx, up); err != nil {
			t.Fatalf("the page's migration does not apply: %v\n%s", err, up)
		}
	}

	sim := erpsim.New(erpsim.Options{})
	srv := httptest.NewServer(sim)
	defer srv.Close()
	client, err := erp.New(erp.Options{BaseURL: srv.URL, Username: "erpsync", Password: "erpsync-demo-password"})
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := sync.NewCatalog(CashboxLookup(), CashboxBalances())
	if err != nil {
		t.Fatal(err)
	}
	runner := &sync.Runner{Pool: pool, Prefetch: 1}
	target := sync.Target{Source: "doc", Logins: []sync.Login{{Name: "erpsync", Client: client}}, PageSize: 50}
	for _, name := range catalog.Names() {
		s, _ := catalog.Lookup(name)
		for round := range 2 {
			res := runner.Run(ctx, nil, target, s, nil)[0]
			if res.Status != model.StatusSucceeded {
				t.Fatalf("%s: %s %v", name, res.Status, res.Err)
			}
			if round == 1 && res.Stats.Inserted+res.Stats.Updated != 0 {
				t.Errorf("%s: an unchanged re-sync wrote %+v", name, res.Stats)
			}
		}
	}

	var lookup string
	if err := pool.QueryRow(ctx, `SELECT string_agg(id || ' ' || name, ', ' ORDER BY id) FROM erp.cashbox_lookup WHERE source = 'doc'`).Scan(&lookup); err != nil {
		t.Fatal(err)
	}
	if lookup != "1 Main till, 2 Operating account, 3 Euro account, 4 Petty cash" {
		t.Errorf("erp.cashbox_lookup = %s", lookup)
	}
	var asOf, versions int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM erp.cashbox_lookup_as_of(now())),
		(SELECT count(*) FROM erp.cashbox_lookup_history)`).Scan(&asOf, &versions); err != nil {
		t.Fatalf("the page's history: %v", err)
	}
	if asOf != 4 || versions != 0 {
		t.Errorf("cashbox_lookup as of now: %d rows, %d versions kept; want 4 and none (nothing changed)", asOf, versions)
	}
	var sum string
	var days int
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(balance), 0)::text, count(DISTINCT day) FROM erp.cashbox_balances WHERE source = 'doc'`).Scan(&sum, &days); err != nil {
		t.Fatal(err)
	}
	// The balances are exactly the ones the ERP lists, digit for digit.
	want := decimal.Zero
	pages := client.List(erp.ListRequest{Path: "/accounts/api/cashboxes/"})
	for !pages.Done() {
		page, err := pages.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range page.Parsed {
			b, _, _ := rec.Money("balance")
			want = want.Add(b)
		}
		page.Release()
	}
	if days != 1 || sum != want.String() {
		t.Errorf("erp.cashbox_balances: %d days, sum %s; want one day summing to %s", days, sum, want)
	}
}

// codeBlocks returns the fenced blocks of a language in a Markdown text.
func codeBlocks(md, lang string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	return out
}
