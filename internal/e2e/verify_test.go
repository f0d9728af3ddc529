package e2e

import (
	"context"
	"errors"
	"net/http/httptest"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestVerify documents `erpsync verify` as the real binary runs it.
func TestVerify(t *testing.T) {
	// A signal in the middle of a verification ends it at once, with the
	// status of a command the signal interrupted (143 for SIGTERM), never
	// the 0 of a verification that agreed.
	t.Run("ExitsWithTheStatusOfTheSignalThatInterruptedIt", func(t *testing.T) {
		bin := erpsyncBinary(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sim := erpsim.New(erpsim.Options{Invoices: 1000, PageSizeCap: pageSize, Latency: 300 * time.Millisecond})
		srv := httptest.NewServer(sim)
		t.Cleanup(srv.Close)
		dbURL := testdb.New(t)
		p := startErpsync(t, ctx, bin, baseEnv(dbURL, srv.URL), 1, "verify", "invoices")
		pollUntil(t, ctx, 30*time.Second, 10*time.Millisecond, "verify to read the ERP's invoices", []*process{p}, func() (bool, error) {
			for _, r := range sim.Requests() {
				if r.Path == invoicesPath {
					return true, nil
				}
			}
			return false, nil
		})
		p.stop(t, syscall.SIGTERM, 20*time.Second)
		var exit *exec.ExitError
		if !errors.As(p.err, &exit) || exit.ExitCode() != 143 {
			t.Errorf("erpsync verify after SIGTERM: %v, want exit status 143\n%s", p.err, p.output())
		}
		if !strings.Contains(p.stderr.String(), "erpsync verify: interrupted by SIGTERM") {
			t.Errorf("stderr does not say it was interrupted\n%s", p.output())
		}
	})
}
