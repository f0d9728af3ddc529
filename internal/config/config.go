// Package config turns the YAML file and ERPSYNC_* environment variables
// into one validated Config value. Environment first, file second; every
// error names the key that is wrong.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"gopkg.in/yaml.v3"

	"github.com/erpsync/erpsync/internal/erp"
)

// Error is a configuration problem; the CLI exits 2 on it.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func errf(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// IsConfigError reports whether err is (or wraps) a configuration problem.
func IsConfigError(err error) bool {
	var ce *Error
	return errors.As(err, &ce)
}

// Secret holds a password or client secret. Its String and GoString never
// show the value, so a secret that slips into a log line or an error
// prints as a mask.
type Secret string

func (Secret) String() string   { return "[redacted]" }
func (Secret) GoString() string { return "[redacted]" }

// Format covers every verb, %d and %x included: fmt's bad-verb path
// would otherwise print the value.
func (Secret) Format(f fmt.State, _ rune) { io.WriteString(f, "[redacted]") }

// MarshalJSON and MarshalText keep the value out of JSON logs and dumps.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }
func (Secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

// LogValue keeps the value out of every slog handler.
func (Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// Value is the one way to read the secret; grep for it to audit use.
func (s Secret) Value() string { return string(s) }

// Config is the whole, validated configuration.
type Config struct {
	DatabaseURL Secret
	// MigrateDatabaseURL, when set, is the role migrations run as (the
	// schema's owner); DatabaseURL then needs no right but DML.
	MigrateDatabaseURL Secret
	Database           Database
	LogFormat          string // text | json
	LogLevel           string // debug | info | warn | error
	HTTPAddr           string
	Shutdown           Shutdown
	AutoMigrate        bool
	// MaxConcurrentRuns bounds the runs one process has going at once;
	// each holds one database connection.
	MaxConcurrentRuns int
	// Retention is how long run records and rejected records are kept.
	Retention time.Duration
	Sources   []Source
}

// Database are the limits erpsync sets on its own Postgres sessions, so a
// lock another session holds or a statement gone wrong fails a run
// instead of hanging it.
type Database struct {
	LockTimeout      time.Duration
	StatementTimeout time.Duration
	IdleInTxTimeout  time.Duration
}

// Shutdown is how a stop is spent. It is derived from one bound, Timeout,
// so that the whole fits the stop timeout of the service manager (30 s in
// the systemd unit and the Kubernetes example): runs get Grace to commit
// what they are writing, then are aborted and get Abort to end; tokens
// are revoked within Revoke; the endpoints drain within HTTP.
type Shutdown struct {
	Timeout, Grace, Abort, Revoke, HTTP time.Duration
}

// The fixed phases of a stop; Grace gets the rest of the timeout.
const (
	shutdownAbort  = 3 * time.Second
	shutdownRevoke = 3 * time.Second
	shutdownHTTP   = 2 * time.Second
)

// ShutdownWithin spends timeout: the fixed phases, and the rest as grace.
func ShutdownWithin(timeout time.Duration) Shutdown {
	return Shutdown{Timeout: timeout, Grace: timeout - shutdownAbort - shutdownRevoke - shutdownHTTP,
		Abort: shutdownAbort, Revoke: shutdownRevoke, HTTP: shutdownHTTP}
}

// ShutdownWithGrace is the stop that gives runs grace to commit.
func ShutdownWithGrace(grace time.Duration) Shutdown {
	return ShutdownWithin(grace + shutdownAbort + shutdownRevoke + shutdownHTTP)
}

// Source is one ERP installation: one base URL, read through one or more
// logins, each in the company and branch context its token carries.
type Source struct {
	Name    string
	BaseURL string
	Logins  []Login
	// PageSize is the number of records asked for per page.
	PageSize int
	Timeout  time.Duration // per HTTP request
	// MaxResponse bounds one ERP answer, in bytes.
	MaxResponse int64
	// MessagingPrefix is where the installation serves its messaging
	// channel ("/messaging" unless it says otherwise).
	MessagingPrefix string
	// MaxConcurrentRequests bounds the requests one process has in flight
	// to the installation, across its streams and logins: the ERP is
	// shared with the people who work in it.
	MaxConcurrentRequests int
	// MaxRequestsPerSecond, when positive, spaces those requests.
	MaxRequestsPerSecond float64
	Streams              []StreamConfig
	// Keys names the settings of the source, for messages that tell the
	// operator what to check.
	Keys SourceKeys
}

// SourceKeys are the names, as the operator wrote them (an environment
// variable or a key of the config file), of a source's settings.
type SourceKeys struct {
	MaxResponse string
}

// Login is one user (or extension client) of an installation.
type Login struct {
	Auth         string // token | plugin
	Username     string
	Password     Secret
	PluginScheme string
	ClientID     string
	ClientSecret Secret
	// Keys names the settings the credentials came from.
	Keys LoginKeys
}

// LoginKeys are the names, as the operator wrote them, of a login's
// credentials.
type LoginKeys struct {
	Username, Password, ClientID, ClientSecret string
}

// Name is what the login is known by: its username, or its client id.
func (l Login) Name() string {
	if l.Auth == "plugin" {
		return l.ClientID
	}
	return l.Username
}

// CredentialKeys says which settings hold the login's credentials.
func (l Login) CredentialKeys() string {
	if l.Auth == "plugin" {
		return l.Keys.ClientID + " and " + l.Keys.ClientSecret
	}
	return l.Keys.Username + " and " + l.Keys.Password
}

// StreamConfig is one enabled stream of a source.
type StreamConfig struct {
	Name     string
	Schedule string
	// History says whether the stream keeps the versions its rows
	// replace; nil leaves it to the stream.
	History *bool
	// Settings are the stream's own settings (StreamSpec.Settings), every
	// one filled in: configured or default.
	Settings map[string]string
}

// Stream returns the enabled stream by name.
func (s Source) Stream(name string) (StreamConfig, bool) {
	i := slices.IndexFunc(s.Streams, func(sc StreamConfig) bool { return sc.Name == name })
	if i < 0 {
		return StreamConfig{}, false
	}
	return s.Streams[i], true
}

// StreamSpec is what configuration needs to know of a stream: the
// catalog of streams is handed to Load as a list of these, so that
// nothing here names a stream.
type StreamSpec struct {
	Name     string
	Schedule string // default schedule
	// Core: enabled when neither the file nor ERPSYNC_STREAMS names any.
	Core bool
	// History: the stream has a history table, so it can keep history.
	History  bool
	Settings []SettingSpec
}

// SettingSpec is a setting of a stream's own (a balance sheet's months):
// a key of streams.<name> in the file.
type SettingSpec struct {
	Key, Default string
	// Check refuses a value, saying why; nil accepts any.
	Check func(string) error
}

// file is the YAML shape (configs/erpsync.example.yaml documents it).
type file struct {
	DatabaseURL        string       `yaml:"database_url"`
	MigrateDatabaseURL string       `yaml:"migrate_database_url"`
	DBLockTimeout      string       `yaml:"db_lock_timeout"`
	DBStatementTimeout string       `yaml:"db_statement_timeout"`
	DBIdleInTxTimeout  string       `yaml:"db_idle_in_transaction_timeout"`
	MaxConcurrentRuns  int          `yaml:"max_concurrent_runs"`
	Retention          string       `yaml:"retention"`
	LogFormat          string       `yaml:"log_format"`
	LogLevel           string       `yaml:"log_level"`
	HTTPAddr           string       `yaml:"http_addr"`
	Schedule           string       `yaml:"schedule"`
	ShutdownTimeout    string       `yaml:"shutdown_timeout"`
	ShutdownGrace      string       `yaml:"shutdown_grace"`
	AutoMigrate        *bool        `yaml:"auto_migrate"`
	Streams            []string     `yaml:"streams"`
	Sources            []fileSource `yaml:"sources"`
}

type fileSource struct {
	Name                  string                       `yaml:"name"`
	BaseURL               string                       `yaml:"base_url"`
	Logins                []fileLogin                  `yaml:"logins"`
	PageSize              int                          `yaml:"page_size"`
	Timeout               string                       `yaml:"timeout"`
	MaxResponse           string                       `yaml:"max_response"`
	MessagingPrefix       string                       `yaml:"messaging_prefix"`
	MaxConcurrentRequests int                          `yaml:"max_concurrent_requests"`
	MaxRequestsPerSecond  float64                      `yaml:"max_requests_per_second"`
	Streams               map[string]map[string]string `yaml:"streams"`
	// The single-login keys: one login, written on the source itself.
	fileLogin `yaml:",inline"`
}

// fileLogin is a login as the file writes it.
type fileLogin struct {
	Auth             string `yaml:"auth"`
	Username         string `yaml:"username"`
	PasswordFile     string `yaml:"password_file"`
	PasswordEnv      string `yaml:"password_env"`
	PluginScheme     string `yaml:"plugin_scheme"`
	ClientID         string `yaml:"client_id"`
	ClientSecretFile string `yaml:"client_secret_file"`
	ClientSecretEnv  string `yaml:"client_secret_env"`
}

// set lists the keys the login sets, as the file names them.
func (l fileLogin) set() []string {
	var out []string
	for _, kv := range [][2]string{{"auth", l.Auth}, {"username", l.Username}, {"password_file", l.PasswordFile},
		{"password_env", l.PasswordEnv}, {"plugin_scheme", l.PluginScheme}, {"client_id", l.ClientID},
		{"client_secret_file", l.ClientSecretFile}, {"client_secret_env", l.ClientSecretEnv}} {
		if kv[1] != "" {
			out = append(out, kv[0])
		}
	}
	return out
}

// Options are what the command line adds on top of the environment.
type Options struct {
	ConfigFile string
	// Streams is the catalog: the streams a source may enable, with their
	// defaults and settings. Names outside it are refused.
	Streams []StreamSpec
	// NeedERP requires at least one source with a base URL and credentials.
	NeedERP bool
}

// Load reads the configuration from environ (os.Environ() form) and the
// optional YAML file. Tests pass their own environ.
func Load(environ []string, opts Options) (Config, error) {
	env := envMap(environ)
	var f file
	path := cmp.Or(opts.ConfigFile, env["ERPSYNC_CONFIG"])
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, errf("config file: %v", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
			return Config{}, errf("config file %s: %v", path, err)
		}
	}

	cfg := Config{
		DatabaseURL: Secret(cmp.Or(env["ERPSYNC_DATABASE_URL"], env["DATABASE_URL"], f.DatabaseURL)),
		LogFormat:   cmp.Or(env["ERPSYNC_LOG_FORMAT"], f.LogFormat, "text"),
		LogLevel:    cmp.Or(env["ERPSYNC_LOG_LEVEL"], f.LogLevel, "info"),
		HTTPAddr:    cmp.Or(env["ERPSYNC_HTTP_ADDR"], f.HTTPAddr, ":8080"),
		AutoMigrate: true,
	}
	if !slices.Contains([]string{"text", "json"}, cfg.LogFormat) {
		return Config{}, errf("ERPSYNC_LOG_FORMAT: %q is not text or json", cfg.LogFormat)
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, cfg.LogLevel) {
		return Config{}, errf("ERPSYNC_LOG_LEVEL: %q is not debug, info, warn or error", cfg.LogLevel)
	}
	if _, _, err := net.SplitHostPort(cfg.HTTPAddr); err != nil {
		return Config{}, errf("ERPSYNC_HTTP_ADDR: %q is not host:port", cfg.HTTPAddr)
	}
	var err error
	if cfg.Shutdown, err = shutdown(env, f); err != nil {
		return Config{}, err
	}
	if cfg.Database, err = database(env, f); err != nil {
		return Config{}, err
	}
	cfg.MigrateDatabaseURL = Secret(cmp.Or(env["ERPSYNC_MIGRATE_DATABASE_URL"], f.MigrateDatabaseURL))
	if cfg.MaxConcurrentRuns, err = positiveInt("ERPSYNC_MAX_CONCURRENT_RUNS", env["ERPSYNC_MAX_CONCURRENT_RUNS"], f.MaxConcurrentRuns, 8, 1000); err != nil {
		return Config{}, err
	}
	if cfg.Retention, err = parseDuration("ERPSYNC_RETENTION", cmp.Or(env["ERPSYNC_RETENTION"], f.Retention, "90d")); err != nil {
		return Config{}, err
	}
	if cfg.Retention < 24*time.Hour {
		return Config{}, errf("ERPSYNC_RETENTION (retention): %s is less than a day", cfg.Retention)
	}
	if f.AutoMigrate != nil {
		cfg.AutoMigrate = *f.AutoMigrate
	}
	if v, ok := env["ERPSYNC_AUTO_MIGRATE"]; ok && v != "" {
		switch strings.ToLower(v) {
		case "true", "1", "yes":
			cfg.AutoMigrate = true
		case "false", "0", "no":
			cfg.AutoMigrate = false
		default:
			return Config{}, errf("ERPSYNC_AUTO_MIGRATE: %q is not true or false", v)
		}
	}

	defaultSchedule := cmp.Or(env["ERPSYNC_SCHEDULE"], f.Schedule)
	enabled := f.Streams
	if v := env["ERPSYNC_STREAMS"]; v != "" {
		enabled = splitList(v)
	}

	sources, err := buildSources(env, f, enabled, defaultSchedule, opts.Streams)
	if err != nil {
		return Config{}, err
	}
	cfg.Sources = sources
	if v := strings.TrimSpace(env["ERPSYNC_HISTORY"]); v != "" {
		applyHistory(cfg.Sources, v)
	}
	for _, s := range cfg.Sources {
		if err := validateSource(s, opts); err != nil {
			return Config{}, err
		}
	}
	if opts.NeedERP && len(cfg.Sources) == 0 {
		return Config{}, errf("no ERP source: set ERPSYNC_ERP_BASE_URL or list sources in the config file")
	}
	return cfg, nil
}

// RequireDatabase is the check every command that touches Postgres makes.
func (c Config) RequireDatabase() error {
	if c.DatabaseURL == "" {
		return errf("no database: set ERPSYNC_DATABASE_URL (or DATABASE_URL, or database_url in the config file)")
	}
	return nil
}

func buildSources(env map[string]string, f file, enabled []string, defaultSchedule string, specs []StreamSpec) ([]Source, error) {
	envName := cmp.Or(env["ERPSYNC_SOURCE"], "default")
	envTouches := env["ERPSYNC_ERP_BASE_URL"] != "" || len(envLoginKeys(env)) > 0

	var out []Source
	seen := map[string]bool{}
	matched := false
	for i, fs := range f.Sources {
		where := fmt.Sprintf("sources[%d]", i)
		if fs.Name == "" {
			fs.Name = "default"
		}
		if seen[fs.Name] {
			return nil, errf("%s: source name %q is used twice", where, fs.Name)
		}
		seen[fs.Name] = true
		src, err := fileSourceToSource(where, fs, env, enabled, defaultSchedule, specs)
		if err != nil {
			return nil, err
		}
		if fs.Name == envName {
			matched = true
			if keys := envLoginKeys(env); len(keys) > 0 && len(fs.Logins) > 0 {
				return nil, errf("%s.logins and %s: a source lists its logins, or has one login from the single-login settings, not both",
					where, strings.Join(keys, ", "))
			}
			if src, err = applyEnv(where, src, env); err != nil {
				return nil, err
			}
		}
		out = append(out, src)
	}
	if !matched && envTouches {
		src := Source{Name: envName, Logins: []Login{{}}}
		var err error
		if src.Streams, err = streamList("", enabled, nil, defaultSchedule, specs); err != nil {
			return nil, err
		}
		if src, err = applyEnv("", src, env); err != nil {
			return nil, err
		}
		out = append(out, src)
	}
	for i := range out {
		s := &out[i]
		for j := range s.Logins {
			s.Logins[j].Auth = cmp.Or(s.Logins[j].Auth, "token")
			s.Logins[j].PluginScheme = cmp.Or(s.Logins[j].PluginScheme, "ERPPlugin")
		}
		if s.PageSize == 0 {
			s.PageSize = 500
		}
		if s.Timeout == 0 {
			s.Timeout = 60 * time.Second
		}
		if s.MaxResponse == 0 {
			s.MaxResponse = DefaultMaxResponse
		}
		if s.MaxConcurrentRequests == 0 {
			s.MaxConcurrentRequests = DefaultMaxConcurrentRequests
		}
		s.MessagingPrefix = cmp.Or(s.MessagingPrefix, "/messaging")
	}
	return out, nil
}

// DefaultMaxConcurrentRequests is how many requests one process has in
// flight to an installation unless configured: enough to overlap a page
// fetch with another stream's, little next to the people using the ERP.
const DefaultMaxConcurrentRequests = 2

func fileSourceToSource(where string, fs fileSource, env map[string]string, enabled []string, defaultSchedule string, specs []StreamSpec) (Source, error) {
	src := Source{
		Name:                  fs.Name,
		BaseURL:               fs.BaseURL,
		PageSize:              fs.PageSize,
		MessagingPrefix:       fs.MessagingPrefix,
		MaxConcurrentRequests: fs.MaxConcurrentRequests,
		MaxRequestsPerSecond:  fs.MaxRequestsPerSecond,
		Keys:                  SourceKeys{MaxResponse: where + ".max_response"},
	}
	single := fs.fileLogin.set()
	switch {
	case len(fs.Logins) > 0 && len(single) > 0:
		return Source{}, errf("%s: logins and %s.%s: a source lists its logins, or has one login from the single-login keys, not both",
			where, where, strings.Join(single, ", "+where+"."))
	case len(fs.Logins) > 0:
		for j, fl := range fs.Logins {
			l, err := fileLoginToLogin(fmt.Sprintf("%s.logins[%d]", where, j), fl, env)
			if err != nil {
				return Source{}, err
			}
			src.Logins = append(src.Logins, l)
		}
	default:
		l, err := fileLoginToLogin(where, fs.fileLogin, env)
		if err != nil {
			return Source{}, err
		}
		src.Logins = []Login{l}
	}
	var err error
	if fs.Timeout != "" {
		if src.Timeout, err = parseDuration(where+".timeout", fs.Timeout); err != nil {
			return Source{}, err
		}
	}
	if fs.MaxResponse != "" {
		if src.MaxResponse, err = parseSize(where+".max_response", fs.MaxResponse); err != nil {
			return Source{}, err
		}
	}
	names := enabled
	if len(fs.Streams) > 0 && len(enabled) == 0 {
		for name := range fs.Streams {
			names = append(names, name)
		}
		slices.Sort(names)
	}
	if src.Streams, err = streamList(where, names, fs.Streams, defaultSchedule, specs); err != nil {
		return Source{}, err
	}
	return src, nil
}

// fileLoginToLogin reads a login's keys; where names it in messages.
func fileLoginToLogin(where string, fl fileLogin, env map[string]string) (Login, error) {
	l := Login{Auth: fl.Auth, Username: fl.Username, PluginScheme: fl.PluginScheme, ClientID: fl.ClientID}
	l.Keys = LoginKeys{
		Username:     where + ".username",
		Password:     secretOrigin(where+".password_env", fl.PasswordEnv, where+".password_file"),
		ClientID:     where + ".client_id",
		ClientSecret: secretOrigin(where+".client_secret_env", fl.ClientSecretEnv, where+".client_secret_file"),
	}
	var err error
	if l.Password, err = secretFrom(where+".password_env", where+".password_file", env, fl.PasswordEnv, fl.PasswordFile); err != nil {
		return Login{}, err
	}
	if l.ClientSecret, err = secretFrom(where+".client_secret_env", where+".client_secret_file", env, fl.ClientSecretEnv, fl.ClientSecretFile); err != nil {
		return Login{}, err
	}
	return l, nil
}

// applyHistory applies ERPSYNC_HISTORY to every source: "none", or the
// streams that keep history (every other stream then keeps none).
func applyHistory(sources []Source, v string) {
	keep := splitList(v)
	if strings.EqualFold(v, "none") {
		keep = nil
	}
	for _, src := range sources {
		for i := range src.Streams {
			on := slices.Contains(keep, src.Streams[i].Name)
			src.Streams[i].History = &on
		}
	}
}

// streamList builds the enabled streams (names; the catalog's core
// streams when none are named) with their settings from the file's
// streams.<name> (where names the source in messages). Keys other than
// schedule, history and the stream's own settings are refused.
func streamList(where string, names []string, file map[string]map[string]string, defaultSchedule string, specs []StreamSpec) ([]StreamConfig, error) {
	if len(names) == 0 {
		for _, sp := range specs {
			if sp.Core {
				names = append(names, sp.Name)
			}
		}
	}
	out := make([]StreamConfig, 0, len(names))
	for _, n := range names {
		sp := specOf(specs, n)
		keys := file[n]
		sc := StreamConfig{Name: n, Schedule: cmp.Or(keys["schedule"], defaultSchedule, sp.Schedule, "@every 30m"), Settings: map[string]string{}}
		at := "streams." + n
		if where != "" {
			at = where + "." + at
		}
		for k, v := range keys {
			switch k {
			case "schedule":
			case "history":
				on, err := strconv.ParseBool(v)
				if err != nil {
					return nil, errf("%s.history: %q is not true or false", at, v)
				}
				sc.History = &on
			default:
				set := slices.IndexFunc(sp.Settings, func(s SettingSpec) bool { return s.Key == k })
				if set < 0 {
					return nil, errf("%s.%s: %s", at, k, unknownSetting(sp))
				}
				if check := sp.Settings[set].Check; check != nil {
					if err := check(v); err != nil {
						return nil, errf("%s.%s: %q: %v", at, k, v, err)
					}
				}
				sc.Settings[k] = v
			}
		}
		for _, set := range sp.Settings {
			if _, ok := sc.Settings[set.Key]; !ok {
				sc.Settings[set.Key] = set.Default
			}
		}
		out = append(out, sc)
	}
	return out, nil
}

func specOf(specs []StreamSpec, name string) StreamSpec {
	if i := slices.IndexFunc(specs, func(s StreamSpec) bool { return s.Name == name }); i >= 0 {
		return specs[i]
	}
	return StreamSpec{Name: name}
}

func unknownSetting(sp StreamSpec) string {
	keys := []string{"schedule", "history"}
	for _, s := range sp.Settings {
		keys = append(keys, s.Key)
	}
	return "unknown setting; " + sp.Name + " takes " + strings.Join(keys, ", ")
}

// envLoginKeys lists the single-login variables set.
func envLoginKeys(env map[string]string) []string {
	var out []string
	for _, k := range []string{"ERPSYNC_ERP_AUTH", "ERPSYNC_ERP_USERNAME", "ERPSYNC_ERP_PASSWORD", "ERPSYNC_ERP_PASSWORD_FILE",
		"ERPSYNC_ERP_PLUGIN_SCHEME", "ERPSYNC_ERP_CLIENT_ID", "ERPSYNC_ERP_CLIENT_SECRET", "ERPSYNC_ERP_CLIENT_SECRET_FILE"} {
		if env[k] != "" {
			out = append(out, k)
		}
	}
	return out
}

// applyEnv puts the ERPSYNC_ERP_* variables on the source they name
// (where is its place in the file, "" for a source of the environment
// alone). The single-login variables are its one login (the caller
// refuses them for a source that lists its logins).
func applyEnv(where string, src Source, env map[string]string) (Source, error) {
	src.BaseURL = cmp.Or(env["ERPSYNC_ERP_BASE_URL"], src.BaseURL)
	if len(envLoginKeys(env)) > 0 {
		l, err := applyEnvLogin(src.Logins[0], env)
		if err != nil {
			return Source{}, err
		}
		src.Logins[0] = l
	} else if len(src.Logins) == 1 && src.Logins[0].Keys.Username == "" {
		// A source of the environment alone names the variables it lacks.
		src.Logins[0].Keys = LoginKeys{Username: "ERPSYNC_ERP_USERNAME", Password: "ERPSYNC_ERP_PASSWORD",
			ClientID: "ERPSYNC_ERP_CLIENT_ID", ClientSecret: "ERPSYNC_ERP_CLIENT_SECRET"}
	}
	if v := env["ERPSYNC_ERP_PAGE_SIZE"]; v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return Source{}, errf("ERPSYNC_ERP_PAGE_SIZE: %q is not a positive number", v)
		}
		src.PageSize = n
	}
	if v := env["ERPSYNC_ERP_TIMEOUT"]; v != "" {
		d, err := parseDuration("ERPSYNC_ERP_TIMEOUT", v)
		if err != nil {
			return Source{}, err
		}
		src.Timeout = d
	}
	if v := env["ERPSYNC_ERP_MAX_RESPONSE"]; v != "" || where == "" {
		src.Keys.MaxResponse = "ERPSYNC_ERP_MAX_RESPONSE"
		if v != "" {
			n, err := parseSize("ERPSYNC_ERP_MAX_RESPONSE", v)
			if err != nil {
				return Source{}, err
			}
			src.MaxResponse = n
		}
	}
	if v := env["ERPSYNC_ERP_MAX_CONCURRENT_REQUESTS"]; v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return Source{}, errf("ERPSYNC_ERP_MAX_CONCURRENT_REQUESTS: %q is not a positive number", v)
		}
		src.MaxConcurrentRequests = n
	}
	if v := env["ERPSYNC_ERP_MAX_REQUESTS_PER_SECOND"]; v != "" {
		n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return Source{}, errf("ERPSYNC_ERP_MAX_REQUESTS_PER_SECOND: %q is not a number", v)
		}
		src.MaxRequestsPerSecond = n
	}
	src.MessagingPrefix = cmp.Or(env["ERPSYNC_ERP_MESSAGING_PREFIX"], src.MessagingPrefix)
	return src, nil
}

