// Package testutil holds the helpers that several packages' tests share.
// It is imported by tests only.
package testutil

import (
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
