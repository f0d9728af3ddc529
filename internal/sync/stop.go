package sync

import (
	"context"
	"log/slog"
	gosync "sync"
	"time"
)

// Stopper is the one way runs are stopped, in `erpsync sync` and in the
// daemon alike. Drain closes the channel runs are given (each commits the
// page in flight, then ends as cancelled, and no run starts); Abort
// cancels the runs' context (their transaction rolls back). A stop drains
// first and aborts only when the grace period is over.
type Stopper struct {
	drain     chan struct{}
	drainOnce gosync.Once
	ctx       context.Context
	abort     context.CancelFunc
}

// NewStopper returns a stopper whose runs' context is parent's values
// without its cancellation: runs end through the stopper, not with the
// context that started them.
func NewStopper(parent context.Context) *Stopper {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	return &Stopper{drain: make(chan struct{}), ctx: ctx, abort: cancel}
}

// Context is the runs' context, cancelled by Abort.
func (s *Stopper) Context() context.Context { return s.ctx }

// Draining is the channel a Runner's runs watch (Runner.Run's stop).
func (s *Stopper) Draining() <-chan struct{} { return s.drain }

// Drain asks runs to end after their commit in flight, and nothing new to
// start. It may be called more than once.
func (s *Stopper) Drain() { s.drainOnce.Do(func() { close(s.drain) }) }

// Abort cancels the runs still going. It may be called more than once.
func (s *Stopper) Abort() { s.abort() }

// Stop drains, waits until done is closed (the runs ended) or grace has
// passed, then aborts and waits up to abort more. It reports whether the
// runs ended.
func (s *Stopper) Stop(done <-chan struct{}, grace, abort time.Duration, log *slog.Logger) bool {
	s.Drain()
	defer s.Abort()
	select {
	case <-done:
		return true
	case <-time.After(grace):
	}
	log.Warn("grace period over: aborting runs still in flight", "grace", grace)
	s.Abort()
	select {
	case <-done:
		return true
	case <-time.After(abort):
		log.Error("runs did not stop after abort", "waited", abort)
		return false
	}
}

// RevokeTokens revokes the ERP token of every login of the targets at
// once, within timeout: the last step of a stop, when no run needs a
// token any more.
func RevokeTokens(targets []Target, timeout time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg gosync.WaitGroup
	for _, t := range targets {
		for _, l := range t.Logins {
			wg.Go(func() {
				if err := l.Client.Close(ctx); err != nil {
					log.Warn("could not revoke the ERP token", "source", t.Source, "login", l.Name, "err", err)
				}
			})
		}
	}
	wg.Wait()
}
