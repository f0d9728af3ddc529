package sync_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

// shape is how a paged list is served: its order and what its cursors
// encode. A follow must miss nothing whichever it is.
type shape struct {
	name   string
	order  erpsim.ListOrder
	cursor erpsim.CursorKind
}

var shapes = []shape{
	{"oldest first by position", erpsim.OrderOldestFirst, erpsim.CursorPosition},
	{"oldest first by last key", erpsim.OrderOldestFirst, erpsim.CursorLastKey},
	{"newest first by position", erpsim.OrderNewestFirst, erpsim.CursorPosition},
	{"newest first by last key", erpsim.OrderNewestFirst, erpsim.CursorLastKey},
}

const invoicesRoute = "/sales/api/invoices/list/"

// followHarness is an ERP of 230 invoices served in shape, in pages of
// 50, whose list two complete sweeps have read: its order is known, and
// follow runs follow it.
func followHarness(t *testing.T, sh shape) *harness {
	t.Helper()
	h := newHarness(t, erpsim.Options{Invoices: 230, PageSizeCap: 50, ListOrder: sh.order, CursorKind: sh.cursor})
	h.mustRun("invoices")
	h.mustRun("invoices")
	if got := h.text(`SELECT list_order FROM erp.stream_freshness WHERE stream = 'invoices'`); got != wantOrder(sh) {
		t.Fatalf("after two sweeps the list's order is %s, want %s", got, wantOrder(sh))
	}
	return h
}

func wantOrder(sh shape) string {
	if sh.order == erpsim.OrderNewestFirst {
		return "descending"
	}
	return "ascending"
}

// mustFollow makes one follow run, which must succeed.
func (h *harness) mustFollow() sync.Result {
	h.t.Helper()
	res := h.follow("invoices")
	if res.Err != nil || res.Status != model.StatusSucceeded {
		h.t.Fatalf("follow: %s %v", res.Status, res.Err)
	}
	return res
}

// deleted is how many rows are marked deleted.
func (h *harness) deleted() int64 {
	return h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NOT NULL`)
}

// followMarksNothing makes a follow run and checks that it marked no row
// deleted, unless it swept; it returns its result.
func (h *harness) followMarksNothing() sync.Result {
	h.t.Helper()
	before := h.deleted()
	res := h.mustFollow()
	if after := h.deleted(); res.Swept == "" && after != before {
		h.t.Errorf("a follow run marked %d rows deleted", after-before)
	}
	return res
}

// wantListed checks that the warehouse holds the invoices of ids, live.
func (h *harness) wantListed(what string, invs []erpsim.Invoice) {
	h.t.Helper()
	ids := make([]string, len(invs))
	for i, v := range invs {
		ids[i] = fmt.Sprint(v.ID)
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices WHERE id = ANY($1) AND deleted_at IS NULL`, ids); n != int64(len(ids)) {
		h.t.Errorf("%s: %d of %d invoices in the warehouse", what, n, len(ids))
	}
}

// wantExact checks that the warehouse's live invoices are exactly the
// ERP's, to the digit, and that nothing the ERP lists is marked deleted.
func (h *harness) wantExact() {
	h.t.Helper()
	var want []string
	for _, v := range h.sim.Invoices() {
		want = append(want, fmt.Sprint(v.ID))
	}
	slices.Sort(want)
	got := strings.Split(h.text(`SELECT coalesce(string_agg(id, ',' ORDER BY id), '') FROM erp.invoices WHERE deleted_at IS NULL`), ",")
	if !slices.Equal(got, want) {
		h.t.Errorf("live invoices: %d, the ERP lists %d", len(got), len(want))
	}
	if sum := h.text(`SELECT coalesce(sum(total_bc), 0)::text FROM erp.invoices WHERE deleted_at IS NULL`); !decimal.RequireFromString(sum).Equal(h.sim.InvoiceTotal()) {
		h.t.Errorf("sum(total_bc) of live invoices %s, the ERP's %s", sum, h.sim.InvoiceTotal())
	}
	if n := h.count(`SELECT count(*) FROM erp.invoices WHERE deleted_at IS NOT NULL AND id = ANY($1)`, want); n != 0 {
		h.t.Errorf("%d invoices the ERP lists are marked deleted", n)
	}
}

