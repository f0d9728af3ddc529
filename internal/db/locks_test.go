package db_test

import (
	"context"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestLockHeld documents db.LockHeld, which names the session holding a
// stream's lock for the run that found it taken: by pid, role and
// application, and whether its role is erpsync's, judged by the role
// alone since any login may call itself "erpsync".
func TestLockHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.New(t)
	admin := testdb.ObserverPool(t, url)
	runtime := testdb.PoolAs(t, url, testdb.Role(t, "erpsync_runtime"))

	held := func(t *testing.T, asker db.Querier, kind model.RunKind) *db.LockHeldError {
		t.Helper()
		e := db.LockHeld(ctx, asker, "default", "invoices", kind)
		if e == nil {
			t.Fatal("no error")
		}
		return e
	}

	t.Run("NamesAHolderOfAnotherRoleAsNoErpsyncProcessWhateverItsApplication", func(t *testing.T) {
		// A login that is none of erpsync's roles, which may take the lock
		// where the roles script's revoke is missing, calls itself erpsync.
		alice := testdb.LockTaker(t, url)
		pid, _ := testdb.HoldStreamLock(t, url, alice, "erpsync", "default", "invoices", model.KindSweep)
		e := held(t, runtime, model.KindSweep)
		if h := e.Holder; h == nil || uint32(h.PID) != pid || h.Role != alice || h.Application != "erpsync" || h.Erpsync || !h.Connected.IsZero() {
			t.Errorf("holder as the runtime login sees it: %+v, want pid %d, role %s, application erpsync, not erpsync's, no time of connection", h, pid, alice)
		}
		for _, want := range []string{"held by pid", alice, `application "erpsync"`, "not an erpsync process"} {
			if !strings.Contains(e.Error(), want) {
				t.Errorf("%q does not say %q", e.Error(), want)
			}
		}
		// The follow runs' lock is another key: free.
		if e := held(t, runtime, model.KindFollow); e.Holder != nil || !strings.Contains(e.Error(), "let go") {
			t.Errorf("the follow lock: %v, want no holder", e)
		}
	})

	t.Run("NamesTheRuntimeAndOwnerRolesAndTheAskersOwnAsErpsync", func(t *testing.T) {
		for _, c := range []struct {
			what, holder string
			asker        db.Querier
			erpsync      bool
		}{
			{"another runtime login", testdb.Role(t, "erpsync_runtime"), runtime, true},
			{"the schema's owner", testdb.Owner, runtime, true},
			{"a superuser, to the runtime login", "", runtime, false},
			{"a superuser, to itself", "", admin, true},
		} {
			t.Run(c.what, func(t *testing.T) {
				pid, _ := testdb.HoldStreamLock(t, url, c.holder, "psql", "default", "invoices", model.KindFollow)
				h := held(t, c.asker, model.KindFollow).Holder
				if h == nil || uint32(h.PID) != pid || h.Erpsync != c.erpsync {
					t.Errorf("holder %+v, want pid %d, erpsync's = %v", h, pid, c.erpsync)
				}
				if c.asker == admin && (h == nil || h.Connected.IsZero()) {
					t.Errorf("a superuser asking does not see when the holder connected: %+v", h)
				}
			})
		}
	})
}
