package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/testutil"
)

// TestVerification documents the metrics of `erpsync verify`, for a
// Pushgateway or node_exporter's textfile collector.
func TestVerification(t *testing.T) {
	reg := Verification([]Verified{
		{Source: "main", Stream: "invoices", Done: true, MismatchedRows: 3, MismatchedGroups: 1},
		{Source: "main", Stream: "cashboxes"},
	}, time.Unix(1700000000, 0))

	// They reach a Pushgateway with the URL's credentials as basic auth,
	// and an error never quotes the password.
	t.Run("PushesWithTheURLsCredentialsAndNoPasswordInAnError", func(t *testing.T) {
		var mu sync.Mutex
		var body, auth string
		fail := false
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			defer mu.Unlock()
			body, auth = string(b), r.Header.Get("Authorization")
			if fail {
				http.Error(w, "no", http.StatusInternalServerError)
			}
		}))
		defer srv.Close()

		withCreds := strings.Replace(srv.URL, "http://", "http://ops:s3cret-pw@", 1)
		if err := Push(withCreds, reg); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if auth == "" || !strings.HasPrefix(auth, "Basic ") {
			t.Errorf("Authorization = %q, want basic auth", auth)
		}
		if body == "" {
			t.Error("nothing pushed")
		}
		fail = true
		mu.Unlock()
		err := Push(withCreds, reg)
		if err == nil || strings.Contains(err.Error(), "s3cret-pw") {
			t.Errorf("failed push: %v; want an error without the password", err)
		}
	})

	t.Run("WritesATextfileWithEachStreamsMismatches", func(t *testing.T) {

		path := filepath.Join(t.TempDir(), "erpsync_verify.prom")
		if err := WriteTextfile(path, reg); err != nil {
			t.Fatal(err)
		}
		text, _ := os.ReadFile(path)
		for _, want := range []string{
			`erpsync_verify_mismatched_rows{source="main",stream="invoices"} 3`,
			`erpsync_verify_mismatched_rows{source="main",stream="cashboxes"} -1`,
			`erpsync_verify_mismatched_sums{source="main",stream="invoices"} 1`,
			`erpsync_verify_timestamp_seconds{source="main",stream="invoices"} 1.7e+09`,
		} {
			if !strings.Contains(string(text), want) {
				t.Errorf("textfile lacks %q:\n%s", want, text)
			}
		}
		// node_exporter's textfile collector drops a file it cannot parse,
		// without a word to the operator: promtool reads it as Prometheus would.
		t.Run("PromtoolReadsIt", func(t *testing.T) {
			cmd := exec.Command(testutil.RequireTool(t, "promtool", "prometheus"), "check", "metrics")
			cmd.Stdin = strings.NewReader(string(text))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("promtool check metrics on the textfile: %v\n%s", err, out)
			}
		})
	})
}
