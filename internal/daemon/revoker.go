package daemon

import (
	"context"
	gosync "sync"
	"time"
)

// revoker revokes every source's ERP token when it stops, which is after
// the scheduler stopped: no run needs a token any more.
type revoker struct{ d *Daemon }

func (*revoker) Start(context.Context) error { return nil }

// Stop revokes the tokens of all sources at once, within one deadline.
func (r *revoker) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg gosync.WaitGroup
	for name, client := range r.d.Clients {
		wg.Go(func() {
			if err := client.Close(ctx); err != nil {
				r.d.Log.Warn("could not revoke the ERP token", "source", name, "err", err)
			}
		})
	}
	wg.Wait()
}
