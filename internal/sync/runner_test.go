package sync_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestRunner documents the Runner: a run of a stream through a login, its
// lock, its database role, and what it asks of the ERP.
func TestRunner(t *testing.T) {
	t.Parallel()

	t.Run("LocksOutASecondRunOfAStream", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 200, Latency: 30 * time.Millisecond})
		h.runner.Prefetch = 0
		started := make(chan struct{})
		var once atomic.Bool
		h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path == "/sales/api/invoices/list/" && once.CompareAndSwap(false, true) {
				close(started)
			}
			return false
		})
		done := make(chan sync.Result)
		go func() { done <- h.run("invoices") }()
		<-started
		if res := h.run("invoices"); !errors.Is(res.Err, sync.ErrBusy) {
			t.Errorf("second run: %v, want ErrBusy", res.Err)
		}
		if res := <-done; res.Status != model.StatusSucceeded {
			t.Errorf("first run: %s %v", res.Status, res.Err)
		}
		if n := h.count(`SELECT count(*) FROM erp.sync_runs`); n != 1 {
			t.Errorf("sync_runs rows = %d, want 1 (the locked-out run records nothing)", n)
		}
	})

	t.Run("FailsARunBlockedOnALockWithinTheLockTimeout", func(t *testing.T) {
		// A run blocked on a lock another session holds fails within the lock
		// timeout, naming the relation, and releases its stream's lock: the next
		// run succeeds once the other session lets go.
		t.Parallel()
		h := newHarness(t, erpsim.Options{})
		ctx := context.Background()
		pool, err := db.Open(ctx, h.url, db.WithLimits(time.Second, time.Minute, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		h.runner = &sync.Runner{Pool: pool, Prefetch: 1}
		h.mustRun("cashboxes")

		other, err := pgx.Connect(ctx, h.url)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close(ctx)
		tx, err := other.Begin(ctx) // an analyst's LOCK, a VACUUM FULL, another tool's migration
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE erp.cashboxes IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		res := h.run("cashboxes")
		if took := time.Since(start); res.Status != model.StatusFailed || took > 10*time.Second {
			t.Fatalf("run blocked by a lock: %s after %s (%v); want failed within the lock timeout", res.Status, took, res.Err)
		}
		if msg := res.Err.Error(); !strings.Contains(msg, "erp.cashboxes") || !strings.Contains(msg, "lock_timeout") {
			t.Errorf("error %q should name the relation and the lock timeout", msg)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		h.mustRun("cashboxes")
	})

	t.Run("RunsEveryStreamAsALoginWithTheRuntimeRoleOnly", func(t *testing.T) {
		// A login role that owns nothing and is only a member of erpsync_runtime
		// checks the schema and runs every stream; it cannot change the schema.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 120, SlashIDs: true})
		ctx := context.Background()
		pool := testdb.PoolAs(t, h.url, testdb.Role(t, "erpsync_runtime"))
		if err := db.EnsureSchema(ctx, pool, false, "", nil); err != nil {
			t.Fatalf("the runtime role cannot check the schema: %v", err)
		}
		h.runner = &sync.Runner{Pool: pool, Prefetch: 1}
		for _, s := range catalog.Names() {
			h.mustRun(s)
		}
		h.mustRun("invoices") // an ordinary sweep after the bulk load
		for _, ddl := range []string{`CREATE TABLE erp.x (id int)`, `ALTER TABLE erp.invoices ADD COLUMN x int`, `DROP TABLE erp.sweep_seen`, `CREATE ROLE x`} {
			if _, err := pool.Exec(ctx, ddl); err == nil || !strings.Contains(err.Error(), "denied") && !strings.Contains(err.Error(), "must be owner") {
				t.Errorf("%s as the runtime role: %v, want it refused", ddl, err)
			}
		}
	})

	t.Run("NamesEveryCauseOfARefusedRun", func(t *testing.T) {
		// A run the ERP refuses (403) fails with every cause the reference
		// gives, in its error and in erp.sync_runs, as probe says it.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 10})
		h.sim.SetRouteStatus("/accounts/api/journal-entries/", http.StatusForbidden)
		res := h.run("journal_entries")
		want := "lacks accounts.journal.view, or the ERP's licence does not cover the route, or the login's company or branch context cannot reach it"
		if res.Status != model.StatusFailed || res.Err == nil || !strings.Contains(res.Err.Error(), want) {
			t.Fatalf("a refused run: %s %v, want it failed naming %q", res.Status, res.Err, want)
		}
		if got := h.text(`SELECT error FROM erp.sync_runs WHERE stream = 'journal_entries'`); !strings.Contains(got, want) {
			t.Errorf("erp.sync_runs.error = %q, want it to name the causes", got)
		}
	})

	t.Run("SendsTheERPNoWriteButALoginAndARevoke", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 60})
		for _, s := range catalog.Names() {
			h.mustRun(s)
		}
		if err := h.client.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		var posts []string
		for _, r := range h.sim.Requests() {
			if r.Method != http.MethodGet {
				posts = append(posts, r.Method+" "+r.Path)
			}
		}
		for _, p := range posts {
			if p != "POST /api/auth/token/" && p != "POST /api/auth/revoke/" {
				t.Errorf("erpsync sent a write: %s", p)
			}
		}
		if len(posts) < 2 || h.sim.Revocations() != 1 {
			t.Errorf("want a login and a revoke, got %v (revocations %d)", posts, h.sim.Revocations())
		}
	})

	t.Run("SyncsExactlyThroughRateLimitsServerErrorsAndExpiredTokens", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, erpsim.Options{
			Invoices: 1000, TokenTTL: 2 * time.Second, Latency: 20 * time.Millisecond,
			Faults: erpsim.Faults{RateLimitEvery: 6, RetryAfter: time.Second, ServerErrorEvery: 7, DropEvery: 11},
		})
		setBig(h.sim)
		// Every 9th invoice page, the ERP forgets all tokens (as if they expired).
		var pages atomic.Int32
		h.sim.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path == "/sales/api/invoices/list/" && pages.Add(1)%9 == 0 {
				h.sim.ExpireTokens()
			}
			return false
		})
		h.client = h.newClient(erp.Options{MaxAttempts: 10})
		h.mustRun("invoices")
		h.wantInvoices(1000)
		// Every 429 was honoured: the next request came a full Retry-After later.
		reqs := h.sim.Requests()
		var limited, logins, unauthorized int
		for i, r := range reqs {
			switch {
			case r.Status == http.StatusUnauthorized:
				unauthorized++
			case r.Path == "/api/auth/token/":
				logins++
			}
			if r.Status != http.StatusTooManyRequests {
				continue
			}
			limited++
			for _, n := range reqs[i+1:] {
				if n.Path == r.Path && n.RawQuery == r.RawQuery {
					if gap := n.At.Sub(r.At); gap < time.Second {
						t.Errorf("retried %s %v after a 429 with Retry-After 1s", r.Path, gap)
					}
					break
				}
			}
		}
		if limited == 0 || unauthorized == 0 || logins < 2 {
			t.Errorf("chaos did not happen: %d rate limits, %d 401s, %d logins", limited, unauthorized, logins)
		}
	})

	t.Run("ReadsUnderAnInstallationsOwnPrefixAndTokenStatus", func(t *testing.T) {
		// The messaging channel is read under the installation's own prefix, and
		// a token endpoint answering 201 is a login like 200.
		t.Parallel()
		h := newHarness(t, erpsim.Options{MessagingPrefix: "/chat", TokenStatus: http.StatusCreated})
		h.prefixes = map[string]string{"messaging": "/chat"}
		for _, s := range []string{"messaging_conversations", "messaging_stats", "invoices"} {
			h.mustRun(s)
		}
		if n := h.count(`SELECT count(*) FROM erp.messaging_conversations`); n == 0 {
			t.Error("no conversation read under /chat")
		}
		for _, r := range h.sim.Requests() {
			if strings.HasPrefix(r.Path, "/messaging/") {
				t.Errorf("read %s: the installation serves messaging under /chat", r.Path)
			}
		}
	})
}
