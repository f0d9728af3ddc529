// Package cli implements erpsync's commands: it parses flags, builds the
// configuration, logger, pool and clients, and hands over to the packages
// that do the work.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/erpsync/erpsync/internal/buildinfo"
	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/sync/streams"
	"github.com/erpsync/erpsync/internal/tracing"
)

// Exit statuses (README.md has the table). A command interrupted by a
// signal exits 128 plus its number, as a shell reports it: 130 for
// SIGINT, 143 for SIGTERM.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
	// exitBusy: a stream was skipped because another session holds its
	// lock; try again later (EX_TEMPFAIL of sysexits.h).
	exitBusy = 75
)

const usage = `erpsync mirrors an ERP's HTTP API into a Postgres warehouse.

Usage:
  erpsync migrate              apply the embedded schema migrations
  erpsync sync [STREAM...]     run the named streams once (default: all enabled) and exit
  erpsync run [--no-migrate]   the daemon: schedules, /healthz /readyz /metrics, graceful shutdown
  erpsync status [STREAM...]   checkpoints, last runs and freshness per source and stream (--json)
  erpsync check                check configuration, database, ERP login and /api/auth/me/
  erpsync probe [STREAM...]    one small read per stream: is each usable on this installation? (--json)
  erpsync verify [STREAM...]   compare the warehouse with the ERP, rows and money sums; exit 1 if they differ (--json)
  erpsync reset STREAM         start a stream over: its next run reads everything again (rows and versions kept)
  erpsync demo                 sync the built-in ERP simulator into a local database
  erpsync version              version and build information

Every command takes --config FILE (or ERPSYNC_CONFIG); environment
variables (ERPSYNC_*) override the file. See docs/configuration.md.
`

// command is a command being run: its arguments, the process's
// environment and output, passed down so tests need no real environment.
type command struct {
	args    []string
	environ []string
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	catalog *sync.Catalog
	// term is stderr as the log and the progress line share it.
	term *terminal
	// interrupted is the first SIGINT or SIGTERM a command that stops
	// early on one received (see signalContext), 0 if none.
	interrupted atomic.Int32
}

// Main runs one command and returns the exit status.
func Main(args []string, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	catalog, err := streams.Default()
	if err != nil {
		fmt.Fprintf(stderr, "erpsync: %v\n", err)
		return exitFailed
	}
	e := &command{args: args[1:], environ: environ, stdin: stdin, stdout: stdout, stderr: stderr, catalog: catalog, term: newTerminal(stderr)}
	cmds := map[string]func(*command) error{
		"migrate":  cmdMigrate,
		"sync":     cmdSync,
		"reset":    cmdReset,
		"run":      cmdRun,
		"status":   cmdStatus,
		"check":    cmdCheck,
		"probe":    cmdProbe,
		"verify":   cmdVerify,
		"demo":     cmdDemo,
		"version":  func(e *command) error { fmt.Fprintln(e.stdout, buildinfo.String()); return nil },
		"simulate": cmdSimulate, // hidden: the ERP simulator for docker-compose and manual tests
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "erpsync: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
	err = cmd(e)
	if sig := syscall.Signal(e.interrupted.Load()); sig != 0 {
		msg := "interrupted by " + signalName(sig)
		if err != nil {
			msg += ": " + err.Error()
		}
		fmt.Fprintf(stderr, "erpsync %s: %s\n", args[0], msg)
		return 128 + int(sig)
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, sync.ErrBusy):
		fmt.Fprintf(stderr, "erpsync %s: %v\n", args[0], err)
		return exitBusy
	case isUsage(err) || config.IsConfigError(err) || isSchemaError(err) || isTracingSetting(err):
		fmt.Fprintf(stderr, "erpsync %s: %v\n", args[0], err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "erpsync %s: %v\n", args[0], err)
		return exitFailed
	}
}

type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