// applyEnvLogin puts the single-login variables on a login.
func applyEnvLogin(l Login, env map[string]string) (Login, error) {
	if env["ERPSYNC_ERP_USERNAME"] != "" || l.Keys.Username == "" {
		l.Keys.Username = "ERPSYNC_ERP_USERNAME"
	}
	if env["ERPSYNC_ERP_CLIENT_ID"] != "" || l.Keys.ClientID == "" {
		l.Keys.ClientID = "ERPSYNC_ERP_CLIENT_ID"
	}
	l.Keys.Password = envSecretOrigin(env, "ERPSYNC_ERP_PASSWORD", l.Keys.Password)
	l.Keys.ClientSecret = envSecretOrigin(env, "ERPSYNC_ERP_CLIENT_SECRET", l.Keys.ClientSecret)
	l.Username = cmp.Or(env["ERPSYNC_ERP_USERNAME"], l.Username)
	l.Auth = cmp.Or(env["ERPSYNC_ERP_AUTH"], l.Auth)
	l.PluginScheme = cmp.Or(env["ERPSYNC_ERP_PLUGIN_SCHEME"], l.PluginScheme)
	l.ClientID = cmp.Or(env["ERPSYNC_ERP_CLIENT_ID"], l.ClientID)
	pw, err := secretFrom("ERPSYNC_ERP_PASSWORD", "ERPSYNC_ERP_PASSWORD_FILE", env, "ERPSYNC_ERP_PASSWORD", env["ERPSYNC_ERP_PASSWORD_FILE"])
	if err != nil {
		return Login{}, err
	}
	if pw != "" {
		l.Password = pw
	}
	cs, err := secretFrom("ERPSYNC_ERP_CLIENT_SECRET", "ERPSYNC_ERP_CLIENT_SECRET_FILE", env, "ERPSYNC_ERP_CLIENT_SECRET", env["ERPSYNC_ERP_CLIENT_SECRET_FILE"])
	if err != nil {
		return Login{}, err
	}
	if cs != "" {
		l.ClientSecret = cs
	}
	return l, nil
}

