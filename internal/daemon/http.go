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
		if err := d.ready(r.Context()); err != nil {
			d.Metrics.SetReady(false)
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		d.Metrics.SetReady(true)
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", d.Metrics.Handler())
	return mux
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