// sweepExact makes a complete sweep and checks the warehouse is exact.
func (h *harness) sweepExact() {
	h.t.Helper()
	h.mustRun("invoices")
	h.wantExact()
}

func TestFollowRuns(t *testing.T) {
	t.Parallel()
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()

			t.Run("reads one new invoice in at most three requests, and nothing new in one", func(t *testing.T) {
				t.Parallel()
				h := followHarness(t, sh)
				h.sim.ResetRequests()
				if res := h.followMarksNothing(); res.Swept != "" || res.Stats.Inserted != 0 {
					t.Errorf("nothing new: %+v", res)
				}
				if n := h.sim.RequestCount(invoicesRoute); n != 1 {
					t.Errorf("a follow with nothing new asked %d pages, want 1", n)
				}
				added := h.sim.AddInvoices(1)
				h.sim.ResetRequests()
				if res := h.followMarksNothing(); res.Swept != "" || res.Stats.Inserted != 1 {
					t.Errorf("one new invoice: %+v", res)
				}
				// Oldest first the new invoice fits the anchor's page (the
				// last, 30 of 50); newest first the first page ends with
				// an invoice the warehouse had: one request either way.
				if n := h.sim.RequestCount(invoicesRoute); n != 1 {
					t.Errorf("a follow with one new invoice asked %d pages, want 1", n)
				}
				h.wantListed("the new invoice", added)
				h.sweepExact()
			})

			t.Run("reads more new invoices than a page", func(t *testing.T) {
				t.Parallel()
				h := followHarness(t, sh)
				added := h.sim.AddInvoices(120)
				if res := h.followMarksNothing(); res.Swept != "" || res.Stats.Inserted != 120 {
					t.Errorf("120 new invoices: %+v", res)
				}
				h.wantListed("the new invoices", added)
				h.sweepExact()
			})

			t.Run("reads invoices issued while it reads", func(t *testing.T) {
				t.Parallel()
				h := followHarness(t, sh)
				first := h.sim.AddInvoices(60)
				var during []erpsim.Invoice
				var mu gosync.Mutex
				h.sim.SetRouteHook(invoicesRoute, func(n int) {
					if n == 2 {
						mu.Lock()
						during = h.sim.AddInvoices(7)
						mu.Unlock()
					}
				})
				h.followMarksNothing()
				h.sim.SetRouteHook(invoicesRoute, nil)
				h.followMarksNothing()
				mu.Lock()
				h.wantListed("invoices issued while a follow read, after the next follow", append(first, during...))
				mu.Unlock()
				h.sweepExact()
			})

			for _, n := range []int{10, 60} {
				t.Run(fmt.Sprintf("misses nothing after %d deletions before where it stands", n), func(t *testing.T) {
					t.Parallel()
					h := followHarness(t, sh)
					inv := h.sim.Invoices()
					// The oldest invoices: before the anchor of a list
					// read oldest first, behind the last page read of one
					// read newest first.
					var gone []int64
					for _, v := range inv[:n] {
						if sh.order == erpsim.OrderNewestFirst {
							v = inv[len(inv)-1-len(gone)]
						}
						gone = append(gone, v.ID)
					}
					h.sim.DeleteInvoices(gone...)
					added := h.sim.AddInvoices(3)
					h.followMarksNothing()
					h.wantListed("new invoices after deletions", added)
					h.sweepExact()
				})
			}

			t.Run("misses nothing when the last page read is deleted", func(t *testing.T) {
				t.Parallel()
				h := followHarness(t, sh)
				inv := h.sim.Invoices()
				var gone []int64
				for _, v := range inv[200:] { // the last page in list order
					gone = append(gone, v.ID)
				}
				h.sim.DeleteInvoices(gone...)
				added := h.sim.AddInvoices(2)
				h.followMarksNothing()
				h.wantListed("new invoices after the last page's deletion", added)
				h.sweepExact()
			})

			t.Run("sweeps when the ERP refuses its cursor, and says why", func(t *testing.T) {
				t.Parallel()
				h := followHarness(t, sh)
				h.sim.InvalidateCursors()
				added := h.sim.AddInvoices(2)
				res := h.followMarksNothing()
				if sh.order == erpsim.OrderOldestFirst && !strings.Contains(res.Swept, "refused") {
					t.Errorf("a follow from a refused anchor should sweep, saying so; swept because %q", res.Swept)
				}
				h.wantListed("new invoices after a refused cursor", added)
				h.sweepExact()
			})

			t.Run("leaves changes to old invoices to the next complete sweep", func(t *testing.T) {
				t.Parallel()
				h := followHarness(t, sh)
				inv := h.sim.Invoices()
				old := inv[len(inv)/2].ID
				h.sim.ChangeInvoices(func(v *erpsim.Invoice) { v.TotalBC = decimal.RequireFromString("4242.42") }, old)
				h.followMarksNothing()
				h.sweepExact()
				if got := h.text(`SELECT total_bc::text FROM erp.invoices WHERE id = $1`, fmt.Sprint(old)); got != "4242.42" {
					t.Errorf("the changed invoice is %s after the sweep", got)
				}
			})

			t.Run("misses nothing when a record is deleted on a page it has read", func(t *testing.T) {
				t.Parallel()
				h := followHarness(t, sh)
				added := h.sim.AddInvoices(120)
				// The first page the follow reads: the anchor's (the last
				// page read) oldest first, the first page newest first.
				var victim int64
				if sh.order == erpsim.OrderNewestFirst {
					victim = added[len(added)-5].ID
				} else {
					inv := h.sim.Invoices()
					victim = inv[len(inv)-len(added)-5].ID
				}
				h.sim.SetRouteHook(invoicesRoute, func(n int) {
					if n == 2 { // its first page read, its second asked for
						h.sim.DeleteInvoices(victim)
					}
				})
				h.followMarksNothing()
				h.sim.SetRouteHook(invoicesRoute, nil)
				var still []erpsim.Invoice
				for _, v := range added {
					if v.ID != victim {
						still = append(still, v)
					}
				}
				h.wantListed("new invoices, with one deleted on a page read meanwhile", still)
				h.sweepExact()
			})

			t.Run("misses nothing when killed at any request", func(t *testing.T) {
				t.Parallel()
				h := followHarness(t, sh)
				for k := 1; k <= 4; k++ {
					added := h.sim.AddInvoices(70) // two pages of new
					ctx, cancel := context.WithCancel(context.Background())
					h.sim.SetRouteHook(invoicesRoute, func(n int) {
						if n == k {
							cancel()
						}
					})
					h.runCtx(ctx, "invoices", h.runner.Follow)
					cancel()
					h.sim.SetRouteHook(invoicesRoute, nil)
					// A run killed mid-query loses its connection; its
					// session, and the lock, end a moment later.
					testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, "the killed run's lock to go", func() (bool, error) {
						res := h.follow("invoices")
						if errors.Is(res.Err, sync.ErrBusy) {
							return false, nil
						}
						if res.Err != nil {
							return false, res.Err
						}
						return true, nil
					})
					h.wantListed(fmt.Sprintf("killed at request %d, then followed", k), added)
				}
				h.sweepExact()
			})
		})
	}
}