// secretOrigin names where a file source's secret comes from.
func secretOrigin(envKey, envVar, fileKey string) string {
	if envVar != "" {
		return envVar + " (" + envKey + ")"
	}
	return fileKey
}

// envSecretOrigin names the variable a secret is read from when the
// environment sets it, else keeps what the file said.
func envSecretOrigin(env map[string]string, key, fromFile string) string {
	switch {
	case env[key+"_FILE"] != "":
		return key + "_FILE"
	case env[key] != "" || fromFile == "":
		return key
	}
	return fromFile
}

// secretFrom reads a secret from an environment variable or a file; both
// set is ambiguous and refused. The value is never part of an error.
func secretFrom(key, fileKey string, env map[string]string, envVar, path string) (Secret, error) {
	var v string
	if envVar != "" {
		v = env[envVar]
	}
	if path != "" {
		if v != "" {
			return "", errf("%s and %s: set either the variable or the file, not both", key, fileKey)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", errf("%s: cannot read %s: %v", fileKey, path, errors.Unwrap(err))
		}
		v = strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", errf("%s: %s is empty", fileKey, path)
		}
	}
	return Secret(v), nil
}

var sourceName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func validateSource(s Source, opts Options) error {
	where := fmt.Sprintf("source %q", s.Name)
	if !sourceName.MatchString(s.Name) {
		return errf("%s: ERPSYNC_SOURCE / name must be 1-64 letters, digits, '_', '.' or '-'", where)
	}
	if s.BaseURL == "" {
		if opts.NeedERP {
			return errf("%s: ERPSYNC_ERP_BASE_URL (base_url) is not set", where)
		}
	} else if err := erp.ValidateBaseURL(s.BaseURL); err != nil {
		return errf("%s: ERPSYNC_ERP_BASE_URL: %v", where, err)
	}
	names := map[string]bool{}
	for _, l := range s.Logins {
		if err := validateLogin(where, l, opts); err != nil {
			return err
		}
		if names[l.Name()] && l.Name() != "" {
			return errf("%s: login %q is listed twice (%s)", where, l.Name(), l.Keys.Username)
		}
		names[l.Name()] = true
	}
	if s.MaxConcurrentRequests < 1 || s.MaxConcurrentRequests > 100 {
		return errf("%s: ERPSYNC_ERP_MAX_CONCURRENT_REQUESTS (max_concurrent_requests): %d is not between 1 and 100", where, s.MaxConcurrentRequests)
	}
	if s.MaxRequestsPerSecond < 0 || s.MaxRequestsPerSecond > 10000 {
		return errf("%s: ERPSYNC_ERP_MAX_REQUESTS_PER_SECOND (max_requests_per_second): %g is not between 0 (no limit) and 10000", where, s.MaxRequestsPerSecond)
	}
	if s.PageSize < 1 || s.PageSize > 10000 {
		return errf("%s: ERPSYNC_ERP_PAGE_SIZE (page_size): %d is not between 1 and 10000", where, s.PageSize)
	}
	if p := s.MessagingPrefix; !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") && p != "/" || strings.ContainsAny(p, "?#") {
		return errf("%s: ERPSYNC_ERP_MESSAGING_PREFIX (messaging_prefix): %q must be a path such as /messaging", where, p)
	}
	if s.Timeout <= 0 {
		return errf("%s: ERPSYNC_ERP_TIMEOUT (timeout) must be positive", where)
	}
	seen := map[string]bool{}
	for _, st := range s.Streams {
		i := slices.IndexFunc(opts.Streams, func(sp StreamSpec) bool { return sp.Name == st.Name })
		if opts.Streams != nil && i < 0 {
			return errf("%s: ERPSYNC_STREAMS (streams): unknown stream %q; known: %s", where, st.Name, strings.Join(specNames(opts.Streams, false), ", "))
		}
		if seen[st.Name] {
			return errf("%s: stream %q is listed twice", where, st.Name)
		}
		seen[st.Name] = true
		if st.History != nil && *st.History && opts.Streams != nil && !opts.Streams[i].History {
			return errf("%s: stream %s keeps no history (ERPSYNC_HISTORY or streams.%s.history); streams that can: %s",
				where, st.Name, st.Name, strings.Join(specNames(opts.Streams, true), ", "))
		}
		if _, err := ParseSchedule(st.Schedule); err != nil {
			return errf("%s: stream %s: schedule %q: %v (ERPSYNC_SCHEDULE or streams.%s.schedule)", where, st.Name, st.Schedule, err, st.Name)
		}
	}
	return nil
}

