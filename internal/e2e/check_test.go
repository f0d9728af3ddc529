package e2e

import (
	"context"
	"net/http/httptest"
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
		p := startErpsync(t, ctx, bin, baseEnv(testdb.New(t), srv.URL), 1, "check")
		waitRequest(t, ctx, sim, p, "/api/auth/token/")
		stopInterrupted(t, p, "check", syscall.SIGINT, 130)
	})
}