// A list in no strict order of ids is swept on every run, never followed.
func TestFollowSweepsAnUnorderedList(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 230, PageSizeCap: 50, ListOrder: erpsim.OrderUnordered})
	h.mustRun("invoices")
	h.mustRun("invoices")
	for range 2 {
		h.sim.AddInvoices(3)
		res := h.mustFollow()
		if !strings.Contains(res.Swept, "not in a strict order") || res.FreshAt.IsZero() {
			t.Errorf("a follow of an unordered list should be a complete sweep saying why: %+v", res)
		}
		h.wantExact()
	}
	if got := h.text(`SELECT list_order FROM erp.stream_freshness WHERE stream = 'invoices'`); got != "unordered" {
		t.Errorf("list_order %s, want unordered", got)
	}
}

// A list whose ids are not given in order of creation: a record added
// below the highest id read is missed by follows; the next complete sweep
// finds it, counts it, and the list is swept from then on, until reset.
func TestFollowMissedRecordsAreCounted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 230, PageSizeCap: 50})
	// The ERP will issue a record with an id from the middle of the list.
	late := h.sim.Invoices()[100]
	h.sim.DeleteInvoices(late.ID)
	h.mustRun("invoices")
	h.mustRun("invoices")
	h.mustFollow()
	h.sim.MutateInvoices(func(cur []erpsim.Invoice) []erpsim.Invoice { return slices.Insert(cur, 100, late) })
	if res := h.mustFollow(); res.Stats.Inserted != 0 || res.Swept != "" {
		t.Fatalf("a follow does not see a record below where it stands: %+v", res)
	}
	missed := &missedObserver{driftObserver: &driftObserver{counted: map[string]int64{}}}
	h.runner.Obs = missed
	h.mustRun("invoices")
	h.wantExact()
	if missed.n != 1 {
		t.Errorf("the sweep counted %d missed records, want 1", missed.n)
	}
	if got := h.text(`SELECT list_order FROM erp.stream_freshness WHERE stream = 'invoices'`); got != "unordered" {
		t.Errorf("after missed records the list is %s, want unordered", got)
	}
	if res := h.mustFollow(); !strings.Contains(res.Swept, "missed") {
		t.Errorf("after missed records a follow sweeps: %+v", res)
	}
	h.reset("invoices")
	h.mustRun("invoices")
	h.mustRun("invoices")
	if res := h.mustFollow(); res.Swept != "" {
		t.Errorf("after a reset and two sweeps in order, a follow follows: %+v", res)
	}
}

