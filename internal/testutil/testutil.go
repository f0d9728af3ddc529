// Package testutil holds the helpers that several packages' tests share.
// It is imported by tests only.
package testutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Eventually polls cond every interval until it holds, and fails the test
// when timeout passes first (the timeout is the assertion) or when cond
// returns an error (something that waiting will not mend).
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}

// RequireTool returns the path of a program a test runs (a name looked
// up in PATH, or an absolute path). Without it the test is skipped on a
// developer's machine, but fails in CI (CI set): a check that skips there
// silently proves nothing. .ci/run installs what the tests need.
func RequireTool(t testing.TB, name, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed, and CI is set: install it (Debian: apt-get install %s): %v", name, debianPackage, err)
	}
	t.Skipf("%s is not installed (Debian: apt-get install %s); set CI to make this a failure", name, debianPackage)
	return ""
}

// BuildErpsync builds ./cmd/erpsync of this module into dir and returns
// the binary's path, for tests that run the program as a user would.
func BuildErpsync(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "erpsync")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/erpsync")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/erpsync in %s: %v\n%s", root, err, b)
	}
	return out, nil
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

// Buffer is a bytes.Buffer that may be written from several goroutines (a
// logger's, a child process's) and read while they write.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
