package cli

import (
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testdb"
)

func TestResetAndFollowCommands(t *testing.T) {
	t.Parallel()
	_, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 75, PageSizeCap: 50})
	dbURL := testdb.New(t)
	env := erpEnv(simURL, dbURL, goodPassword, "ERPSYNC_ERP_PAGE_SIZE=50")
	if r := runMain(t, env, "sync", "invoices"); r.code != exitOK {
		t.Fatalf("sync: %s", r)
	}

	t.Run("sync --follow refuses a stream that cannot be followed", func(t *testing.T) {
		r := runMain(t, env, "sync", "--follow", "cashboxes")
		if r.code != exitUsage || !strings.Contains(r.stderr, "cashboxes cannot be followed") {
			t.Errorf("want exit 2 naming cashboxes: %s", r)
		}
	})

	t.Run("sync --follow runs a follow run", func(t *testing.T) {
		r := runMain(t, env, "sync", "--follow", "invoices")
		if r.code != exitOK || !strings.Contains(r.stderr, "kind=follow") {
			t.Errorf("want exit 0 and a follow run in the log: %s", r)
		}
	})

	t.Run("reset asks for confirmation where there is no terminal", func(t *testing.T) {
		r := runMain(t, env, "reset", "invoices")
		if r.code != exitUsage || !strings.Contains(r.stderr, "--yes") {
			t.Errorf("want exit 2 asking for --yes: %s", r)
		}
	})

	t.Run("reset --yes resets, and the next run reads everything", func(t *testing.T) {
		r := runMain(t, env, "reset", "invoices", "--yes")
		if r.code != exitOK || !strings.Contains(r.stdout, "default/invoices (erpsync): reset") {
			t.Fatalf("want exit 0 and the login reset: %s", r)
		}
		r = runMain(t, env, "status", "invoices")
		if r.code != exitOK {
			t.Fatalf("status: %s", r)
		}
	})

	t.Run("reset names an unknown login", func(t *testing.T) {
		r := runMain(t, env, "reset", "invoices", "--login", "nobody", "--yes")
		if r.code != exitUsage || !strings.Contains(r.stderr, "with login nobody") {
			t.Errorf("want exit 2 naming the login: %s", r)
		}
	})
}
