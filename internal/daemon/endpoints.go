package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/erpsync/erpsync/internal/db"
)

// endpoints serves /healthz, /readyz and /metrics.
type endpoints struct {
	d      *Daemon
	ln     net.Listener
	srv    *http.Server
	failed chan error // the server's error, if it stops on its own
	done   chan struct{}
}

func (e *endpoints) Start(context.Context) error {
	e.srv = &http.Server{Handler: e.routes(), ReadHeaderTimeout: 5 * time.Second}
	e.failed, e.done = make(chan error, 1), make(chan struct{})
	go func() {
		defer close(e.done)
		if err := e.srv.Serve(e.ln); !errors.Is(err, http.ErrServerClosed) {
			e.failed <- fmt.Errorf("http server: %w", err)
		}
	}()
	return nil
}

func (e *endpoints) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), e.d.Cfg.Shutdown.HTTP)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
	<-e.done
}

func (e *endpoints) routes() http.Handler {
	mux := http.NewServeMux()
	// healthz: the process is alive and serving; restarts fix nothing
	// that readyz reports, so liveness does not look at the database.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		err := e.ready(r.Context())
		e.publishReady(err == nil)
		if err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
		// Warnings that do not make the process unready, but that an
		// operator looking here should see.
		var warnings []string
		e.d.stuck.Range(func(_, v any) bool {
			warnings = append(warnings, v.(string))
			return true
		})
		slices.Sort(warnings)
		for _, w2 := range warnings {
			fmt.Fprintln(w, "warning: "+w2)
		}
	})
	mux.Handle("GET /metrics", e.d.Metrics.Handler())
	return mux
}

// publishReady sets the erpsync_ready gauge from a finished check,
// unless shutdown began meanwhile (a slow check must not undo it).
func (e *endpoints) publishReady(ok bool) {
	e.d.readyMu.Lock()
	defer e.d.readyMu.Unlock()
	e.d.Metrics.SetReady(ok && !e.d.stopping.Load())
}

func (e *endpoints) ready(ctx context.Context) error {
	if e.d.stopping.Load() {
		return errors.New("shutting down")
	}
	pool := e.d.pool()
	if pool == nil {
		return errors.New("starting: database not reached yet")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		return errors.New("database unreachable")
	}
	err := db.CheckSchema(ctx, pool)
	var se *db.SchemaError
	switch {
	case errors.As(err, &se):
		return err
	case err != nil:
		return errors.New("database unreachable (schema version unknown)")
	}
	return nil
}
