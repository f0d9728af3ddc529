package erp

import (
	"context"
	"time"
)

// Budget bounds what one process asks of one installation, across the
// clients of all its logins: at most a number of requests in flight, and,
// when set, a minimum spacing between their starts. The ERP is shared
// with the people who work in it. A nil *Budget bounds nothing.
type Budget struct {
	slots chan struct{}
	every time.Duration // the spacing of starts; 0 for none
	obs   BudgetObserver
	last  chan time.Time // the time of the last start: one value, taken while spacing
}

// BudgetObserver is told what the budget does, for metrics.
type BudgetObserver interface {
	// InFlight is called with +1 when a request starts and -1 when it
	// ends.
	InFlight(delta int)
	// BudgetWait is called with each wait for the budget.
	BudgetWait(d time.Duration)
}

// NewBudget allows concurrent requests in flight (at least 1) and, when
// perSecond is positive, at most that many starts a second.
func NewBudget(concurrent int, perSecond float64, obs BudgetObserver) *Budget {
	b := &Budget{slots: make(chan struct{}, max(concurrent, 1)), obs: obs, last: make(chan time.Time, 1)}
	if perSecond > 0 {
		b.every = time.Duration(float64(time.Second) / perSecond)
	}
	b.last <- time.Time{}
	return b
}

// acquire waits for a slot (and the spacing), and returns the release.
func (b *Budget) acquire(ctx context.Context) (func(), error) {
	if b == nil {
		return func() {}, nil
	}
	start := time.Now()
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if b.every > 0 {
		var last time.Time
		select {
		case last = <-b.last:
		case <-ctx.Done():
			<-b.slots
			return nil, ctx.Err()
		}
		next := last.Add(b.every)
		if wait := time.Until(next); wait > 0 {
			if err := sleep(ctx, wait); err != nil {
				b.last <- last
				<-b.slots
				return nil, err
			}
		}
		b.last <- time.Now()
	}
	if waited := time.Since(start); waited > time.Millisecond {
		waitEvent(ctx, eventBudget, start, waited)
		if b.obs != nil {
			b.obs.BudgetWait(waited)
		}
	}
	if b.obs != nil {
		b.obs.InFlight(1)
	}
	return func() {
		if b.obs != nil {
			b.obs.InFlight(-1)
		}
		<-b.slots
	}, nil
}