type missedObserver struct {
	*driftObserver
	n int64
}

func (o *missedObserver) FollowMissed(_, _, _ string, n int64) { o.n += n }

// Two logins of two branches, each listing its branch's invoices: each
// follows its own list, and a new invoice of one branch is read by that
// branch's login alone.
func TestFollowSeveralLogins(t *testing.T) {
	t.Parallel()
	sim := erpsim.New(erpsim.Options{Invoices: 300, PageSizeCap: 40, Users: branchUsers, ListScope: erpsim.ScopeBranch})
	tgt := twoLogins(t, sim)
	pool, _ := testdb.Pool(t)
	runner := &sync.Runner{Pool: pool, Prefetch: 1}
	s, _ := catalog.Lookup("invoices")
	run := func(run runFunc) []sync.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res := run(ctx, nil, tgt, s, nil)
		for _, r := range res {
			if r.Status != model.StatusSucceeded {
				t.Fatalf("%s: %s %v", r.Login, r.Status, r.Err)
			}
		}
		return res
	}
	run(runner.Run)
	run(runner.Run)
	for _, r := range run(runner.Follow) {
		if r.Swept != "" {
			t.Errorf("%s: swept because %s", r.Login, r.Swept)
		}
	}
	added := sim.AddInvoices(5)
	inserted := map[string]int64{}
	for _, r := range run(runner.Follow) {
		inserted[r.Login] = r.Stats.Inserted
	}
	want := map[string]int64{}
	for _, v := range added {
		for _, u := range branchUsers {
			for _, b := range sim.InvoicesOfBranch(u.BranchID) {
				if b.ID == v.ID {
					want[u.Username]++
				}
			}
		}
	}
	for _, u := range branchUsers {
		if inserted[u.Username] != want[u.Username] {
			t.Errorf("%s inserted %d new invoices, its branch has %d", u.Username, inserted[u.Username], want[u.Username])
		}
	}
	var n int64
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM erp.sync_follow WHERE stream = 'invoices' AND last_follow_swept IS NULL AND last_follow_at IS NOT NULL`).Scan(&n); err != nil || n != 2 {
		t.Errorf("logins that followed: %d (%v), want 2", n, err)
	}
}

// Journal entries page by start/length: followed oldest first from the
// anchor's start, newest first from the first page, as invoices are.
func TestFollowJournalEntries(t *testing.T) {
	t.Parallel()
	for _, order := range []erpsim.ListOrder{erpsim.OrderOldestFirst, erpsim.OrderNewestFirst} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, erpsim.Options{ListOrder: order})
			h.pages = 10
			h.sim.AddJournalEntries(25)
			h.mustRun("journal_entries")
			h.mustRun("journal_entries")
			h.sim.ResetRequests()
			res := h.follow("journal_entries")
			if res.Err != nil || res.Swept != "" {
				t.Fatalf("follow: %+v", res)
			}
			if n := h.sim.RequestCount("/accounts/api/journal-entries/"); n != 1 {
				t.Errorf("a follow with nothing new asked %d pages, want 1", n)
			}
			added := h.sim.AddJournalEntries(12)
			if res := h.follow("journal_entries"); res.Err != nil || res.Swept != "" || res.Stats.Inserted != 12 {
				t.Errorf("12 new entries: %+v", res)
			}
			ids := make([]string, len(added))
			for i, e := range added {
				ids[i] = e.ID
			}
			if n := h.count(`SELECT count(*) FROM erp.journal_entries WHERE id = ANY($1) AND deleted_at IS NULL`, ids); n != 12 {
				t.Errorf("%d of 12 new entries in the warehouse", n)
			}
			h.mustRun("journal_entries")
			if n, want := h.count(`SELECT count(*) FROM erp.journal_entries WHERE deleted_at IS NULL`), int64(len(h.sim.JournalEntries())); n != want {
				t.Errorf("after a sweep: %d live entries, the ERP lists %d", n, want)
			}
		})
	}
}

// A sweep killed while follow runs read new invoices: the follows go on
// beside it (their lock is their own), the next sweep resumes it, and
// the warehouse is exact.
func TestFollowBesideAKilledSweep(t *testing.T) {
	t.Parallel()
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			h := followHarness(t, sh)
			paid := h.sim.Invoices()[3].ID
			h.sim.ChangeInvoices(func(v *erpsim.Invoice) { v.Status = "paid" }, paid)
			ctx, cancel := context.WithCancel(context.Background())
			var added []erpsim.Invoice
			var followed sync.Result
			done := make(chan struct{})
			h.sim.SetRouteHook(invoicesRoute, func(n int) {
				if n != 2 {
					return
				}
				// The sweep is on its second page: a follow runs beside
				// it, then the sweep is killed at its next request.
				added = h.sim.AddInvoices(4)
				h.sim.SetRouteHook(invoicesRoute, nil)
				followed = h.follow("invoices")
				close(done)
				h.sim.SetRouteHook(invoicesRoute, func(int) { cancel() })
			})
			h.runCtx(ctx, "invoices", h.runner.Run)
			cancel()
			<-done
			h.sim.SetRouteHook(invoicesRoute, nil)
			if followed.Err != nil || followed.Swept != "" {
				t.Fatalf("a follow beside a sweep: %+v", followed)
			}
			h.wantListed("invoices followed beside a sweep", added)
			testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, "the killed sweep's lock to go", func() (bool, error) {
				res := h.run("invoices")
				if errors.Is(res.Err, sync.ErrBusy) {
					return false, nil
				}
				return true, res.Err
			})
			h.wantExact()
			if got := h.text(`SELECT status FROM erp.invoices WHERE id = $1`, fmt.Sprint(paid)); got != "paid" {
				t.Errorf("the old invoice changed before the sweep is %s", got)
			}
		})
	}
}

// A record that moves across a page boundary while a sweep reads (a
// record deleted on a page already read pulls the next one back onto it,
// with position cursors) is missed by that sweep: it is not marked
// deleted, and the next sweep marks only what is gone.
func TestSweepDoesNotDeleteAMovedRecord(t *testing.T) {
	t.Parallel()
	h := newHarness(t, erpsim.Options{Invoices: 230, PageSizeCap: 50})
	h.mustRun("invoices")
	h.mustRun("invoices")
	inv := h.sim.Invoices()
	gone, moved := inv[10].ID, inv[50].ID // on page 1; the first of page 2
	h.sim.SetRouteHook(invoicesRoute, func(n int) {
		if n == 2 { // page 1 read, page 2 about to be: the list shifts
			h.sim.DeleteInvoices(gone)
		}
	})
	res := h.mustRun("invoices")
	h.sim.SetRouteHook(invoicesRoute, nil)
	if got := h.text(`SELECT (deleted_at IS NOT NULL)::text FROM erp.invoices WHERE id = $1`, fmt.Sprint(moved)); got != "false" {
		t.Errorf("invoice %d, still listed but moved while the sweep read, is marked deleted (stats %+v)", moved, res.Stats)
	}
	h.mustRun("invoices")
	h.wantExact()
	if got := h.text(`SELECT (deleted_at IS NOT NULL)::text FROM erp.invoices WHERE id = $1`, fmt.Sprint(gone)); got != "true" {
		t.Errorf("invoice %d, gone, deleted_at set = %s after the next sweep", gone, got)
	}
}
