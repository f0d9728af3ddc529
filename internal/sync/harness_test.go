package sync_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/sync/streams"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

// catalog is the product's catalog, built once for the package's tests.
var catalog = streams.MustDefault()

// harness is a simulator on httptest, a fresh database and a runner.
type harness struct {
	t      *testing.T
	pool   *pgxpool.Pool
	url    string
	sim    *erpsim.Sim
	srv    *httptest.Server
	client *erp.Client
	runner *sync.Runner
	source string
	pages  int
	// prefixes are the installation's path prefixes (messaging).
	prefixes map[string]string
	// settings are the streams' own settings, by stream.
	settings map[string]map[string]string
	// driftStop are the streams whose drift policy is stop.
	driftStop map[string]bool
	// windowPages are the streams whose window has a size set.
	windowPages map[string]int
}

func newHarness(t *testing.T, opts erpsim.Options) *harness {
	t.Helper()
	pool, dbURL := testdb.Pool(t)
	sim := erpsim.New(opts)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	h := &harness{t: t, pool: pool, url: dbURL, sim: sim, srv: srv, source: "test", pages: 50,
		prefixes: map[string]string{"messaging": "/messaging"}}
	h.client = h.newClient(erp.Options{})
	h.runner = &sync.Runner{Pool: pool, Prefetch: 1} // the product default
	return h
}

// newClient builds a client on the simulator (or o.BaseURL) with fast
// retries.
func (h *harness) newClient(o erp.Options) *erp.Client {
	h.t.Helper()
	if o.BaseURL == "" {
		o.BaseURL = h.srv.URL
	}
	if o.Username == "" {
		o.Username, o.Password = "erpsync", "erpsync-demo-password"
	}
	if o.BackoffBase == 0 {
		o.BackoffBase, o.BackoffMax = 5*time.Millisecond, 50*time.Millisecond
	}
	c, err := erp.New(o)
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (h *harness) run(stream string) sync.Result {
	h.t.Helper()
	return h.runKind(stream, h.runner.Run)
}

// follow makes one follow run of a stream.
func (h *harness) follow(stream string) sync.Result {
	h.t.Helper()
	return h.runKind(stream, h.runner.Follow)
}

// window makes one window run of a stream.
func (h *harness) window(stream string) sync.Result {
	h.t.Helper()
	return h.runKind(stream, h.runner.Window)
}

// runFunc is a kind of run: Runner.Run or Runner.Follow.
type runFunc func(context.Context, <-chan struct{}, sync.Target, sync.Stream, func(string, sync.Progress)) []sync.Result

func (h *harness) runKind(stream string, run runFunc) sync.Result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return h.runCtx(ctx, stream, run)
}

// runCtx runs a stream with ctx, which the test may cancel mid-run.
func (h *harness) runCtx(ctx context.Context, stream string, run runFunc) sync.Result {
	h.t.Helper()
	s, ok := catalog.Lookup(stream)
	if !ok {
		h.t.Fatalf("no stream %s", stream)
	}
	return run(ctx, nil, h.target(), s, nil)[0]
}

// target is the simulator as one source with one login.
func (h *harness) target() sync.Target {
	return sync.Target{Source: h.source, Logins: []sync.Login{{Name: "erpsync", Client: h.client}}, PageSize: h.pages,
		Prefixes: h.prefixes, Settings: h.settings, DriftStop: h.driftStop, WindowPages: h.windowPages}
}

func (h *harness) mustRun(stream string) sync.Result {
	h.t.Helper()
	res := h.run(stream)
	if res.Err != nil || res.Status != model.StatusSucceeded {
		h.t.Fatalf("%s: status %s: %v", stream, res.Status, res.Err)
	}
	return res
}

// refuseInvoicePage makes the simulator answer the n-th invoice page
// asked for from now on with 403: a sweep without prefetch then fails
// after n-1 pages. SetHook(nil) ends it.
func (h *harness) refuseInvoicePage(n int32) {
	var calls atomic.Int32
	h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/sales/api/invoices/list/" && calls.Add(1) == n {
			w.WriteHeader(http.StatusForbidden)
			return true
		}
		return false
	})
}

// text runs a query returning one value, as text.
func (h *harness) text(sql string, args ...any) string {
	h.t.Helper()
	var s *string
	if err := h.pool.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
	if s == nil {
		return "<null>"
	}
	return *s
}

// wantInvoices checks that erp.invoices holds rows rows whose total_bc
// sums exactly to the simulator's.
func (h *harness) wantInvoices(rows int64) {
	h.t.Helper()
	if n := h.count(`SELECT count(*) FROM erp.invoices`); n != rows {
		h.t.Errorf("rows = %d, want %d", n, rows)
	}
	if got := h.text(`SELECT sum(total_bc)::text FROM erp.invoices`); got != h.sim.InvoiceTotal().String() {
		h.t.Errorf("sum(total_bc) = %s, simulator = %s", got, h.sim.InvoiceTotal())
	}
}

func (h *harness) count(sql string, args ...any) int64 {
	h.t.Helper()
	var n int64
	if err := h.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// invoiceGETs counts successful invoice page requests.
func (h *harness) invoiceGETs() int {
	n := 0
	for _, r := range h.sim.Requests() {
		if r.Method == "GET" && r.Path == "/sales/api/invoices/list/" && r.Status == 200 {
			n++
		}
	}
	return n
}

// writeStats returns n_tup_ins and n_tup_upd of the data tables once the
// statistics show at least minInvoiceInserts inserts into erp.invoices
// and no other backend is connected to the database (so every writer
// has flushed its counters).
func (h *harness) writeStats(minInvoiceInserts int64) string {
	h.t.Helper()
	const q = `SELECT string_agg(relname || ' ins=' || n_tup_ins || ' upd=' || n_tup_upd, ', ' ORDER BY relname)
		FROM pg_stat_user_tables WHERE schemaname = 'erp'
		AND relname IN ('invoices', 'currencies', 'currency_rates', 'cashboxes', 'cashbox_reconciliations')`
	h.pool.Reset() // its backends exit and flush their counters too
	var stats string
	testutil.Eventually(h.t, 30*time.Second, 100*time.Millisecond, "table statistics to settle", func() (bool, error) {
		conn, err := pgx.Connect(context.Background(), h.url)
		if err != nil {
			return false, err
		}
		defer conn.Close(context.Background())
		var others, inserts int64
		err = conn.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
			   AND application_name = 'erpsync'),
			(SELECT n_tup_ins FROM pg_stat_user_tables WHERE schemaname = 'erp' AND relname = 'invoices'),
			(`+q+`)`).Scan(&others, &inserts, &stats)
		return others == 0 && inserts >= minInvoiceInserts, err
	})
	return stats
}

const big = "123456789012345678.123456" // float64 keeps ~16 significant digits

func setBig(sim *erpsim.Sim) {
	sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
		inv[3].TotalBC = decimal.RequireFromString(big)
		inv[4].TotalBC = decimal.RequireFromString("-0.000001")
		return inv
	})
}
