// Package config turns the YAML file and ERPSYNC_* environment variables
// into one validated Config value. Each setting is described once, in the
// table of keys.go: its key in the file, its variable, its default, how
// its value is read and what it is. The other files each do one job:
// load.go resolves every setting (variable, file, default) and builds the
// sources, file.go reads the YAML file and refuses keys it does not know,
// env.go says which source the variables describe, values.go reads one
// value, schedule.go holds the schedules, secret.go the secrets, and
// validate.go the checks that span several settings.
//
// Load's error lists every problem it found, each naming the setting as
// the user wrote it: the variable, or the key's path in the file
// (sources[0].base_url) after the file and its line.
package config

import (
	"slices"
	"time"
)

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
	// Warnings are settings that are allowed but probably a mistake (a
	// variable erpsync does not read, a secret file every user of the host
	// may read, complete sweeps more frequent than follow runs), for
	// `check` to print and every other command to log. They never hold a
	// secret.
	Warnings []string
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

// shutdownWithin spends timeout: the fixed phases, and the rest as grace.
func shutdownWithin(timeout time.Duration) Shutdown {
	return Shutdown{Timeout: timeout, Grace: timeout - shutdownAbort - shutdownRevoke - shutdownHTTP,
		Abort: shutdownAbort, Revoke: shutdownRevoke, HTTP: shutdownHTTP}
}

// ShutdownWithGrace is the stop that gives runs grace to commit.
func ShutdownWithGrace(grace time.Duration) Shutdown {
	return shutdownWithin(grace + shutdownAbort + shutdownRevoke + shutdownHTTP)
}

// DefaultMaxConcurrentRequests is how many requests one process has in
// flight to an installation unless configured: enough to overlap a page
// fetch with another stream's, little next to the people using the ERP.
const DefaultMaxConcurrentRequests = 2

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
	// RequestsPerHour, when positive, is a budget of requests an hour:
	// the daemon spaces window runs and complete sweeps out to fit it,
	// never follow runs (which it always holds: Load refuses less).
	RequestsPerHour int
	Streams         []StreamConfig
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
	Name string
	// Schedule is when the stream runs: the follow runs of a stream that
	// follows, every run of any other.
	Schedule string
	// SweepSchedule is when a stream that follows reads its whole list (a
	// complete sweep). For a stream that cannot follow it is Schedule.
	SweepSchedule string
	// WindowSchedule is when a stream that follows re-reads its newest
	// pages (a window run); "" for none.
	WindowSchedule string
	// ScheduleFrom, SweepFrom and WindowFrom say where the three came
	// from: the setting as the user wrote it ("ERPSYNC_SCHEDULE",
	// "sources[0].streams.invoices.schedule"), FromDefault, or, for
	// SweepFrom, FromSchedule; for no window, FromNone.
	ScheduleFrom, SweepFrom, WindowFrom string
	// WindowPages is how many pages its window re-reads (window_pages); 0
	// learns it.
	WindowPages int
	// Drift is what a run does when records stop matching the stream's
	// typed columns: DriftRecord or DriftStop.
	Drift string
	// History says whether the stream keeps the versions its rows
	// replace; nil leaves it to the stream.
	History *bool
	// Settings are the stream's own settings (StreamSpec.Settings), every
	// one filled in: configured or default.
	Settings map[string]string
}

// Where a schedule came from when no setting gave it.
const (
	// FromDefault: the stream's own default (StreamSpec).
	FromDefault = "default"
	// FromSchedule: a sweep schedule that is the stream's Schedule,
	// because a schedule was set and no sweep schedule: every run is a
	// complete sweep, as before streams could follow. A stream that
	// cannot follow always has this one.
	FromSchedule = "schedule"
	// FromNone: a stream that follows has no window, because its
	// schedule or sweep schedule is set and its window schedule is not:
	// such a configuration keeps the meaning it had before windows.
	FromNone = "none"
)

// Followed reports whether the stream follows its list between complete
// sweeps: its follow runs have a schedule of their own.
func (sc StreamConfig) Followed() bool {
	return sc.SweepSchedule != "" && sc.SweepSchedule != sc.Schedule
}

// What a run does when records stop matching the stream's typed columns.
const (
	DriftRecord = "record" // record the drift and go on
	DriftStop   = "stop"   // fail the run before it writes
)

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
	// Follows: the stream can follow its list, reading only what is new
	// on its Schedule and the whole list on its sweep schedule.
	Follows bool
	// SweepSchedule is the default schedule of its complete sweeps when
	// it Follows; "" is Schedule.
	SweepSchedule string
	// WindowSchedule is the default schedule of its window runs when it
	// Follows; "" is none.
	WindowSchedule string
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

// Options are what the command line adds on top of the environment.
type Options struct {
	ConfigFile string
	// Streams is the catalog: the streams a source may enable, with their
	// defaults and settings. Names outside it are refused.
	Streams []StreamSpec
	// NeedERP requires at least one source with a base URL and credentials.
	NeedERP bool
}
