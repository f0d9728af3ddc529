package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestCheck documents `erpsync check`: configuration, database and schema, every
// ERP login and /api/auth/me/, each said to be fine or what is wrong with it.
func TestCheck(t *testing.T) {
	t.Parallel()
	// With the right credentials check exits 0 and says
	// what it verified.
	t.Run("PassesWithTheRightCredentialsSayingWhatItChecked", func(t *testing.T) {
		t.Parallel()
		sim, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 10})
		dbURL := testdb.New(t)
		r := runMain(t, erpEnv(simURL, dbURL, goodPassword), "check")
		if r.code != exitOK {
			t.Fatalf("check: exit %d, want 0\n%s", r.code, r)
		}
		for _, want := range []string{"ok    configuration", "ok    database", "logged in", "/api/auth/me/"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("check output lacks %q\n%s", want, r)
			}
		}
		assertNoSecret(t, r, append([]string{goodPassword}, issuedTokens(sim)...)...)
	})

	// The file is read (a Kubernetes Secret volume is mode 0644 unless told otherwise)
	// and check says so, naming the variable and the file but not the password.
	t.Run("WarnsOfAPasswordFileEveryoneMayRead", func(t *testing.T) {
		t.Parallel()
		sim, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 10})
		dbURL := testdb.New(t)
		pw := filepath.Join(t.TempDir(), "erp-password")
		if err := os.WriteFile(pw, []byte(goodPassword+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(pw, 0o644); err != nil { // whatever the umask
			t.Fatal(err)
		}
		r := runMain(t, erpEnv(simURL, dbURL, "", "ERPSYNC_ERP_PASSWORD_FILE="+pw), "check")
		if r.code != exitOK {
			t.Fatalf("check: exit %d, want 0\n%s", r.code, r)
		}
		if !regexp.MustCompile(`warn\s+configuration: source "default": ERPSYNC_ERP_PASSWORD_FILE: ` + regexp.QuoteMeta(pw) + ` can be read by every user`).MatchString(r.stdout) {
			t.Errorf("check output lacks the warning\n%s", r)
		}
		assertNoSecret(t, r, append([]string{goodPassword}, issuedTokens(sim)...)...)
	})
}
