package testdb

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestAdmin documents Admin, the connection every database test starts from.
func TestAdmin(t *testing.T) {
	// Where a database was promised, a test that cannot reach it fails
	// instead of skipping: a suite whose every database test skipped must not
	// pass there.
	t.Run("FailsInsteadOfSkippingWhereADatabaseWasPromised", func(t *testing.T) {
		if os.Getenv("TESTDB_CHILD") != "" {
			Admin(t) // the child: TEST_DATABASE_URL names no server
			return
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestAdmin$/^FailsInsteadOfSkippingWhereADatabaseWasPromised$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTDB_CHILD=1", "TEST_DATABASE_URL=postgres://postgres@127.0.0.1:1/none?connect_timeout=2")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--- FAIL") || !strings.Contains(string(out), "no Postgres for tests") ||
			strings.Contains(string(out), "--- SKIP") {
			t.Errorf("child with an unreachable TEST_DATABASE_URL: err %v, want a failure saying there is no Postgres:\n%s", err, out)
		}
	})
}

func TestPromised(t *testing.T) {
	t.Run("OnlyInCIOrWithATestDatabaseURL", func(t *testing.T) {
		t.Setenv("TEST_DATABASE_URL", "")
		t.Setenv("CI", "")
		if promised() {
			t.Error("promised without CI or TEST_DATABASE_URL")
		}
		t.Setenv("CI", "true")
		if !promised() {
			t.Error("not promised in CI")
		}
		t.Setenv("CI", "")
		t.Setenv("TEST_DATABASE_URL", "postgres://x")
		if !promised() {
			t.Error("not promised with TEST_DATABASE_URL")
		}
	})
}
