package daemon

import (
	"context"
	"time"

	"github.com/erpsync/erpsync/internal/db"
)

// pruner keeps the bookkeeping tables from growing forever: every hour it
// removes runs older than the retention (keeping each stream's last
// pruneKeep runs) and rejected records not rejected again within it.
// Replicas may prune at the same time: deleting twice is harmless.
type pruner struct {
	d    *Daemon
	stop context.CancelFunc
	done chan struct{}
}

const (
	pruneEvery = time.Hour
	pruneKeep  = 20
)

func (p *pruner) Start(ctx context.Context) error {
	ctx, p.stop = context.WithCancel(context.WithoutCancel(ctx))
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTimer(time.Minute) // not in the rush of start-up
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			p.prune(ctx)
			t.Reset(pruneEvery)
		}
	}()
	return nil
}

func (p *pruner) Stop() {
	p.stop()
	<-p.done
}

func (p *pruner) prune(ctx context.Context) {
	runs, rejected, err := db.Prune(ctx, p.d.pool(), p.d.Cfg.Retention, pruneKeep)
	p.d.Metrics.Pruned("sync_runs", runs)
	p.d.Metrics.Pruned("rejected_records", rejected)
	if err != nil {
		p.d.Log.Warn("retention: pruning failed; will try again", "err", err)
		return
	}
	if runs+rejected > 0 {
		p.d.Log.Info("retention: pruned old bookkeeping", "sync_runs", runs, "rejected_records", rejected, "older_than", p.d.Cfg.Retention)
	}
}