// validateLogin checks one login of a source.
func validateLogin(where string, l Login, opts Options) error {
	switch l.Auth {
	case "token":
		if opts.NeedERP && l.Username == "" {
			return errf("%s: %s is not set", where, l.Keys.Username)
		}
		if opts.NeedERP && l.Password == "" {
			return errf("%s: login %s: no password: set %s", where, l.Username, passwordHint(l.Keys.Password))
		}
	case "plugin":
		if opts.NeedERP && (l.ClientID == "" || l.ClientSecret == "") {
			return errf("%s: plugin auth needs %s", where, l.CredentialKeys())
		}
		if strings.ContainsAny(l.PluginScheme, " \t\r\n") || l.PluginScheme == "" {
			return errf("%s: ERPSYNC_ERP_PLUGIN_SCHEME (plugin_scheme): %q is not a single word", where, l.PluginScheme)
		}
	default:
		return errf("%s: ERPSYNC_ERP_AUTH (auth): %q is not token or plugin", where, l.Auth)
	}
	return nil
}

// passwordHint names the settings that give a login's password: the one
// it names, and for the single login of a source the variables too.
func passwordHint(key string) string {
	switch {
	case key == "ERPSYNC_ERP_PASSWORD":
		return "ERPSYNC_ERP_PASSWORD or ERPSYNC_ERP_PASSWORD_FILE (password_file)"
	case strings.Contains(key, ".logins["):
		return key
	}
	return key + ", or ERPSYNC_ERP_PASSWORD / ERPSYNC_ERP_PASSWORD_FILE"
}