func usageErrorf(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

func isUsage(err error) bool {
	var u *usageError
	return errors.As(err, &u)
}

// isSchemaError: a schema that is missing or behind is fixed by running
// `erpsync migrate`, and a login without the runtime role's rights by a
// grant, not by retrying, so they exit like a configuration problem.
func isSchemaError(err error) bool {
	var se *db.SchemaError
	var ge *db.GrantError
	return errors.As(err, &se) || errors.As(err, &ge)
}

// isTracingSetting: an OTEL_* variable that cannot be used is a
// configuration problem like any other.
func isTracingSetting(err error) bool {
	var se *tracing.SettingError
	return errors.As(err, &se)
}

// flags returns a flag set with the options every command shares.
func (e *command) flags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("erpsync "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	cfgFile := fs.String("config", "", "YAML configuration `file` (default $ERPSYNC_CONFIG)")
	return fs, cfgFile
}

// parse accepts flags before and after the arguments
// (`erpsync sync invoices --prefetch 0`), as users expect; "--" ends flags.
func (e *command) parse(fs *flag.FlagSet) error {
	args, rest := e.args, []string(nil)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageErrorf("%v", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			rest = append(rest, args[1:]...)
			break
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
	e.args = rest
	return nil
}

// writeJSON prints v as indented JSON, the --json of every command.
func (e *command) writeJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// getenv reads the environment Main was given.
func (e *command) getenv(key string) string {
	for _, kv := range e.environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// positional is what parse left after the flags.
func (e *command) positional() []string { return e.args }

// loadConfig reads the configuration (needERP requires a usable source)
// and logs its warnings, before its problems are printed if it has any:
// a misspelt variable is often why a setting is missing.
func (e *command) loadConfig(file string, needERP bool) (config.Config, error) {
	cfg, err := e.readConfig(file, needERP)
	log := newLogger(cfg, e.term)
	for _, w := range cfg.Warnings {
		log.Warn("configuration", "warning", w)
	}
	return cfg, err
}

// readConfig is loadConfig for a command that reports the warnings
// itself (check).
func (e *command) readConfig(file string, needERP bool) (config.Config, error) {
	return config.Load(e.environ, config.Options{ConfigFile: file, Streams: StreamSpecs(e.catalog), NeedERP: needERP})
}

// loadConfigForStreams is loadConfig for a command that reads the ERP and
// takes stream names: a name no source can run is refused before anything
// starts.
func (e *command) loadConfigForStreams(file string) (config.Config, error) {
	cfg, err := e.loadConfig(file, true)
	if err != nil {
		return cfg, err
	}
	for _, src := range cfg.Sources {
		if _, err := e.streamsFor(src, e.positional()); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// signalContext returns a context cancelled on SIGINT/SIGTERM, for the
// commands whose normal end is a signal (`run`, `simulate`).
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// signalContext returns a context cancelled on SIGINT/SIGTERM for a
// command that a signal interrupts: Main then exits with 128 plus the
// signal's number, whatever the command returns.
func (e *command) signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-ch:
			if sig, ok := s.(syscall.Signal); ok {
				e.interrupted.CompareAndSwap(0, int32(sig))
			}
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

// signalName is SIGINT or SIGTERM, as operators know them.
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// openPools opens the pools of a process that runs at most runs runs at
// once (db.OpenPools), with erpsync's session limits, and brings the
// schema up to date (or refuses to work on one that is behind when
// auto-migrate is off).
func openPools(ctx context.Context, cfg config.Config, runs int, log *slog.Logger) (*db.Pools, error) {
	if err := cfg.RequireDatabase(); err != nil {
		return nil, err
	}
	pools, err := db.OpenPools(ctx, cfg.DatabaseURL.Value(), runs, dbLimits(cfg))
	if err != nil {
		return nil, err
	}
	if err := db.EnsureSchema(ctx, pools.Service, cfg.AutoMigrate, cfg.MigrateDatabaseURL.Value(), log); err != nil {
		pools.Close()
		return nil, err
	}
	return pools, nil
}

// openPool opens a pool of at most maxConns connections with erpsync's
// session limits, for the commands that only read.
func openPool(ctx context.Context, cfg config.Config, maxConns int) (*pgxpool.Pool, error) {
	if err := cfg.RequireDatabase(); err != nil {
		return nil, err
	}
	return db.Open(ctx, cfg.DatabaseURL.Value(), db.WithMaxConns(maxConns), dbLimits(cfg))
}

// openReader opens a pool of one connection for a command that reads the
// warehouse, once its schema is the one this binary needs.
func openReader(ctx context.Context, cfg config.Config) (*pgxpool.Pool, error) {
	pool, err := openPool(ctx, cfg, 1)
	if err != nil {
		return nil, err
	}
	if err := db.CheckSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

func dbLimits(cfg config.Config) db.Option {
	d := cfg.Database
	return db.WithLimits(d.LockTimeout, d.StatementTimeout, d.IdleInTxTimeout)
}

// targetOf builds a source as its runs see it: a client per login, the
// logins sharing the source's request budget. obs, if not nil, observes
// the clients (and the budget, when it can); tweak adjusts the options for
// a command (check wants answers fast, not retries).
func targetOf(src config.Source, log *slog.Logger, obs erp.Observer, tweak ...func(*erp.Options)) (sync.Target, error) {
	bobs, _ := obs.(erp.BudgetObserver)
	budget := erp.NewBudget(src.MaxConcurrentRequests, src.MaxRequestsPerSecond, bobs)
	t := sync.Target{Source: src.Name, PageSize: src.PageSize,
		Prefixes: map[string]string{"messaging": src.MessagingPrefix}, Settings: map[string]map[string]string{},
		DriftStop: map[string]bool{}, WindowPages: map[string]int{}}
	for _, st := range src.Streams {
		t.Settings[st.Name] = st.Settings
		t.DriftStop[st.Name] = st.Drift == config.DriftStop
		if st.WindowPages > 0 {
			t.WindowPages[st.Name] = st.WindowPages
		}
	}
	for _, l := range src.Logins {
		llog := log.With("source", src.Name)
		if len(src.Logins) > 1 {
			llog = llog.With("login", l.Name())
		}
		opt := erp.Options{
			BaseURL:      src.BaseURL,
			Auth:         l.Auth,
			Username:     l.Username,
			Password:     l.Password.Value(),
			PluginScheme: l.PluginScheme,
			ClientID:     l.ClientID,
			ClientSecret: l.ClientSecret.Value(),
			Timeout:      src.Timeout,
			Observer:     obs,
			Logger:       llog,
			MaxResponse:  src.MaxResponse,
			Budget:       budget,
			Hints:        erp.Hints{Credentials: l.CredentialKeys(), MaxResponse: src.Keys.MaxResponse},
		}
		for _, tw := range tweak {
			tw(&opt)
		}
		c, err := erp.New(opt)
		if err != nil {
			return sync.Target{}, fmt.Errorf("source %s: %w", src.Name, err)
		}
		t.Logins = append(t.Logins, sync.Login{Name: l.Name(), Client: c})
	}
	return t, nil
}

// warnHistoryOff says, once, that a stream configured to keep no history
// (history: false, ERPSYNC_HISTORY) keeps it all the same: Postgres writes
// the versions, whoever changes a row, so that the daemon's role cannot
// switch its own audit trail off.
func warnHistoryOff(cfg config.Config, log *slog.Logger) {
	for _, src := range cfg.Sources {
		for _, st := range src.Streams {
			if st.History != nil && !*st.History {
				log.Warn("history: false (or ERPSYNC_HISTORY) no longer turns a stream's history off: Postgres keeps the versions of every table that has a history table; the schema's owner may keep none with ALTER TABLE erp.<table> DISABLE TRIGGER guard_rows",
					"source", src.Name, "stream", st.Name)
				return
			}
		}
	}
}

// StreamSpecs is the catalog as configuration sees it: what every command
// hands config.Load, and what a test of a deployment file loads its
// configuration with.
func StreamSpecs(c *sync.Catalog) []config.StreamSpec {
	var out []config.StreamSpec
	for _, n := range c.Names() {
		s, _ := c.Lookup(n)
		info := s.Declared()
		sp := config.StreamSpec{Name: n, Schedule: info.ScheduleDefault(), Follows: info.Follows, SweepSchedule: info.SweepScheduleDefault(),
			WindowSchedule: info.WindowSchedule, Core: info.Core, History: info.History != sync.NoHistory}
		for _, set := range info.Settings {
			sp.Settings = append(sp.Settings, config.SettingSpec{Key: set.Key, Default: set.Default, Check: set.Check})
		}
		out = append(out, sp)
	}
	return out
}

// streamsFor resolves the streams to run for a source: the named ones, or
// the source's enabled ones.
func (e *command) streamsFor(src config.Source, names []string) ([]sync.Stream, error) {
	if len(names) == 0 {
		for _, sc := range src.Streams {
			names = append(names, sc.Name)
		}
	}
	return e.lookup(names)
}

// lookup finds the named streams in the catalog, refusing an unknown name.
func (e *command) lookup(names []string) ([]sync.Stream, error) {
	out := make([]sync.Stream, 0, len(names))
	for _, n := range names {
		s, ok := e.catalog.Lookup(n)
		if !ok {
			return nil, usageErrorf("unknown stream %q; known streams: %s", n, strings.Join(e.catalog.Names(), ", "))
		}
		out = append(out, s)
	}
	return out, nil
}
