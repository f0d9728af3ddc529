// Package backoff is erpsync's one rule for waiting between attempts:
// exponential from a base, capped, with jitter so that the many clients,
// streams or replicas that failed together do not all retry together.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy is a capped exponential backoff.
type Policy struct {
	Base time.Duration // the wait after the first failure
	Max  time.Duration // no wait is longer
}

// Delay is the wait before attempt n+1 after n failures (n >= 1): Base
// doubled n-1 times, capped at Max, then drawn uniformly from its upper
// half, so it is never less than half the nominal wait.
func (p Policy) Delay(n int) time.Duration {
	d := p.nominal(n)
	return d/2 + rand.N(d/2+1)
}

// nominal is the wait before jitter: Base << (n-1), capped at Max.
func (p Policy) nominal(n int) time.Duration {
	d := p.Base << min(max(n-1, 0), 30)
	if d <= 0 || d > p.Max {
		d = p.Max
	}
	return d
}
