// Package e2e runs the real erpsync binary against the in-process ERP
// simulator and a per-test Postgres database.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/erpsync/erpsync/internal/sync/streams"
	"github.com/erpsync/erpsync/internal/testutil"
)

var (
	// binary is the erpsync executable built once by TestMain.
	binary   string
	buildErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test skips itself; nothing to build.
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "erpsync-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	buildErr = build(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func build(dir string) error {
	out, err := testutil.BuildErpsync(context.Background(), dir)
	binary = out
	return err
}

// erpsyncBinary returns the built binary, skipping under -short.
func erpsyncBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// coreStreams are the streams a source enables when its configuration
// names none.
var coreStreams = streams.MustDefault().Core()
