package daemon

import (
	"context"
	"log/slog"
	gosync "sync"
	"time"

	"github.com/erpsync/erpsync/internal/db"
)

// prunerDeps are what the pruner needs.
type prunerDeps struct {
	Pool      func() *db.Pools
	Retention time.Duration
	Keep      int           // runs kept per stream, however old
	Every     time.Duration // between two prunings
	First     time.Duration // before the first: not in the rush of start-up
	Log       *slog.Logger
	Clock     Clock
	Metrics   interface{ Pruned(table string, n int64) }
}

// pruner keeps the bookkeeping tables from growing forever: every so
// often it removes runs older than the retention (keeping each stream's
// last Keep runs), rejected records not rejected again within it, and
// where changes were seen longer ago than changePositionsKept. Replicas
// may prune at the same time: deleting twice is harmless.
type pruner struct {
	deps     prunerDeps
	stop     context.CancelFunc
	done     chan struct{}
	stopOnce gosync.Once
}

const (
	pruneEvery = time.Hour
	pruneKeep  = 20
	// changePositionsKept: windows learn their size from the changes of
	// the last days; positions older than this serve nothing.
	changePositionsKept = 30 * 24 * time.Hour
)

func newPruner(deps prunerDeps) *pruner { return &pruner{deps: deps, done: make(chan struct{})} }

func (p *pruner) Start(ctx context.Context) error {
	ctx, p.stop = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(p.done)
		wait := p.deps.First
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.deps.Clock.After(wait):
			}
			p.prune(ctx)
			wait = p.deps.Every
		}
	}()
	return nil
}

func (p *pruner) Stop() {
	p.stopOnce.Do(func() {
		p.stop()
		<-p.done
	})
}

func (p *pruner) prune(ctx context.Context) {
	pools := p.deps.Pool()
	if pools == nil {
		return
	}
	runs, rejected, err := db.Prune(ctx, pools.Service, p.deps.Retention, p.deps.Keep)
	p.deps.Metrics.Pruned("sync_runs", runs)
	p.deps.Metrics.Pruned("rejected_records", rejected)
	if err != nil {
		p.deps.Log.Warn("retention: pruning failed; will try again", "err", err)
		return
	}
	if runs+rejected > 0 {
		p.deps.Log.Info("retention: pruned old bookkeeping", "sync_runs", runs, "rejected_records", rejected, "older_than", p.deps.Retention)
	}
	// By this host's clock, which the database's (the positions' seen_at)
	// does not stray far from over days.
	positions, err := db.ForgetChangePositions(ctx, pools.Service, time.Now().Add(-changePositionsKept))
	p.deps.Metrics.Pruned("change_positions", positions)
	if err != nil {
		p.deps.Log.Warn("retention: forgetting where changes were failed; will try again", "err", err)
		return
	}
	if positions > 0 {
		p.deps.Log.Info("retention: forgot where changes were seen", "change_positions", positions, "older_than", changePositionsKept)
	}
}
