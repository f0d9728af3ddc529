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

// TestCheck documents `erpsync check` as the real binary runs it.
func TestCheck(t *testing.T) {
	// A signal while check waits for the ERP ends it with the status of a
	// command the signal interrupted (130 for SIGINT), never the 1 of a
	// check that found a problem: a script tells "stopped" from "broken".
	t.Run("ExitsWithTheStatusOfTheSignalThatInterruptedIt", func(t *testing.T) {
		bin := erpsyncBinary(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sim := erpsim.New(erpsim.Options{Invoices: 10, Latency: 5 * time.Second})
		srv := httptest.NewServer(sim)
		t.Cleanup(srv.Close)
		dbURL := testdb.New(t)
		p := startErpsync(t, ctx, bin, baseEnv(dbURL, srv.URL), 1, "check")
		pollUntil(t, ctx, 30*time.Second, 10*time.Millisecond, "check to ask the ERP for a token", []*process{p}, func() (bool, error) {
			for _, r := range sim.Requests() {
				if r.Path == "/api/auth/token/" {
					return true, nil
				}
			}
			return false, nil
		})
		p.stop(t, syscall.SIGINT, 20*time.Second)
		var exit *exec.ExitError
		if !errors.As(p.err, &exit) || exit.ExitCode() != 130 {
			t.Errorf("erpsync check after SIGINT: %v, want exit status 130\n%s", p.err, p.output())
		}
		if !strings.Contains(p.stderr.String(), "erpsync check: interrupted by SIGINT") {
			t.Errorf("stderr does not say it was interrupted\n%s", p.output())
		}
	})
}
