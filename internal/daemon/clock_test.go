package daemon

import (
	gosync "sync"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/testutil"
)

// fakeClock is a Clock the test moves by hand: Now stands still until
// Advance, and a channel from After(d) fires once Advance has moved the
// clock d past the moment After was called. Services driven by it never
// sleep for real, and a test can tell that a service is waiting (Waiting)
// before it moves time.
type fakeClock struct {
	mu      gosync.Mutex
	now     time.Time
	waiters []clockWaiter
	asked   []time.Duration // every d passed to After, in order
}

type clockWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the clock's time once it has
// moved d on; d <= 0 fires at once, as time.After does. The channel is
// buffered, so a waiter that gave up leaves no goroutine behind.
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, d)
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, clockWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock d on and fires every waiter whose time came.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// Waiting is the number of After channels that have not fired yet.
func (c *fakeClock) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// Asked returns every duration passed to After so far.
func (c *fakeClock) Asked() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.asked...)
}

// NextWait is how long until the earliest pending waiter fires (0 when
// none is pending).
func (c *fakeClock) NextWait() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Duration
	for i, w := range c.waiters {
		if d := w.at.Sub(c.now); i == 0 || d < next {
			next = d
		}
	}
	return next
}

// waitForWaiters polls until at least n After channels are pending: the
// service under test is then blocked on the clock, and moving it is what
// happens next.
func (c *fakeClock) waitForWaiters(t *testing.T, n int, what string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, what, func() (bool, error) {
		return c.Waiting() >= n, nil
	})
}

// TestFakeClock: the other tests lean on the fake clock; it must fire
// exactly when moved far enough, never before, and at once for d <= 0.
func TestFakeClock(t *testing.T) {
	c := newFakeClock()
	start := c.Now()
	now := c.After(0)
	select {
	case got := <-now:
		if !got.Equal(start) {
			t.Errorf("After(0) fired with %s, want %s", got, start)
		}
	default:
		t.Fatal("After(0) did not fire at once")
	}
	a, b := c.After(time.Minute), c.After(time.Hour)
	fired := func(ch <-chan time.Time) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	c.Advance(time.Minute - time.Nanosecond)
	if fired(a) || fired(b) || c.Waiting() != 2 {
		t.Fatalf("fired before its time (waiting %d)", c.Waiting())
	}
	if d := c.NextWait(); d != time.Nanosecond {
		t.Errorf("NextWait = %s, want 1ns", d)
	}
	c.Advance(time.Nanosecond)
	if !fired(a) || fired(b) || c.Waiting() != 1 {
		t.Fatalf("After(1m) did not fire at 1m, or After(1h) did (waiting %d)", c.Waiting())
	}
	c.Advance(2 * time.Hour)
	if !fired(b) || c.Waiting() != 0 {
		t.Fatalf("After(1h) did not fire after 2h")
	}
	if got := c.Now().Sub(start); got != 2*time.Hour+time.Minute {
		t.Errorf("the clock moved %s, want 2h1m", got)
	}
	if got := c.Asked(); len(got) != 3 || got[0] != 0 || got[1] != time.Minute || got[2] != time.Hour {
		t.Errorf("Asked = %v, want [0 1m 1h]", got)
	}
}
