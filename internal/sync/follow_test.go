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
	{"OldestFirstByPosition", erpsim.OrderOldestFirst, erpsim.CursorPosition},
	{"OldestFirstByLastKey", erpsim.OrderOldestFirst, erpsim.CursorLastKey},
	{"NewestFirstByPosition", erpsim.OrderNewestFirst, erpsim.CursorPosition},
	{"NewestFirstByLastKey", erpsim.OrderNewestFirst, erpsim.CursorLastKey},
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

// TestFollowRun documents the follow run: what is new in a list kept in a
// strict order of ids since the last read, read without missing a record;
// where it cannot prove that, a complete sweep in the same run, saying why.
func TestFollowRun(t *testing.T) {
	t.Parallel()

	t.Run("MissesNothingWhateverTheListsShape", func(t *testing.T) {
		t.Parallel()
		for _, sh := range shapes {
			t.Run(sh.name, func(t *testing.T) {
				t.Parallel()

				t.Run("ReadsOneNewInvoiceInAtMostThreeRequestsAndNothingNewInOne", func(t *testing.T) {
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

				t.Run("FollowsFromTheFirstLoadOn", func(t *testing.T) {
					// The first load is the first of the sweeps that learn the
					// list's order: the follow run after it reads what is new,
					// not the whole list again.
					t.Parallel()
					h := newHarness(t, erpsim.Options{Invoices: 230, PageSizeCap: 50, ListOrder: sh.order, CursorKind: sh.cursor})
					h.mustRun("invoices")
					if got := h.text(`SELECT list_order FROM erp.stream_freshness WHERE stream = 'invoices'`); got != wantOrder(sh) {
						t.Fatalf("after the first load the list's order is %s, want %s", got, wantOrder(sh))
					}
					added := h.sim.AddInvoices(3)
					h.sim.ResetRequests()
					if res := h.followMarksNothing(); res.Swept != "" || res.Stats.Inserted != 3 {
						t.Errorf("the follow after the first load: %+v, want the 3 new invoices followed", res)
					}
					if n := h.sim.RequestCount(invoicesRoute); n > 3 {
						t.Errorf("the follow after the first load asked %d pages, want at most 3", n)
					}
					h.wantListed("the new invoices", added)
					h.sweepExact()
				})

				t.Run("ReadsMoreNewInvoicesThanAPage", func(t *testing.T) {
					t.Parallel()
					h := followHarness(t, sh)
					added := h.sim.AddInvoices(120)
					if res := h.followMarksNothing(); res.Swept != "" || res.Stats.Inserted != 120 {
						t.Errorf("120 new invoices: %+v", res)
					}
					h.wantListed("the new invoices", added)
					h.sweepExact()
				})

				t.Run("ReadsInvoicesIssuedWhileItReads", func(t *testing.T) {
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
					t.Run(fmt.Sprintf("MissesNothingAfter%dDeletionsBeforeWhereItStands", n), func(t *testing.T) {
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

				t.Run("MissesNothingWhenTheLastPageReadIsDeleted", func(t *testing.T) {
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

				t.Run("SweepsWhenTheERPRefusesItsCursorAndSaysWhy", func(t *testing.T) {
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

				t.Run("LeavesChangesToOldInvoicesToTheNextCompleteSweep", func(t *testing.T) {
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

				// A window's size is learnt from where every kind of run
				// changed records, follow runs too: a change on the newest
				// page is noted as 0 pages from the newest end, whichever
				// end of the list that is.
				t.Run("NotesHowFarFromTheNewestEndItChangedARecord", func(t *testing.T) {
					t.Parallel()
					h := followHarness(t, sh)
					h.sim.ChangeInvoices(func(v *erpsim.Invoice) { v.TotalBC = decimal.RequireFromString("31.41") }, newest(h, 0).ID)
					if res := h.followMarksNothing(); res.Stats.Updated != 1 {
						t.Fatalf("the follow run wrote %+v, want the newest invoice's change", res.Stats)
					}
					got := h.text(`SELECT coalesce(string_agg(coalesce(pages_from_end::text, 'unplaced') || ':' || changes, ','), 'none')
						FROM erp.change_positions WHERE kind = 'follow'`)
					if got != "0:1" {
						t.Errorf("the follow run's changes are noted as %s (pages from the end:changes), want 0:1", got)
					}
				})

				t.Run("MissesNothingWhenARecordIsDeletedOnAPageItHasRead", func(t *testing.T) {
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

				t.Run("MissesNothingWhenKilledAtAnyRequest", func(t *testing.T) {
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
	})

	t.Run("OfANewestFirstList", func(t *testing.T) {
		// A follow of a list read newest first stops at the first page that ends
		// with a record the warehouse stored, unchanged, by the end of the last
		// complete read: every record after it is older and was read then.
		t.Parallel()
		newestFirst := shape{"NewestFirstByPosition", erpsim.OrderNewestFirst, erpsim.CursorPosition}

		t.Run("StopsAtTheFirstPageEndingWithARecordStoredUnchanged", func(t *testing.T) {
			t.Parallel()
			h := followHarness(t, newestFirst)
			added := h.sim.AddInvoices(60) // page 1: 50 new; page 2: 10 new, 40 stored
			h.sim.ResetRequests()
			res := h.followMarksNothing()
			if res.Swept != "" || res.Stats.Inserted != 60 {
				t.Errorf("60 new invoices: %+v", res)
			}
			// Two pages read, page 2 ending with an invoice stored unchanged,
			// and page 1 asked for again (the second look).
			if n := h.sim.RequestCount(invoicesRoute); n != 3 {
				t.Errorf("the follow asked %d pages, want 3: two read (page 2 ends with an invoice stored unchanged), one second look", n)
			}
			h.wantListed("the new invoices", added)
		})

		t.Run("CountsAsReadWhatTheLastCompleteSweepStoredAfterTheLastFollow", func(t *testing.T) {
			t.Parallel()
			h := followHarness(t, newestFirst)
			h.mustFollow() // the last follow, before the sweep below
			h.sim.AddInvoices(50)
			h.mustRun("invoices") // stores them: page 1 after it ends with one
			h.sim.ResetRequests()
			if res := h.followMarksNothing(); res.Swept != "" || res.Stats.Inserted != 0 {
				t.Errorf("nothing new: %+v", res)
			}
			if n := h.sim.RequestCount(invoicesRoute); n != 1 {
				t.Errorf("the follow asked %d pages, want 1: page 1 ends with an invoice the last complete sweep stored", n)
			}
		})

		t.Run("ReadsOnPastAPageEndingWithARecordChangedSince", func(t *testing.T) {
			t.Parallel()
			h := followHarness(t, newestFirst)
			h.sim.AddInvoices(60)
			// The last invoice of page 2 (the 40th stored one) changes.
			last := h.sim.Invoices()[99].ID
			h.sim.ChangeInvoices(func(v *erpsim.Invoice) { v.TotalBC = decimal.RequireFromString("31.41") }, last)
			h.sim.ResetRequests()
			res := h.followMarksNothing()
			if res.Swept != "" || res.Stats.Inserted != 60 || res.Stats.Updated != 1 {
				t.Errorf("60 new invoices and one changed: %+v", res)
			}
			// Three pages read, two asked for again (the second look).
			if n := h.sim.RequestCount(invoicesRoute); n != 5 {
				t.Errorf("the follow asked %d pages, want 5: three read (page 2 ends with a changed invoice, page 3 with one unchanged), two second looks", n)
			}
		})
	})

	t.Run("OfAnOldestFirstList", func(t *testing.T) {
		// A follow of a list read oldest first starts at the last non-empty page
		// read (its anchor), which must begin with an id the warehouse holds and
		// no higher than the highest the login read.
		t.Parallel()

		t.Run("ProvesContinuityFromAPageBeginningWithTheHighestIDRead", func(t *testing.T) {
			t.Parallel()
			// 201 invoices in pages of 50: the last page holds the highest
			// id alone.
			h := newHarness(t, erpsim.Options{Invoices: 201, PageSizeCap: 50})
			h.mustRun("invoices")
			h.mustRun("invoices")
			h.sim.ResetRequests()
			if res := h.followMarksNothing(); res.Swept != "" || res.Stats.Inserted != 0 {
				t.Errorf("nothing new: %+v", res)
			}
			if n := h.sim.RequestCount(invoicesRoute); n != 1 {
				t.Errorf("the follow asked %d pages, want 1: the anchor's page begins with the highest id read, which proves continuity", n)
			}
			added := h.sim.AddInvoices(3)
			if res := h.followMarksNothing(); res.Swept != "" || res.Stats.Inserted != 3 {
				t.Errorf("three new invoices: %+v", res)
			}
			h.wantListed("the new invoices", added)
		})
	})

	t.Run("ProvesWhatItRead", func(t *testing.T) {
		// Every page a follow reads must keep the list's order; a follow whose
		// second look differed is made again (a few times) before the run sweeps.
		t.Parallel()
		oldestFirst := shape{"OldestFirstByPosition", erpsim.OrderOldestFirst, erpsim.CursorPosition}

		t.Run("SweepsWhenAPageBreaksTheListsOrder", func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, erpsim.Options{Invoices: 230, PageSizeCap: 50})
			late := h.sim.Invoices()[100]
			h.sim.DeleteInvoices(late.ID)
			h.mustRun("invoices")
			h.mustRun("invoices")
			// The ERP lists a record with an id from the middle of the list
			// last: the anchor's page is no longer ascending.
			h.sim.MutateInvoices(func(cur []erpsim.Invoice) []erpsim.Invoice { return append(cur, late) })
			res := h.followMarksNothing()
			if !strings.Contains(res.Swept, "out of the list's ascending order") {
				t.Errorf("a follow meeting a page out of order should sweep, saying so; swept because %q", res.Swept)
			}
			h.wantListed("the record listed out of order", []erpsim.Invoice{late})
		})

		t.Run("SweepsWhenTheAnchorsPageBeginsWithARecordTheWarehouseDoesNotHold", func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, erpsim.Options{Invoices: 230, PageSizeCap: 50})
			late := h.sim.Invoices()[100]
			h.sim.DeleteInvoices(late.ID)
			h.mustRun("invoices")
			h.mustRun("invoices")
			// The ERP lists a record with an id below the highest read first
			// on the anchor's page (from position 200): nothing proves what
			// came before it was read.
			h.sim.MutateInvoices(func(cur []erpsim.Invoice) []erpsim.Invoice { return slices.Insert(cur, 200, late) })
			res := h.followMarksNothing()
			if res.Swept == "" {
				t.Errorf("a follow from an anchor page beginning with a record the warehouse does not hold followed: %+v", res)
			}
			h.wantListed("the record the warehouse did not hold", []erpsim.Invoice{late})
		})

		t.Run("IsMadeAgainNotSweptWhenASecondLookDifferedOnce", func(t *testing.T) {
			t.Parallel()
			h := followHarness(t, oldestFirst)
			added := h.sim.AddInvoices(120)
			// A record of the anchor's page, the first the follow reads, is
			// deleted once it is read: the first record of the next page moves
			// onto it, unread, and the second look finds it.
			inv := h.sim.Invoices()
			victim := inv[len(inv)-len(added)-5].ID
			h.sim.SetRouteHook(invoicesRoute, func(n int) {
				if n == 2 {
					h.sim.DeleteInvoices(victim)
				}
			})
			res := h.followMarksNothing()
			h.sim.SetRouteHook(invoicesRoute, nil)
			if res.Swept != "" {
				t.Errorf("a follow whose second look differed once swept because %q; it should follow again", res.Swept)
			}
			h.wantListed("the new invoices after a follow made again", added)
		})
	})

	t.Run("GivesUpOnAListThatChangesUnderEverySecondLook", func(t *testing.T) {
		t.Parallel()
		h := followHarness(t, shapes[0])
		added := h.sim.AddInvoices(120)
		// Every other new invoice is held back, and given back to the list at
		// its place, one at every request, lowest first: each lands behind the
		// pages already read, so every second look finds a record the follow
		// did not read.
		var (
			mu   gosync.Mutex
			held []erpsim.Invoice
		)
		h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
			return slices.DeleteFunc(inv, func(v erpsim.Invoice) bool {
				back := v.ID >= added[0].ID && (v.ID-added[0].ID)%2 == 1
				if back {
					held = append(held, v)
				}
				return back
			})
		})
		h.sim.SetRouteHook(invoicesRoute, func(n int) {
			mu.Lock()
			defer mu.Unlock()
			if len(held) == 0 {
				return
			}
			back := held[0]
			held = held[1:]
			h.sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
				at, _ := slices.BinarySearchFunc(inv, back.ID, func(v erpsim.Invoice, id int64) int { return int(v.ID - id) })
				return slices.Insert(inv, at, back)
			})
		})
		res := h.mustFollow()
		h.sim.SetRouteHook(invoicesRoute, nil)
		if want := "the list changed under every second look (4 follows)"; !strings.HasPrefix(res.Swept, want) {
			t.Errorf("a follow of a list that changed under every second look: swept %q, want %q", res.Swept, want)
		}
		// The sweep read a list still changing; once it holds still, the
		// next sweep leaves the warehouse exact.
		h.mustRun("invoices")
		h.wantExact()
	})

	t.Run("LeavesTheListToASweepUnderWay", func(t *testing.T) {
		// A follow run that cannot follow sweeps; when another run is sweeping
		// the list, it leaves the list to that sweep: it never abandons a sweep
		// under way, and it records no follow, having read nothing.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 230, PageSizeCap: 50, ListOrder: erpsim.OrderUnordered})
		h.mustRun("invoices")
		h.mustRun("invoices")
		added := h.sim.AddInvoices(3)
		var followed sync.Result
		done := make(chan struct{})
		h.sim.SetRouteHook(invoicesRoute, func(n int) {
			if n != 2 {
				return
			}
			h.sim.SetRouteHook(invoicesRoute, nil)
			followed = h.follow("invoices") // the sweep is on its second page
			close(done)
		})
		swept := h.mustRun("invoices")
		<-done
		if followed.Err != nil || followed.Status != model.StatusSucceeded {
			t.Fatalf("a follow run beside a sweep under way: %s %v", followed.Status, followed.Err)
		}
		if followed.Swept == "" {
			t.Errorf("a follow run of an unordered list says no reason to sweep: %+v", followed)
		}
		if !followed.FollowedAt.IsZero() || followed.Stats.Pages != 0 {
			t.Errorf("a follow run that left the list to a sweep under way recorded a follow or read pages: %+v", followed)
		}
		if n := h.count(`SELECT count(*) FROM erp.sync_follow WHERE stream = 'invoices' AND last_follow_at IS NOT NULL`); n != 0 {
			t.Errorf("%d follows recorded, want none: the follow run read nothing", n)
		}
		if swept.Stats.Inserted != 3 || swept.FreshAt.IsZero() {
			t.Errorf("the sweep under way did not complete with the new invoices: %+v", swept)
		}
		h.wantListed("new invoices, read by the sweep under way", added)
		h.wantExact()
	})

	t.Run("SweepsWhenItCannotProveContinuityAndRecordsWhy", func(t *testing.T) {
		// A follow run that cannot prove continuity sweeps the list in the same
		// run, says why, and records the follow run with that reason.
		t.Parallel()
		h := newHarness(t, erpsim.Options{Invoices: 120, PageSizeCap: 50, ListOrder: erpsim.OrderUnordered})
		h.mustRun("invoices")
		h.mustRun("invoices")
		added := h.sim.AddInvoices(2)
		res := h.followMarksNothing()
		if res.Swept == "" || res.FreshAt.IsZero() || res.Stats.Inserted != 2 {
			t.Errorf("a follow run of an unordered list should be a complete sweep saying why: %+v", res)
		}
		if res.FollowedAt.IsZero() {
			t.Errorf("a follow run that swept recorded no follow: %+v", res)
		}
		if got := h.text(`SELECT coalesce(last_follow_swept, '') FROM erp.sync_follow WHERE stream = 'invoices'`); got != res.Swept {
			t.Errorf("the follow run is recorded as swept because %q, want %q", got, res.Swept)
		}
		h.wantListed("new invoices", added)
	})

	t.Run("SweepsAListInNoStrictOrder", func(t *testing.T) {
		// A list in no strict order of ids is swept on every run, never followed.
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
	})

	t.Run("MissesRecordsAddedBelowItWhichTheNextSweepCounts", func(t *testing.T) {
		// A list whose ids are not given in order of creation: a record added
		// below the highest id read is missed by follows; the next complete sweep
		// finds it, counts it, and the list is swept from then on, until reset.
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
		swept := h.mustRun("invoices")
		h.wantExact()
		if note := h.text(`SELECT coalesce(note, '') FROM erp.sync_runs WHERE id = $1`, swept.RunID); !strings.Contains(note, "1 records at or below the highest id follow runs had read") || !strings.Contains(note, "erpsync reset invoices") {
			t.Errorf("the sweep that demotes the list should say so, and how to undo it: %q", note)
		}
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
	})

	t.Run("FollowsEachLoginsOwnList", func(t *testing.T) {
		// Two logins of two branches, each listing its branch's invoices: each
		// follows its own list, and a new invoice of one branch is read by that
		// branch's login alone.
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
	})

	t.Run("FollowsJournalEntriesByStartAndLength", func(t *testing.T) {
		// Journal entries page by start/length: followed oldest first from the
		// anchor's start, newest first from the first page, as invoices are.
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
	})

	t.Run("GoesOnBesideAKilledSweep", func(t *testing.T) {
		// A sweep killed while follow runs read new invoices: the follows go on
		// beside it (their lock is their own), the next sweep resumes it, and
		// the warehouse is exact.
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
	})
}

type missedObserver struct {
	*driftObserver
	n int64
}

func (o *missedObserver) FollowMissed(_, _, _ string, n int64) { o.n += n }
