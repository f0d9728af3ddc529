package daemon

import (
	"context"
	gosync "sync"
)

// revoker revokes every source's ERP token when it stops, which is after
// the scheduler stopped: no run needs a token any more.
type revoker struct{ d *Daemon }

func (*revoker) Start(context.Context) error { return nil }

// Stop revokes the tokens of all sources at once, within the shutdown's
// revoke phase.
func (r *revoker) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), r.d.Cfg.Shutdown.Revoke)
	defer cancel()
	var wg gosync.WaitGroup
	for name, t := range r.d.Targets {
		wg.Go(func() {
			if err := t.Client.Close(ctx); err != nil {
				r.d.Log.Warn("could not revoke the ERP token", "source", name, "err", err)
			}
		})
	}
	wg.Wait()
}
