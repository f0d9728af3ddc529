package backoff

import (
	"testing"
	"time"
)

// TestPolicy documents the one backoff rule: capped exponential with
// jitter.
func TestPolicy(t *testing.T) {
	t.Run("DelayDoublesUpToTheCapJitteredIntoItsUpperHalf", func(t *testing.T) {
		p := Policy{Base: 500 * time.Millisecond, Max: 30 * time.Second}
		for n, want := range map[int]time.Duration{1: 500 * time.Millisecond, 2: time.Second, 3: 2 * time.Second, 7: 30 * time.Second, 60: 30 * time.Second} {
			if got := p.nominal(n); got != want {
				t.Errorf("nominal(%d) = %s, want %s", n, got, want)
			}
			for range 200 {
				if d := p.Delay(n); d < want/2 || d > want {
					t.Fatalf("Delay(%d) = %s, want in [%s, %s]", n, d, want/2, want)
				}
			}
		}
	})

	// A huge attempt count must not overflow into a short or negative wait.
	t.Run("WaitsTheCapAfterAHugeAttemptCount", func(t *testing.T) {
		if got := (Policy{Base: time.Hour, Max: 24 * time.Hour}).nominal(1 << 30); got != 24*time.Hour {
			t.Errorf("nominal(huge) = %s, want the cap", got)
		}
	})
}
