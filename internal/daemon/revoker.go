package daemon

import (
	"context"
	"log/slog"
	gosync "sync"
	"time"

	"github.com/erpsync/erpsync/internal/sync"
)

// revokerDeps are what the revoker needs.
type revokerDeps struct {
	Targets []sync.Target
	Timeout time.Duration
	Log     *slog.Logger
}

// revoker revokes the ERP token of every login of every source when it
// stops, which is after the scheduler stopped: no run needs a token any
// more.
type revoker struct {
	deps     revokerDeps
	stopOnce gosync.Once
}

func newRevoker(deps revokerDeps) *revoker { return &revoker{deps: deps} }

func (*revoker) Start(context.Context) error { return nil }

// Stop revokes the tokens, all at once, within the shutdown's revoke
// phase.
func (r *revoker) Stop() {
	r.stopOnce.Do(func() { sync.RevokeTokens(r.deps.Targets, r.deps.Timeout, r.deps.Log) })
}
