package cli

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestReset documents `erpsync reset`: a stream started over for a login,
// every row and version kept, so that its next run reads everything again.
func TestReset(t *testing.T) {
	t.Parallel()
	_, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 75, PageSizeCap: 50})
	dbURL := testdb.New(t)
	env := erpEnv(simURL, dbURL, goodPassword, "ERPSYNC_ERP_PAGE_SIZE=50")
	if r := runMain(t, env, "sync", "invoices"); r.code != exitOK {
		t.Fatalf("sync: %s", r)
	}
	pool := testdb.ObserverPool(t, dbURL)
	key := model.Key{Source: "default", Stream: "invoices", Login: "erpsync"}
	// knownPages is what lets a sweep skip the pages it was answered
	// before: the login's page digests.
	knownPages := func(t *testing.T) int64 {
		t.Helper()
		var n int64
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM erp.sweep_pages WHERE source = $1 AND stream = $2 AND login = $3`,
			key.Source, key.Stream, key.Login).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := knownPages(t); n == 0 {
		t.Fatalf("no page digest after a sync: the test cannot show that reset forgets them")
	}

	t.Run("AsksForConfirmationWhereThereIsNoTerminal", func(t *testing.T) {
		r := runMain(t, env, "reset", "invoices")
		if r.code != exitUsage || !strings.Contains(r.stderr, "--yes") {
			t.Errorf("want exit 2 asking for --yes: %s", r)
		}
		if reset, err := db.ResetSince(context.Background(), pool, key); err != nil || reset {
			t.Errorf("reset without confirmation: the stream was reset (%v)", err)
		}
	})

	t.Run("ResetsWithYesAndTheNextRunReadsEverything", func(t *testing.T) {
		r := runMain(t, env, "reset", "invoices", "--yes")
		if r.code != exitOK || !strings.Contains(r.stdout, "default/invoices (erpsync): reset") {
			t.Fatalf("want exit 0 and the login reset: %s", r)
		}
		r = runMain(t, env, "status", "invoices")
		if r.code != exitOK {
			t.Fatalf("status: %s", r)
		}
		// The next run reads everything again: nothing marks a page as
		// known, and the stream counts as reset until a sweep completes.
		if reset, err := db.ResetSince(context.Background(), pool, key); err != nil || !reset {
			t.Errorf("after reset --yes: reset since the last complete sweep %v (%v), want true", reset, err)
		}
		if n := knownPages(t); n != 0 {
			t.Errorf("after reset --yes: %d page digests left, want none", n)
		}
		if r := runMain(t, env, "sync", "invoices"); r.code != exitOK {
			t.Fatalf("sync after the reset: %s", r)
		}
		if reset, err := db.ResetSince(context.Background(), pool, key); err != nil || reset {
			t.Errorf("after the next sync: still reset (%v); its sweep read everything and completed", err)
		}
	})

	t.Run("ExitsSeventyFiveNamingTheSessionThatHoldsTheStreamsLock", func(t *testing.T) {
		alice, pid := holdLock(t, dbURL, "invoices")
		r := runMain(t, env, "reset", "invoices", "--yes")
		want := regexp.QuoteMeta("default/invoices: nothing reset: another session holds the stream's lock: ") + heldBy(pid, alice)
		if r.code != exitBusy || !regexp.MustCompile(want).MatchString(r.stderr) {
			t.Errorf("want exit %d saying %s: %s", exitBusy, want, r)
		}
	})

	t.Run("NamesAnUnknownLogin", func(t *testing.T) {
		r := runMain(t, env, "reset", "invoices", "--login", "nobody", "--yes")
		if r.code != exitUsage || !strings.Contains(r.stderr, "with login nobody") {
			t.Errorf("want exit 2 naming the login: %s", r)
		}
	})
}

// holdLock takes the complete sweeps' lock of default/stream in the
// database of dbURL as a login of no erpsync role that calls itself
// erpsync, until the test ends; it returns the login and its session's
// pid.
func holdLock(t *testing.T, dbURL, stream string) (string, uint32) {
	t.Helper()
	alice := testdb.LockTaker(t, dbURL)
	pid, _ := testdb.HoldStreamLock(t, dbURL, alice, "erpsync", "default", stream, model.KindSweep)
	return alice, pid
}

// heldBy matches how a lock's holder that holdLock made is named: its
// pid, role and application, when it connected if the asker may see it,
// and that it is no erpsync process.
func heldBy(pid uint32, role string) string {
	return fmt.Sprintf(`held by pid %d \(role %s, application "erpsync"(, connected since [^)]+)?\), not an erpsync process`, pid, role)
}
