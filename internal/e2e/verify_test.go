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
		waitRequest(t, ctx, sim, p, invoicesPath)
		stopInterrupted(t, p, "verify", syscall.SIGTERM, 143)
	})
}
