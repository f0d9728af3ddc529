package daemon

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

func (d *Daemon) routes() http.Handler {
	mux := http.NewServeMux()
	// healthz: the process is alive and serving; restarts fix nothing
	// that readyz reports, so liveness does not look at the database.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		err := d.ready(r.Context())
		d.publishReady(err == nil)
		if err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", d.Metrics.Handler())
	return mux
}

// publishReady sets the erpsync_ready gauge from a finished check,
// unless shutdown began meanwhile (a slow check must not undo it).
func (d *Daemon) publishReady(ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.Metrics.SetReady(ok && !d.stopping.Load())
}

func (d *Daemon) ready(ctx context.Context) error {
	if d.stopping.Load() {
		return fmt.Errorf("shutting down")
	}
	pool := d.pool.Load()
	if pool == nil {
		return fmt.Errorf("starting: database not reached yet")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("database unreachable")
	}
	cur, target, err := d.migrator.Versions(ctx)
	if err != nil {
		return fmt.Errorf("database unreachable (schema version unknown)")
	}
	if cur < target {
		return fmt.Errorf("schema migrations missing (version %d of %d)", cur, target)
	}
	return nil
}