// specNames lists the catalog's streams; withHistory, only those that can
// keep history.
func specNames(specs []StreamSpec, withHistory bool) []string {
	var out []string
	for _, sp := range specs {
		if !withHistory || sp.History {
			out = append(out, sp.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Interval is the time between the two ticks of a schedule that follow
// now: the interval of @every, the next one of a cron spec.
func Interval(s cron.Schedule, now time.Time) time.Duration {
	first := s.Next(now)
	return s.Next(first).Sub(first)
}

// ParseSchedule accepts standard 5-field cron specs, descriptors such as
// @every 5m or @hourly, and a CRON_TZ= prefix.
func ParseSchedule(spec string) (cron.Schedule, error) {
	return cron.ParseStandard(spec)
}

// DefaultMaxResponse is the size bound of one ERP answer unless
// configured: far above any page erpsync asks for, far below what would
// endanger a small container.
const DefaultMaxResponse = 64 << 20

// parseSize reads a byte size: a plain number of bytes, or one with a
// unit (KiB, MiB, GiB, or KB, MB, GB in powers of 1000).
func parseSize(key, v string) (int64, error) {
	v = strings.TrimSpace(v)
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}, {"", 1}}
	for _, u := range units {
		num, ok := strings.CutSuffix(v, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err != nil || n < 1 || n > (1<<40)/u.mult {
			break
		}
		if n*u.mult < 64<<10 {
			return 0, errf("%s: %q is too small (at least 64KiB)", key, v)
		}
		return n * u.mult, nil
	}
	return 0, errf("%s: %q is not a size such as 64MiB", key, v)
}

// parseDuration reads a Go duration (20s, 5m, 2h30m) or a number of days
// (90d).
func parseDuration(key, v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(strings.TrimSpace(v), "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n < 100000 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, errf("%s: %q is not a duration such as 20s, 5m or 90d", key, v)
	}
	return d, nil
}

// shutdown derives the phases of a stop from ERPSYNC_SHUTDOWN_TIMEOUT, or
// from ERPSYNC_SHUTDOWN_GRACE when only that is set.
func shutdown(env map[string]string, f file) (Shutdown, error) {
	timeoutText := cmp.Or(env["ERPSYNC_SHUTDOWN_TIMEOUT"], f.ShutdownTimeout)
	graceText := cmp.Or(env["ERPSYNC_SHUTDOWN_GRACE"], f.ShutdownGrace)
	min := ShutdownWithGrace(time.Second).Timeout
	switch {
	case timeoutText != "":
		t, err := parseDuration("ERPSYNC_SHUTDOWN_TIMEOUT", timeoutText)
		if err != nil {
			return Shutdown{}, err
		}
		if t < min {
			return Shutdown{}, errf("ERPSYNC_SHUTDOWN_TIMEOUT (shutdown_timeout): %s is less than %s", t, min)
		}
		s := ShutdownWithin(t)
		if graceText != "" {
			g, err := parseDuration("ERPSYNC_SHUTDOWN_GRACE", graceText)
			if err != nil {
				return Shutdown{}, err
			}
			if g > s.Grace {
				return Shutdown{}, errf("ERPSYNC_SHUTDOWN_GRACE (shutdown_grace): %s does not fit ERPSYNC_SHUTDOWN_TIMEOUT %s (at most %s)", g, t, s.Grace)
			}
			s.Grace = g
		}
		return s, nil
	case graceText != "":
		g, err := parseDuration("ERPSYNC_SHUTDOWN_GRACE", graceText)
		if err != nil {
			return Shutdown{}, err
		}
		return ShutdownWithGrace(g), nil
	}
	return ShutdownWithin(DefaultShutdownTimeout), nil
}

// DefaultShutdownTimeout leaves 5 s of margin under the 30 s stop timeout
// of systemd's default and of Kubernetes' terminationGracePeriodSeconds.
const DefaultShutdownTimeout = 25 * time.Second

// database reads the limits of erpsync's Postgres sessions. The defaults
// follow from what erpsync's statements cost: a page (or a group of
// pages, at most 10,000 rows) commits in well under a second, and the
// largest statement, marking a sweep's deletions over a million rows,
// takes seconds. Waiting 15 s on a lock is already a problem to report.
func database(env map[string]string, f file) (Database, error) {
	var d Database
	var err error
	if d.LockTimeout, err = parseDuration("ERPSYNC_DB_LOCK_TIMEOUT", cmp.Or(env["ERPSYNC_DB_LOCK_TIMEOUT"], f.DBLockTimeout, "15s")); err != nil {
		return d, err
	}
	if d.StatementTimeout, err = parseDuration("ERPSYNC_DB_STATEMENT_TIMEOUT", cmp.Or(env["ERPSYNC_DB_STATEMENT_TIMEOUT"], f.DBStatementTimeout, "5m")); err != nil {
		return d, err
	}
	if d.IdleInTxTimeout, err = parseDuration("ERPSYNC_DB_IDLE_IN_TRANSACTION_TIMEOUT", cmp.Or(env["ERPSYNC_DB_IDLE_IN_TRANSACTION_TIMEOUT"], f.DBIdleInTxTimeout, "1m")); err != nil {
		return d, err
	}
	for key, v := range map[string]time.Duration{"ERPSYNC_DB_LOCK_TIMEOUT": d.LockTimeout, "ERPSYNC_DB_STATEMENT_TIMEOUT": d.StatementTimeout,
		"ERPSYNC_DB_IDLE_IN_TRANSACTION_TIMEOUT": d.IdleInTxTimeout} {
		if v < time.Second {
			return d, errf("%s: %s is less than a second (0 would mean no limit, which erpsync does not allow)", key, v)
		}
	}
	return d, nil
}

// positiveInt reads an integer setting between 1 and max, from the
// environment, else the file, else def.
func positiveInt(key, envValue string, fileValue, def, max int) (int, error) {
	n := cmp.Or(fileValue, def)
	if envValue != "" {
		v, err := strconv.Atoi(strings.TrimSpace(envValue))
		if err != nil {
			return 0, errf("%s: %q is not a number", key, envValue)
		}
		n = v
	}
	if n < 1 || n > max {
		return 0, errf("%s: %d is not between 1 and %d", key, n, max)
	}
	return n, nil
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
