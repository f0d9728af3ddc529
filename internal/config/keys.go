package config

import (
	"slices"
	"strconv"
	"time"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// level is where in the file a key is written.
type level uint8

const (
	topLevel    level = iota // the top of the file: the process
	sourceLevel              // an entry of sources: one ERP installation
	loginLevel               // an entry of sources[].logins, or a source for its one login
	streamLevel              // sources[].streams.<stream>
)

// key is one setting. Everything about it is in its entry of keys: adding
// a setting is one entry (docs/configuration.md's table of settings is
// rendered from them, and a test keeps it so).
type key struct {
	name  string // in the file, at its level ("" for a variable alone)
	level level
	// env is the variable that sets it ("" for none). At the source and
	// login levels it sets the source the variables describe (env.go); at
	// the stream level, every stream that does not set the key itself.
	env string
	// fallback is a second variable, read when env is not set.
	fallback string
	// top: a stream key also written at the top of the file, for every
	// stream that sets it neither itself nor through env.
	top bool
	// follows: a stream key that only a stream that follows its list
	// takes.
	follows bool
	// envNames: env lists the streams for which the key is true ("none"
	// for none), and wins over the file.
	envNames bool
	// secret: a value never written in the file itself. The file names a
	// file holding it (<name>_file) or a variable holding it (<name>_env);
	// env holds it, and <env>_FILE names a file holding it.
	secret bool
	// exposes says whether a value written in the file holds a secret
	// all the same (a connection string's password), for the warning
	// about a config file every user of the host may read.
	exposes func(v string) bool
	def     string // the default, as the file would write it
	// defDoc says the default in words where def cannot.
	defDoc string
	doc    string // what it is, in a line of Markdown
	// set reads v into d. Its error says what is wrong with v; the caller
	// says which setting it was. nil: the loader reads the key itself (it
	// shapes the configuration: the sources, logins and streams).
	set func(d dest, v string) error
}

// dest is what a key sets: the configuration, and the source, login or
// stream being read.
type dest struct {
	cfg    *Config
	src    *Source
	login  *Login
	stream *StreamConfig
}

// defaultShutdownTimeout leaves 5 s of margin under the 30 s stop timeout
// of systemd's default and of Kubernetes' terminationGracePeriodSeconds.
const defaultShutdownTimeout = 25 * time.Second

// keys are every setting, in the order docs/configuration.md lists them.
//
// The database limits follow from what erpsync's statements cost: a page
// (or a group of pages, at most 10,000 rows) commits in well under a
// second, and the largest statement, marking a sweep's deletions over a
// million rows, takes seconds. Waiting 15 s on a lock is already a
// problem to report.
var keys = []key{
	{name: "database_url", env: "ERPSYNC_DATABASE_URL", fallback: "DATABASE_URL", defDoc: "required", exposes: hasPassword,
		doc: "Postgres connection string",
		set: func(d dest, v string) error { d.cfg.DatabaseURL = Secret(v); return nil }},
	{env: configVariable, doc: "YAML file (same as `--config`)", defDoc: "none"},
	{name: "sources", doc: "the ERP installations, one entry each ([The YAML file](#the-yaml-file))", defDoc: "one, from the variables"},
	{name: "name", level: sourceLevel, env: "ERPSYNC_SOURCE", def: "default",
		doc: "name of the source; the `ERPSYNC_ERP_*` variables describe the source of this name ([The YAML file](#the-yaml-file))",
		set: func(d dest, v string) (err error) { d.src.Name, err = sourceName(v); return }},
	{name: "base_url", level: sourceLevel, env: "ERPSYNC_ERP_BASE_URL", defDoc: "required",
		exposes: func(v string) bool { return erp.RedactURL(v) != v },
		doc:     "the installation's base URL; `https://` (`http://` only for loopback hosts); no `user:password@`, query or fragment",
		set:     func(d dest, v string) error { d.src.BaseURL = v; return erp.ValidateBaseURL(v) }},
	{name: "auth", level: loginLevel, env: "ERPSYNC_ERP_AUTH", def: "token",
		doc: "`token` (user + password) or `plugin` (client id + secret)",
		set: func(d dest, v string) (err error) { d.login.Auth, err = oneOf(v, "token", "plugin"); return }},
	{name: "username", level: loginLevel, env: "ERPSYNC_ERP_USERNAME", doc: "integration user",
		set: func(d dest, v string) error { d.login.Username = v; return nil }},
	{name: "password", level: loginLevel, env: "ERPSYNC_ERP_PASSWORD", secret: true, doc: "its password, or a file holding it",
		set: func(d dest, v string) error { d.login.Password = Secret(v); return nil }},
	{name: "plugin_scheme", level: loginLevel, env: "ERPSYNC_ERP_PLUGIN_SCHEME", def: "ERPPlugin",
		doc: "scheme of `Authorization: <scheme> <id>.<secret>`",
		set: func(d dest, v string) (err error) { d.login.PluginScheme, err = word(v); return }},
	{name: "client_id", level: loginLevel, env: "ERPSYNC_ERP_CLIENT_ID", doc: "extension client id",
		set: func(d dest, v string) error { d.login.ClientID = v; return nil }},
	{name: "client_secret", level: loginLevel, env: "ERPSYNC_ERP_CLIENT_SECRET", secret: true,
		doc: "extension client secret, or a file holding it",
		set: func(d dest, v string) error { d.login.ClientSecret = Secret(v); return nil }},
	{name: "logins", level: sourceLevel,
		doc: "several logins of one source, each with the keys of one login above, instead of those keys on the source ([Logins](#logins))"},
	{name: "max_concurrent_requests", level: sourceLevel, env: "ERPSYNC_ERP_MAX_CONCURRENT_REQUESTS", def: strconv.Itoa(DefaultMaxConcurrentRequests),
		doc: "requests one process has in flight to the installation, across its streams and logins (1 to 100)",
		set: func(d dest, v string) (err error) { d.src.MaxConcurrentRequests, err = intBetween(v, 1, 100); return }},
	{name: "max_requests_per_second", level: sourceLevel, env: "ERPSYNC_ERP_MAX_REQUESTS_PER_SECOND", def: "0",
		doc: "spaces those requests: at most this many starts a second (0 to 10000; 0 is no limit)",
		set: func(d dest, v string) (err error) {
			d.src.MaxRequestsPerSecond, err = floatBetween(v, 0, 10000)
			return
		}},
	{name: "requests_per_hour", level: sourceLevel, env: "ERPSYNC_ERP_REQUESTS_PER_HOUR", def: "0",
		doc: "a budget of requests an hour to the installation: window runs and complete sweeps are spaced out to fit it, follow runs never (0 is none; [The request budget](#the-request-budget))",
		set: func(d dest, v string) (err error) { d.src.RequestsPerHour, err = intBetween(v, 0, 100_000_000); return }},
	{name: "page_size", level: sourceLevel, env: "ERPSYNC_ERP_PAGE_SIZE", def: "500",
		doc: "records per page requested (1 to 10000)",
		set: func(d dest, v string) (err error) { d.src.PageSize, err = intBetween(v, 1, 10000); return }},
	{name: "timeout", level: sourceLevel, env: "ERPSYNC_ERP_TIMEOUT", def: "60s", doc: "per HTTP request",
		set: func(d dest, v string) (err error) {
			d.src.Timeout, err = duration(v, time.Millisecond, "a millisecond")
			return
		}},
	{name: "max_response", level: sourceLevel, env: "ERPSYNC_ERP_MAX_RESPONSE", def: sizeText(erp.DefaultMaxResponse),
		doc: "the largest ERP answer read (`64MiB`, `512KiB`, bytes; at least `64KiB`); a larger one fails the run, naming the route",
		set: func(d dest, v string) (err error) { d.src.MaxResponse, err = size(v); return }},
	{name: "messaging_prefix", level: sourceLevel, env: "ERPSYNC_ERP_MESSAGING_PREFIX", def: "/messaging",
		doc: "where the installation serves its messaging channel",
		set: func(d dest, v string) (err error) { d.src.MessagingPrefix, err = urlPath(v); return }},
	{name: "streams", env: "ERPSYNC_STREAMS", defDoc: "the core streams",
		doc: "streams to enable on every source (the variable: comma-separated); else each source's `streams`"},
	{name: "streams", level: sourceLevel, defDoc: "the core streams",
		doc: "the streams the source enables, each with its settings ([below](#streams-schedules-and-settings-per-stream))"},
	{name: "schedule", level: streamLevel, env: "ERPSYNC_SCHEDULE", top: true, defDoc: "the stream's",
		doc: "cron spec (5 fields, `@every 5m`, `CRON_TZ=Europe/Berlin 0 6 * * *`): every run, or the follow runs of a stream that follows",
		set: func(d dest, v string) error { d.stream.Schedule = v; return checkSchedule(v) }},
	{name: "sweep_schedule", level: streamLevel, env: "ERPSYNC_SWEEP_SCHEDULE", top: true, follows: true, defDoc: "its `schedule` if set, else the stream's",
		doc: "a stream that follows: when it reads its whole list ([Schedules](#streams-schedules-and-settings-per-stream))",
		set: func(d dest, v string) error { d.stream.SweepSchedule = v; return checkSchedule(v) }},
	{name: "window_schedule", level: streamLevel, env: "ERPSYNC_WINDOW_SCHEDULE", top: true, follows: true,
		defDoc: "the stream's where neither `schedule` nor `sweep_schedule` is set; else none",
		doc:    "a stream that follows: when it re-reads its newest pages, where records change most ([Schedules](#streams-schedules-and-settings-per-stream))",
		set:    func(d dest, v string) error { d.stream.WindowSchedule = v; return checkSchedule(v) }},
	{name: "window_pages", level: streamLevel, def: "0", follows: true,
		doc: "a stream that follows: how many of its newest pages a window run re-reads (0 to " + strconv.Itoa(model.MaxWindowPages) + "); 0 learns it from where changes were seen",
		set: func(d dest, v string) (err error) {
			d.stream.WindowPages, err = intBetween(v, 0, model.MaxWindowPages)
			return
		}},
	{name: "history", level: streamLevel, env: "ERPSYNC_HISTORY", envNames: true, defDoc: "the stream's",
		doc: "read and checked (a stream it names must exist), no longer obeyed: Postgres keeps the versions of every table with a history; the variable: `none`, or the streams named",
		set: func(d dest, v string) error { on, err := boolean(v); d.stream.History = &on; return err }},
	{name: "drift", level: streamLevel, def: DriftRecord,
		doc: "when records stop matching the stream's typed columns: `record` the drift, or `stop` the run before it writes",
		set: func(d dest, v string) (err error) { d.stream.Drift, err = oneOf(v, DriftRecord, DriftStop); return }},
	{name: "log_format", env: "ERPSYNC_LOG_FORMAT", def: "text", doc: "`text` (tint, colour on a terminal) or `json`",
		set: func(d dest, v string) (err error) { d.cfg.LogFormat, err = oneOf(v, "text", "json"); return }},
	{name: "log_level", env: "ERPSYNC_LOG_LEVEL", def: "info", doc: "`debug`, `info`, `warn`, `error`",
		set: func(d dest, v string) (err error) {
			d.cfg.LogLevel, err = oneOf(v, "debug", "info", "warn", "error")
			return
		}},
	{name: "http_addr", env: "ERPSYNC_HTTP_ADDR", def: ":8080", doc: "address of `/healthz`, `/readyz`, `/metrics`",
		set: func(d dest, v string) (err error) { d.cfg.HTTPAddr, err = hostPort(v); return }},
	{name: "shutdown_timeout", env: "ERPSYNC_SHUTDOWN_TIMEOUT", def: defaultShutdownTimeout.String(),
		doc: "SIGTERM to exit, every phase included (see [Stopping](operating.md#stopping))",
		set: func(d dest, v string) (err error) {
			min := ShutdownWithGrace(time.Second).Timeout
			d.cfg.Shutdown.Timeout, err = duration(v, min, min.String())
			return
		}},
	{name: "shutdown_grace", env: "ERPSYNC_SHUTDOWN_GRACE", defDoc: "the timeout less 8 s (`17s`)",
		doc: "of that, how long runs get to commit the page in flight",
		set: func(d dest, v string) (err error) { d.cfg.Shutdown.Grace, err = duration(v, 0, ""); return }},
	{name: "auto_migrate", env: "ERPSYNC_AUTO_MIGRATE", def: "true", doc: "`false`: `run` refuses a schema that is behind",
		set: func(d dest, v string) (err error) { d.cfg.AutoMigrate, err = boolean(v); return }},
	{name: "migrate_database_url", env: "ERPSYNC_MIGRATE_DATABASE_URL", defDoc: "none", exposes: hasPassword,
		doc: "the schema owner's connection, for migrations, when `ERPSYNC_DATABASE_URL` may only do DML",
		set: func(d dest, v string) error { d.cfg.MigrateDatabaseURL = Secret(v); return nil }},
	{name: "db_lock_timeout", env: "ERPSYNC_DB_LOCK_TIMEOUT", def: "15s", doc: "`lock_timeout` of erpsync's sessions",
		set: func(d dest, v string) (err error) { d.cfg.Database.LockTimeout, err = sessionLimit(v); return }},
	{name: "db_statement_timeout", env: "ERPSYNC_DB_STATEMENT_TIMEOUT", def: "5m", doc: "`statement_timeout`",
		set: func(d dest, v string) (err error) { d.cfg.Database.StatementTimeout, err = sessionLimit(v); return }},
	{name: "db_idle_in_transaction_timeout", env: "ERPSYNC_DB_IDLE_IN_TRANSACTION_TIMEOUT", def: "1m",
		doc: "`idle_in_transaction_session_timeout`",
		set: func(d dest, v string) (err error) { d.cfg.Database.IdleInTxTimeout, err = sessionLimit(v); return }},
	{name: "max_concurrent_runs", env: "ERPSYNC_MAX_CONCURRENT_RUNS", def: "8",
		doc: "runs one process has going at once, one database connection each (1 to 1000)",
		set: func(d dest, v string) (err error) { d.cfg.MaxConcurrentRuns, err = intBetween(v, 1, 1000); return }},
	{name: "retention", env: "ERPSYNC_RETENTION", def: "90d",
		doc: "run records and rejected records older than this are pruned (the last 20 runs of each stream stay)",
		set: func(d dest, v string) (err error) { d.cfg.Retention, err = duration(v, 24*time.Hour, "a day"); return }},
}

// sessionLimit reads a limit of erpsync's Postgres sessions.
func sessionLimit(v string) (time.Duration, error) {
	return duration(v, time.Second, "a second (0 would mean no limit, which erpsync does not allow)")
}

// keyAt is the key of a level by name.
func keyAt(l level, name string) (key, bool) {
	i := slices.IndexFunc(keys, func(k key) bool { return k.level == l && k.name == name })
	if i < 0 {
		return key{}, false
	}
	return keys[i], true
}

// keyNamed is keyAt for the names the loader asks for, which are in the
// table.
func keyNamed(l level, name string) key {
	k, ok := keyAt(l, name)
	if !ok {
		panic("config: no key " + name)
	}
	return k
}

// secretNamed is the secret key of that name, which the file never
// writes as it is.
func secretNamed(name string) (key, bool) {
	i := slices.IndexFunc(keys, func(k key) bool { return k.secret && k.name == name })
	if i < 0 {
		return key{}, false
	}
	return keys[i], true
}

// The keys the loader reads by name.
var (
	nameKey          = keyNamed(sourceLevel, "name")
	baseURLKey       = keyNamed(sourceLevel, "base_url")
	maxResponseKey   = keyNamed(sourceLevel, "max_response")
	usernameKey      = keyNamed(loginLevel, "username")
	clientIDKey      = keyNamed(loginLevel, "client_id")
	passwordKey      = keyNamed(loginLevel, "password")
	clientSecretKey  = keyNamed(loginLevel, "client_secret")
	scheduleKey      = keyNamed(streamLevel, "schedule")
	sweepScheduleKey = keyNamed(streamLevel, "sweep_schedule")
	windowKey        = keyNamed(streamLevel, "window_schedule")
	windowPagesKey   = keyNamed(streamLevel, "window_pages")
	requestsKey      = keyNamed(sourceLevel, "requests_per_hour")
	historyKey       = keyNamed(streamLevel, "history")
	streamsEnv       = keyNamed(topLevel, "streams").env
)

// fileKeys are the keys a place of the file takes, as written there (a
// secret's two forms), in the table's order.
func fileKeys(levels ...level) []string {
	var out []string
	for _, k := range keys {
		if k.name == "" || !slices.Contains(levels, k.level) && !(k.top && slices.Contains(levels, topLevel)) {
			continue
		}
		if k.secret {
			out = append(out, k.name+"_file", k.name+"_env")
		} else {
			out = append(out, k.name)
		}
	}
	return out
}
