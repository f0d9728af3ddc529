// Package e2e runs the real erpsync binary against the in-process ERP
// simulator and a per-test Postgres database.
package e2e

import (
	"errors"
	"flag"
	"fmt"
	"github.com/erpsync/erpsync/internal/sync/streams"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	out := filepath.Join(dir, "erpsync")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/erpsync")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/erpsync in %s: %v\n%s", root, err, b)
	}
	binary = out
	return nil
}

// moduleRoot walks up from the working directory to the directory that
// holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
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
