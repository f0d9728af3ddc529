package daemon

import (
	"os"
	"os/exec"
	"testing"
)

// requirePromtool returns promtool's path. Without it the test is skipped
// on a developer's machine, but fails in CI (CI set): a check that skips
// there silently proves nothing. .ci/run installs it.
func requirePromtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("promtool is not installed, and CI is set: install it (Debian: apt-get install prometheus): %v", err)
	}
	t.Skipf("promtool is not installed (Debian: apt-get install prometheus); set CI to make this a failure")
	return ""
}
