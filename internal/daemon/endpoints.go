package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	gosync "sync"
	"time"

	"github.com/erpsync/erpsync/internal/db"
)

// endpointsDeps are what the endpoints need.
type endpointsDeps struct {
	Listener net.Listener
	Log      *slog.Logger
	Metrics  interface {
		Handler() http.Handler
		SetReady(bool)
	}
	// Ready says whether the process can work (nil: it can).
	Ready func(ctx context.Context) error
	// Waiting says what the start waits for, while it does ("" or nil:
	// nothing to say), so that /readyz names it rather than "starting".
	Waiting func() string
	// Warnings are what /readyz shows without being unready.
	Warnings        func() []string
	ShutdownTimeout time.Duration
}

// endpoints serves /healthz, /readyz and /metrics. It owns readiness: it
// is not ready before Serving, nor once Drain was called.
type endpoints struct {
	deps     endpointsDeps
	srv      *http.Server
	failed   chan error // the server's error, if it stops on its own
	done     chan struct{}
	mu       gosync.Mutex // orders ready-gauge updates against draining
	serving  bool
	draining bool
	stopOnce gosync.Once
}

func newEndpoints(deps endpointsDeps) *endpoints {
	return &endpoints{deps: deps, failed: make(chan error, 1), done: make(chan struct{})}
}

func (e *endpoints) Start(context.Context) error {
	e.srv = &http.Server{Handler: e.routes(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(e.done)
		if err := e.srv.Serve(e.deps.Listener); !errors.Is(err, http.ErrServerClosed) {
			e.failed <- fmt.Errorf("http server: %w", err)
		}
	}()
	return nil
}

// Stop shuts the server down within the shutdown's HTTP phase.
func (e *endpoints) Stop() {
	e.stopOnce.Do(func() {
		e.Drain()
		ctx, cancel := context.WithTimeout(context.Background(), e.deps.ShutdownTimeout)
		defer cancel()
		_ = e.srv.Shutdown(ctx)
		<-e.done
	})
}

// Failed delivers the server's error if it stops on its own.
func (e *endpoints) Failed() <-chan error { return e.failed }

// Serving marks the start over: /readyz may say ready.
func (e *endpoints) Serving() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.serving = true
	e.deps.Metrics.SetReady(!e.draining)
}

// Drain marks shutdown: /readyz says no from now on.
func (e *endpoints) Drain() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.draining = true
	e.deps.Metrics.SetReady(false)
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
		if err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
		// Warnings that do not make the process unready, but that an
		// operator looking here should see.
		for _, w2 := range e.deps.Warnings() {
			fmt.Fprintln(w, "warning: "+w2)
		}
	})
	mux.Handle("GET /metrics", e.deps.Metrics.Handler())
	return mux
}

// ready checks readiness and publishes it in the erpsync_ready gauge,
// unless draining began meanwhile (a slow check must not undo it).
func (e *endpoints) ready(ctx context.Context) error {
	e.mu.Lock()
	serving, draining := e.serving, e.draining
	e.mu.Unlock()
	var err error
	switch {
	case draining:
		err = errors.New("shutting down")
	case !serving:
		err = errors.New("starting")
		if e.deps.Waiting != nil {
			if why := e.deps.Waiting(); why != "" {
				err = fmt.Errorf("starting: %s; retrying", why)
			}
		}
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		err = e.deps.Ready(ctx)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.deps.Metrics.SetReady(err == nil && !e.draining)
	return err
}

// databaseReady is readiness as the database makes it: reached, and at
// this binary's schema (a schema newer than the binary is not ready: the
// binary refuses to write to it).
func databaseReady(ctx context.Context, pools *db.Pools) error {
	if pools == nil {
		return errors.New("starting: database not reached yet")
	}
	if err := pools.Service.Ping(ctx); err != nil {
		return errors.New(db.Unreachable(pools.Service.Config().ConnString(), err))
	}
	err := db.CheckSchema(ctx, pools.Service)
	var se *db.SchemaError
	switch {
	case errors.As(err, &se):
		return err
	case err != nil:
		return errors.New("database unreachable (schema version unknown)")
	}
	return nil
}
