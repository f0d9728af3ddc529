package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // CRON_TZ schedules must parse on hosts without zoneinfo
)

const (
	testPassword = "pw-Hunter2+/=secret"
	testSecret   = "plugin-client-S3cret"
	testDBPass   = "db-pa55word"
)

// testSpecs is a catalog as configuration sees the product's.
var testSpecs = []StreamSpec{
	{Name: "invoices", Schedule: "@every 5m", Core: true, History: true},
	{Name: "currencies", Schedule: "@every 30m", Core: true, History: true},
	{Name: "cashboxes", Schedule: "@every 30m", Core: true, History: true},
	{Name: "cashbox_reconciliations", Schedule: "@every 30m", Core: true, History: true},
	{Name: "journal_entries", Schedule: "@every 30m", History: true},
	{Name: "messaging_messages", Schedule: "@every 30m", History: true},
	{Name: "balance_sheet", Schedule: "@every 30m", Settings: []SettingSpec{
		{Key: "months", Default: "24", Check: func(v string) error {
			if n, err := strconv.Atoi(v); err != nil || n < 0 {
				return errors.New("not a number of months")
			}
			return nil
		}},
		{Key: "reread_months", Default: "3"},
	}},
}

// baseEnv is the smallest environment that describes one usable source.
func baseEnv(extra ...string) []string {
	return append([]string{
		"ERPSYNC_ERP_BASE_URL=https://erp.example.com",
		"ERPSYNC_ERP_USERNAME=integration",
		"ERPSYNC_ERP_PASSWORD=" + testPassword,
	}, extra...)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustLoad(t *testing.T, env []string, opts Options) Config {
	t.Helper()
	cfg, err := Load(env, opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return cfg
}

// wantConfigError asserts a configuration error that contains every want
// and none of the secrets.
func wantConfigError(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", want)
	}
	if !IsConfigError(err) {
		t.Errorf("IsConfigError(%v) = false", err)
	}
	if !IsConfigError(fmt.Errorf("wrapped: %w", err)) {
		t.Errorf("IsConfigError of a wrapped %v = false", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	for _, s := range []string{testPassword, testSecret, testDBPass} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error %q contains a secret", err)
		}
	}
}

func streamsOf(s Source) string {
	var parts []string
	for _, st := range s.Streams {
		parts = append(parts, st.Name+"="+st.Schedule)
	}
	return strings.Join(parts, "; ")
}

func TestLoadEnvOnlyDefaults(t *testing.T) {
	cfg := mustLoad(t, baseEnv(), Options{Streams: testSpecs, NeedERP: true})
	if cfg.LogFormat != "text" || cfg.LogLevel != "info" || cfg.HTTPAddr != ":8080" || cfg.Shutdown.Grace != 17*time.Second || cfg.Shutdown.Timeout != 25*time.Second || !cfg.AutoMigrate {
		t.Errorf("defaults = %+v", cfg)
	}
	if cfg.DatabaseURL != "" {
		t.Errorf("DatabaseURL = %q, want empty", cfg.DatabaseURL.Value())
	}
	if len(cfg.Sources) != 1 {
		t.Fatalf("%d sources, want 1", len(cfg.Sources))
	}
	s := cfg.Sources[0]
	if s.Name != "default" || s.BaseURL != "https://erp.example.com" || s.Logins[0].Username != "integration" || s.Logins[0].Password.Value() != testPassword {
		t.Errorf("source = %+v", s)
	}
	if s.Logins[0].Auth != "token" || s.Logins[0].PluginScheme != "ERPPlugin" || s.PageSize != 500 || s.Timeout != 60*time.Second {
		t.Errorf("source defaults = %+v", s)
	}
	want := "invoices=@every 5m; currencies=@every 30m; cashboxes=@every 30m; cashbox_reconciliations=@every 30m"
	if got := streamsOf(s); got != want {
		t.Errorf("streams = %q, want %q", got, want)
	}
	if sc, ok := s.Stream("cashboxes"); !ok || sc.Schedule != "@every 30m" {
		t.Errorf("Stream(cashboxes) = %+v, %v", sc, ok)
	}
	if _, ok := s.Stream("journal_entries"); ok {
		t.Error("Stream(journal_entries) found, but it is not enabled")
	}
	for _, st := range s.Streams {
		if _, err := ParseSchedule(st.Schedule); err != nil {
			t.Errorf("default schedule %q of %s: %v", st.Schedule, st.Name, err)
		}
	}
}

func TestLoadNoERPVariables(t *testing.T) {
	cfg := mustLoad(t, []string{"ERPSYNC_DATABASE_URL=postgres://x"}, Options{Streams: testSpecs})
	if len(cfg.Sources) != 0 {
		t.Errorf("sources = %+v, want none", cfg.Sources)
	}
	if cfg.DatabaseURL.Value() != "postgres://x" {
		t.Errorf("DatabaseURL = %q", cfg.DatabaseURL.Value())
	}
	_, err := Load([]string{"ERPSYNC_DATABASE_URL=postgres://x"}, Options{Streams: testSpecs, NeedERP: true})
	wantConfigError(t, err, "ERPSYNC_ERP_BASE_URL")
}

func TestLoadEnvSourceRenamedAndStreams(t *testing.T) {
	cfg := mustLoad(t, baseEnv(
		"ERPSYNC_SOURCE=prod-1",
		"ERPSYNC_STREAMS= invoices, currencies ,,journal_entries",
	), Options{Streams: testSpecs, NeedERP: true})
	if len(cfg.Sources) != 1 || cfg.Sources[0].Name != "prod-1" {
		t.Fatalf("sources = %+v", cfg.Sources)
	}
	want := "invoices=@every 5m; currencies=@every 30m; journal_entries=@every 30m"
	if got := streamsOf(cfg.Sources[0]); got != want {
		t.Errorf("streams = %q, want %q", got, want)
	}
}

func TestLoadEnvSchedule(t *testing.T) {
	cfg := mustLoad(t, baseEnv("ERPSYNC_SCHEDULE=*/10 * * * *"), Options{Streams: testSpecs})
	for _, st := range cfg.Sources[0].Streams {
		if st.Schedule != "*/10 * * * *" {
			t.Errorf("stream %s schedule = %q, want ERPSYNC_SCHEDULE", st.Name, st.Schedule)
		}
	}
}

func TestLoadDatabaseURL(t *testing.T) {
	file := writeFile(t, "c.yaml", "database_url: postgres://file/db\n")
	tests := []struct {
		env  []string
		want string
	}{
		{[]string{"ERPSYNC_DATABASE_URL=postgres://a/db", "DATABASE_URL=postgres://b/db"}, "postgres://a/db"},
		{[]string{"DATABASE_URL=postgres://b/db", "ERPSYNC_DATABASE_URL=postgres://a/db"}, "postgres://a/db"},
		{[]string{"DATABASE_URL=postgres://b/db"}, "postgres://b/db"},
		{[]string{"ERPSYNC_CONFIG=" + file}, "postgres://file/db"},
		{[]string{"ERPSYNC_CONFIG=" + file, "DATABASE_URL=postgres://b/db"}, "postgres://b/db"},
		{[]string{"ERPSYNC_DATABASE_URL=", "DATABASE_URL=postgres://b/db"}, "postgres://b/db"},
	}
	for _, tt := range tests {
		cfg := mustLoad(t, tt.env, Options{Streams: testSpecs})
		if cfg.DatabaseURL.Value() != tt.want {
			t.Errorf("env %q: DatabaseURL = %q, want %q", tt.env, cfg.DatabaseURL.Value(), tt.want)
		}
		if err := cfg.RequireDatabase(); err != nil {
			t.Errorf("RequireDatabase: %v", err)
		}
	}
}

func TestRequireDatabase(t *testing.T) {
	cfg := mustLoad(t, baseEnv(), Options{Streams: testSpecs})
	wantConfigError(t, cfg.RequireDatabase(), "ERPSYNC_DATABASE_URL")
}

func TestLoadPasswordFile(t *testing.T) {
	for _, content := range []string{testPassword + "\n", testPassword + "\r\n", testPassword, testPassword + "\n\n"} {
		p := writeFile(t, "pw", content)
		cfg := mustLoad(t, []string{
			"ERPSYNC_ERP_BASE_URL=https://erp.example.com",
			"ERPSYNC_ERP_USERNAME=integration",
			"ERPSYNC_ERP_PASSWORD_FILE=" + p,
		}, Options{Streams: testSpecs, NeedERP: true})
		if got := cfg.Sources[0].Logins[0].Password.Value(); got != testPassword {
			t.Errorf("file %q: password = %q, want %q", content, got, testPassword)
		}
	}
	// A password with inner spaces keeps them; only the trailing newline goes.
	p := writeFile(t, "pw", " a b \n")
	cfg := mustLoad(t, []string{"ERPSYNC_ERP_BASE_URL=https://erp.example.com", "ERPSYNC_ERP_PASSWORD_FILE=" + p}, Options{Streams: testSpecs})
	if got := cfg.Sources[0].Logins[0].Password.Value(); got != " a b " {
		t.Errorf("password = %q, want %q", got, " a b ")
	}
}

func TestLoadPasswordVariableAndFile(t *testing.T) {
	p := writeFile(t, "pw", testPassword+"\n")
	_, err := Load(baseEnv("ERPSYNC_ERP_PASSWORD_FILE="+p), Options{Streams: testSpecs})
	wantConfigError(t, err, "ERPSYNC_ERP_PASSWORD", "not both")
}

func TestLoadPasswordFileUnreadable(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{filepath.Join(dir, "missing"), dir} {
		_, err := Load([]string{
			"ERPSYNC_ERP_BASE_URL=https://erp.example.com",
			"ERPSYNC_ERP_USERNAME=integration",
			"ERPSYNC_ERP_PASSWORD_FILE=" + p,
			"ERPSYNC_DATABASE_URL=postgres://u:" + testDBPass + "@db/x",
			"ERPSYNC_ERP_CLIENT_SECRET=" + testSecret,
		}, Options{Streams: testSpecs, NeedERP: true})
		wantConfigError(t, err, "ERPSYNC_ERP_PASSWORD_FILE", p)
	}
	empty := writeFile(t, "empty", "\n")
	_, err := Load([]string{"ERPSYNC_ERP_BASE_URL=https://erp.example.com", "ERPSYNC_ERP_PASSWORD_FILE=" + empty}, Options{Streams: testSpecs})
	wantConfigError(t, err, "ERPSYNC_ERP_PASSWORD_FILE", "empty")
}

func TestLoadYAMLTwoSources(t *testing.T) {
	pwFile := writeFile(t, "hq.pw", testPassword+"\n")
	yaml := fmt.Sprintf(`
database_url: postgres://file/db
log_format: json
log_level: debug
http_addr: 127.0.0.1:9090
schedule: "@every 10m"
shutdown_grace: 45s
auto_migrate: false
sources:
  - name: hq
    base_url: https://hq.erp.example.com
    username: sync
    password_file: %s
    page_size: 200
    timeout: 30s
    streams:
      invoices:
        schedule: "CRON_TZ=Europe/Berlin 0 6 * * *"
      currencies: {}
      cashboxes:
        schedule: "@hourly"
  - name: branch2
    base_url: http://127.0.0.1:8080
    auth: plugin
    plugin_scheme: ERPExt
    client_id: c-2
    client_secret_env: BRANCH2_SECRET
`, pwFile)
	path := writeFile(t, "erpsync.yaml", yaml)
	cfg := mustLoad(t, []string{"BRANCH2_SECRET=" + testSecret}, Options{Streams: testSpecs, ConfigFile: path, NeedERP: true})

	if cfg.DatabaseURL.Value() != "postgres://file/db" || cfg.LogFormat != "json" || cfg.LogLevel != "debug" ||
		cfg.HTTPAddr != "127.0.0.1:9090" || cfg.Shutdown.Grace != 45*time.Second || cfg.AutoMigrate {
		t.Errorf("globals = %+v", cfg)
	}
	if len(cfg.Sources) != 2 {
		t.Fatalf("%d sources, want 2", len(cfg.Sources))
	}
	hq, b2 := cfg.Sources[0], cfg.Sources[1]
	if hq.Name != "hq" || hq.BaseURL != "https://hq.erp.example.com" || hq.Logins[0].Username != "sync" || hq.Logins[0].Password.Value() != testPassword ||
		hq.Logins[0].Auth != "token" || hq.PageSize != 200 || hq.Timeout != 30*time.Second {
		t.Errorf("hq = %+v", hq)
	}
	if got, want := streamsOf(hq), "cashboxes=@hourly; currencies=@every 10m; invoices=CRON_TZ=Europe/Berlin 0 6 * * *"; got != want {
		t.Errorf("hq streams = %q, want %q", got, want)
	}
	if b2.Name != "branch2" || b2.Logins[0].Auth != "plugin" || b2.Logins[0].PluginScheme != "ERPExt" || b2.Logins[0].ClientID != "c-2" || b2.Logins[0].ClientSecret.Value() != testSecret ||
		b2.PageSize != 500 || b2.Timeout != 60*time.Second {
		t.Errorf("branch2 = %+v", b2)
	}
	want := "invoices=@every 10m; currencies=@every 10m; cashboxes=@every 10m; cashbox_reconciliations=@every 10m"
	if got := streamsOf(b2); got != want {
		t.Errorf("branch2 streams = %q, want %q", got, want)
	}

	// The Berlin schedule fires at 06:00 Berlin time.
	inv, _ := hq.Stream("invoices")
	sched, err := ParseSchedule(inv.Schedule)
	if err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	next := sched.Next(time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC))
	if nb := next.In(berlin); nb.Hour() != 6 || nb.Minute() != 0 || nb.Day() != 2 {
		t.Errorf("next run = %s (%s Berlin), want 06:00 Berlin on July 2", next, nb)
	}

	// Environment on top: ERPSYNC_SOURCE picks the file source it overrides,
	// and ERPSYNC_STREAMS selects streams while keeping the file's schedules.
	cfg = mustLoad(t, []string{
		"BRANCH2_SECRET=" + testSecret,
		"ERPSYNC_CONFIG=" + path,
		"ERPSYNC_SOURCE=hq",
		"ERPSYNC_ERP_USERNAME=other-user",
		"ERPSYNC_STREAMS=invoices,journal_entries",
		"ERPSYNC_LOG_LEVEL=warn",
	}, Options{Streams: testSpecs, NeedERP: true})
	if len(cfg.Sources) != 2 || cfg.LogLevel != "warn" {
		t.Fatalf("sources %d, log level %q", len(cfg.Sources), cfg.LogLevel)
	}
	hq = cfg.Sources[0]
	if hq.Logins[0].Username != "other-user" || hq.Logins[0].Password.Value() != testPassword {
		t.Errorf("hq after env = %+v", hq)
	}
	if got, want := streamsOf(hq), "invoices=CRON_TZ=Europe/Berlin 0 6 * * *; journal_entries=@every 10m"; got != want {
		t.Errorf("hq streams = %q, want %q", got, want)
	}
	if got, want := streamsOf(cfg.Sources[1]), "invoices=@every 10m; journal_entries=@every 10m"; got != want {
		t.Errorf("branch2 streams = %q, want %q", got, want)
	}
}

func TestLoadYAMLPasswordEnv(t *testing.T) {
	path := writeFile(t, "c.yaml", `
sources:
  - base_url: https://erp.example.com
    username: u
    password_env: MY_ERP_PASSWORD
`)
	cfg := mustLoad(t, []string{"MY_ERP_PASSWORD=" + testPassword}, Options{Streams: testSpecs, ConfigFile: path, NeedERP: true})
	if len(cfg.Sources) != 1 || cfg.Sources[0].Name != "default" || cfg.Sources[0].Logins[0].Password.Value() != testPassword {
		t.Errorf("sources = %+v", cfg.Sources)
	}
	_, err := Load(nil, Options{Streams: testSpecs, ConfigFile: path, NeedERP: true})
	wantConfigError(t, err, "password", "ERPSYNC_ERP_PASSWORD")
}

func TestLoadConfigFileChoice(t *testing.T) {
	a := writeFile(t, "a.yaml", "log_level: debug\n")
	b := writeFile(t, "b.yaml", "log_level: error\n")
	if cfg := mustLoad(t, []string{"ERPSYNC_CONFIG=" + a}, Options{Streams: testSpecs, ConfigFile: b}); cfg.LogLevel != "error" {
		t.Errorf("--config should win over ERPSYNC_CONFIG: log level %q", cfg.LogLevel)
	}
	empty := writeFile(t, "empty.yaml", "")
	if _, err := Load(nil, Options{Streams: testSpecs, ConfigFile: empty}); err != nil {
		t.Errorf("empty file: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(nil, Options{Streams: testSpecs, ConfigFile: missing})
	wantConfigError(t, err, "config file", "nope.yaml")
}

func TestLoadYAMLErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		opts Options
		want []string
	}{
		{
			name: "unknown top-level key",
			yaml: "log_levle: debug\n",
			want: []string{"log_levle"},
		},
		{
			name: "unknown source key",
			yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    pasword_file: /x\n",
			want: []string{"pasword_file"},
		},
		{
			name: "unknown stream key",
			yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    streams:\n      invoices:\n        cron: '@hourly'\n",
			want: []string{"cron"},
		},
		{
			name: "not YAML",
			yaml: "sources: [\n",
			want: []string{"config file"},
		},
		{
			name: "duplicate source names",
			yaml: "sources:\n  - name: a\n    base_url: https://a.example.com\n  - name: a\n    base_url: https://b.example.com\n",
			want: []string{"sources[1]", `"a"`, "twice"},
		},
		{
			name: "two unnamed sources",
			yaml: "sources:\n  - base_url: https://a.example.com\n  - base_url: https://b.example.com\n",
			want: []string{`"default"`, "twice"},
		},
		{
			name: "bad stream schedule",
			yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    streams:\n      invoices:\n        schedule: 'every five minutes'\n",
			want: []string{"invoices", "every five minutes", "streams.invoices.schedule"},
		},
		{
			name: "bad time zone",
			yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    streams:\n      currencies:\n        schedule: 'CRON_TZ=Mars/Olympus 0 6 * * *'\n",
			want: []string{"currencies", "Mars/Olympus"},
		},
		{
			name: "unknown stream",
			yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    streams:\n      invoicez: {}\n",
			opts: Options{Streams: testSpecs[:2]},
			want: []string{"invoicez", "unknown stream"},
		},
		{
			name: "plain http",
			yaml: "sources:\n  - name: a\n    base_url: http://erp.example.com\n",
			want: []string{"HTTPS is required", `source "a"`},
		},
		{
			name: "bad timeout",
			yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    timeout: soon\n",
			want: []string{"sources[0].timeout", "soon"},
		},
		{
			name: "bad page size",
			yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    page_size: 20000\n",
			want: []string{"page_size", "20000"},
		},
		{
			name: "bad auth",
			yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    auth: basic\n",
			want: []string{"ERPSYNC_ERP_AUTH", "basic"},
		},
		{
			name: "bad plugin scheme",
			yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    auth: plugin\n    plugin_scheme: 'Two Words'\n",
			want: []string{"ERPSYNC_ERP_PLUGIN_SCHEME", "Two Words"},
		},
		{
			name: "bad source name",
			yaml: "sources:\n  - name: 'my source'\n    base_url: https://erp.example.com\n",
			want: []string{"my source", "name"},
		},
		{
			name: "bad shutdown grace in file",
			yaml: "shutdown_grace: forever\n",
			want: []string{"ERPSYNC_SHUTDOWN_GRACE", "forever"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.ConfigFile = writeFile(t, "c.yaml", tt.yaml)
			_, err := Load(nil, tt.opts)
			wantConfigError(t, err, tt.want...)
		})
	}
}

func TestLoadYAMLPasswordFileErrorNamesKey(t *testing.T) {
	path := writeFile(t, "c.yaml", "sources:\n  - name: a\n    base_url: https://erp.example.com\n    password_file: /nonexistent/pw\n")
	_, err := Load(nil, Options{Streams: testSpecs, ConfigFile: path})
	wantConfigError(t, err, "sources[0].password_file")
}

func TestLoadEnvErrors(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		opts Options
		want []string
	}{
		{"log format", baseEnv("ERPSYNC_LOG_FORMAT=xml"), Options{Streams: testSpecs}, []string{"ERPSYNC_LOG_FORMAT", "xml"}},
		{"log level", baseEnv("ERPSYNC_LOG_LEVEL=verbose"), Options{Streams: testSpecs}, []string{"ERPSYNC_LOG_LEVEL", "verbose"}},
		{"shutdown grace", baseEnv("ERPSYNC_SHUTDOWN_GRACE=20"), Options{Streams: testSpecs}, []string{"ERPSYNC_SHUTDOWN_GRACE", `"20"`}},
		{"negative shutdown grace", baseEnv("ERPSYNC_SHUTDOWN_GRACE=-5s"), Options{Streams: testSpecs}, []string{"ERPSYNC_SHUTDOWN_GRACE"}},
		{"auto migrate", baseEnv("ERPSYNC_AUTO_MIGRATE=maybe"), Options{Streams: testSpecs}, []string{"ERPSYNC_AUTO_MIGRATE", "maybe"}},
		{"http addr", baseEnv("ERPSYNC_HTTP_ADDR=8080"), Options{Streams: testSpecs}, []string{"ERPSYNC_HTTP_ADDR"}},
		{"schedule", baseEnv("ERPSYNC_SCHEDULE=@every"), Options{Streams: testSpecs}, []string{"ERPSYNC_SCHEDULE", "invoices", "@every"}},
		{"page size", baseEnv("ERPSYNC_ERP_PAGE_SIZE=lots"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_PAGE_SIZE", "lots"}},
		{"page size negative", baseEnv("ERPSYNC_ERP_PAGE_SIZE=-1"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_PAGE_SIZE", "-1"}},
		{"page size too big", baseEnv("ERPSYNC_ERP_PAGE_SIZE=10001"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_PAGE_SIZE", "10001"}},
		{"timeout", baseEnv("ERPSYNC_ERP_TIMEOUT=1h2x"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_TIMEOUT"}},
		{"negative timeout", baseEnv("ERPSYNC_ERP_TIMEOUT=-1s"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_TIMEOUT"}},
		{"auth", baseEnv("ERPSYNC_ERP_AUTH=oauth"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_AUTH", "oauth"}},
		{"source name", baseEnv("ERPSYNC_SOURCE=a/b"), Options{Streams: testSpecs}, []string{"ERPSYNC_SOURCE", "a/b"}},
		{"unknown stream", baseEnv("ERPSYNC_STREAMS=invoices,bogus"), Options{Streams: testSpecs[:2]}, []string{"bogus", "ERPSYNC_STREAMS"}},
		{"stream twice", baseEnv("ERPSYNC_STREAMS=invoices,invoices"), Options{Streams: testSpecs}, []string{"invoices", "twice"}},
		{"plain http", baseEnv("ERPSYNC_ERP_BASE_URL=http://erp.example.com"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_BASE_URL", "HTTPS is required"}},
		{"plain http lan", baseEnv("ERPSYNC_ERP_BASE_URL=http://192.168.1.10:8000"), Options{Streams: testSpecs}, []string{"HTTPS is required"}},
		{"not a url", baseEnv("ERPSYNC_ERP_BASE_URL=erp.example.com"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_BASE_URL"}},
		{"ftp", baseEnv("ERPSYNC_ERP_BASE_URL=ftp://erp.example.com"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_BASE_URL", "https"}},
		{"need ERP without base URL", []string{"ERPSYNC_ERP_USERNAME=u", "ERPSYNC_ERP_PASSWORD=" + testPassword}, Options{Streams: testSpecs, NeedERP: true}, []string{"ERPSYNC_ERP_BASE_URL"}},
		{"need ERP without username", []string{"ERPSYNC_ERP_BASE_URL=https://erp.example.com", "ERPSYNC_ERP_PASSWORD=" + testPassword}, Options{Streams: testSpecs, NeedERP: true}, []string{"ERPSYNC_ERP_USERNAME"}},
		{"need ERP without password", []string{"ERPSYNC_ERP_BASE_URL=https://erp.example.com", "ERPSYNC_ERP_USERNAME=u"}, Options{Streams: testSpecs, NeedERP: true}, []string{"ERPSYNC_ERP_PASSWORD"}},
		{"plugin without client", []string{"ERPSYNC_ERP_BASE_URL=https://erp.example.com", "ERPSYNC_ERP_AUTH=plugin"}, Options{Streams: testSpecs, NeedERP: true}, []string{"ERPSYNC_ERP_CLIENT_ID", "ERPSYNC_ERP_CLIENT_SECRET"}},
		{"plugin without secret", []string{"ERPSYNC_ERP_BASE_URL=https://erp.example.com", "ERPSYNC_ERP_AUTH=plugin", "ERPSYNC_ERP_CLIENT_ID=c"}, Options{Streams: testSpecs, NeedERP: true}, []string{"ERPSYNC_ERP_CLIENT_SECRET"}},
		{"plugin without id", []string{"ERPSYNC_ERP_BASE_URL=https://erp.example.com", "ERPSYNC_ERP_AUTH=plugin", "ERPSYNC_ERP_CLIENT_SECRET=" + testSecret}, Options{Streams: testSpecs, NeedERP: true}, []string{"ERPSYNC_ERP_CLIENT_ID"}},
		{"client secret twice", []string{"ERPSYNC_ERP_BASE_URL=https://erp.example.com", "ERPSYNC_ERP_AUTH=plugin", "ERPSYNC_ERP_CLIENT_SECRET=" + testSecret, "ERPSYNC_ERP_CLIENT_SECRET_FILE=/x"}, Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_CLIENT_SECRET", "not both"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(append(tt.env, "ERPSYNC_DATABASE_URL=postgres://u:"+testDBPass+"@db/x"), tt.opts)
			wantConfigError(t, err, tt.want...)
		})
	}
}

func TestLoadPageSizeRejectsTrailingGarbage(t *testing.T) {
	for _, v := range []string{"50abc", "1e3", "10 20", "12.5"} {
		_, err := Load(baseEnv("ERPSYNC_ERP_PAGE_SIZE="+v), Options{Streams: testSpecs})
		wantConfigError(t, err, "ERPSYNC_ERP_PAGE_SIZE")
	}
}

func TestLoadEnvValues(t *testing.T) {
	cfg := mustLoad(t, baseEnv(
		"ERPSYNC_LOG_FORMAT=json",
		"ERPSYNC_LOG_LEVEL=error",
		"ERPSYNC_HTTP_ADDR=127.0.0.1:9100",
		"ERPSYNC_SHUTDOWN_GRACE=1m30s",
		"ERPSYNC_ERP_PAGE_SIZE=250",
		"ERPSYNC_ERP_TIMEOUT=15s",
	), Options{Streams: testSpecs})
	s := cfg.Sources[0]
	if cfg.LogFormat != "json" || cfg.LogLevel != "error" || cfg.HTTPAddr != "127.0.0.1:9100" || cfg.Shutdown.Grace != 90*time.Second || s.PageSize != 250 || s.Timeout != 15*time.Second {
		t.Errorf("cfg = %+v", cfg)
	}
	for v, want := range map[string]bool{"true": true, "1": true, "YES": true, "false": false, "0": false, "No": false, "": true} {
		cfg := mustLoad(t, baseEnv("ERPSYNC_AUTO_MIGRATE="+v), Options{Streams: testSpecs})
		if cfg.AutoMigrate != want {
			t.Errorf("ERPSYNC_AUTO_MIGRATE=%q: AutoMigrate = %v, want %v", v, cfg.AutoMigrate, want)
		}
	}
	// The variable overrides the file.
	path := writeFile(t, "c.yaml", "auto_migrate: false\n")
	if cfg := mustLoad(t, []string{"ERPSYNC_AUTO_MIGRATE=true"}, Options{Streams: testSpecs, ConfigFile: path}); !cfg.AutoMigrate {
		t.Error("ERPSYNC_AUTO_MIGRATE=true did not override auto_migrate: false")
	}
	if cfg := mustLoad(t, nil, Options{Streams: testSpecs, ConfigFile: path}); cfg.AutoMigrate {
		t.Error("auto_migrate: false ignored")
	}
}

func TestLoadPluginAuth(t *testing.T) {
	secretFile := writeFile(t, "secret", testSecret+"\n")
	cfg := mustLoad(t, []string{
		"ERPSYNC_ERP_BASE_URL=http://localhost:8000",
		"ERPSYNC_ERP_AUTH=plugin",
		"ERPSYNC_ERP_CLIENT_ID=client-7",
		"ERPSYNC_ERP_CLIENT_SECRET_FILE=" + secretFile,
	}, Options{Streams: testSpecs, NeedERP: true})
	s := cfg.Sources[0]
	if s.Logins[0].Auth != "plugin" || s.Logins[0].PluginScheme != "ERPPlugin" || s.Logins[0].ClientID != "client-7" || s.Logins[0].ClientSecret.Value() != testSecret || s.Logins[0].Password != "" {
		t.Errorf("source = %+v", s)
	}
	cfg = mustLoad(t, []string{
		"ERPSYNC_ERP_BASE_URL=https://erp.example.com",
		"ERPSYNC_ERP_AUTH=plugin",
		"ERPSYNC_ERP_PLUGIN_SCHEME=AcmeExt",
		"ERPSYNC_ERP_CLIENT_ID=client-7",
		"ERPSYNC_ERP_CLIENT_SECRET=" + testSecret,
	}, Options{Streams: testSpecs, NeedERP: true})
	if s := cfg.Sources[0]; s.Logins[0].PluginScheme != "AcmeExt" || s.Logins[0].ClientSecret.Value() != testSecret {
		t.Errorf("source = %+v", s)
	}
}

func TestLoadLoopbackHTTP(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:8080", "http://localhost", "http://LOCALHOST:9000/erp/", "http://[::1]:1", "http://127.0.0.2", "https://erp.example.com", "https://10.0.0.1:8443/"} {
		cfg, err := Load(baseEnv("ERPSYNC_ERP_BASE_URL="+u), Options{Streams: testSpecs, NeedERP: true})
		if err != nil {
			t.Errorf("%s: %v", u, err)
			continue
		}
		if cfg.Sources[0].BaseURL != u {
			t.Errorf("%s: BaseURL = %q", u, cfg.Sources[0].BaseURL)
		}
	}
}

func TestParseSchedule(t *testing.T) {
	for _, s := range []string{"@every 5m", "@every 1h30m", "@hourly", "@daily", "0 6 * * *", "*/15 * * * 1-5", "CRON_TZ=Europe/Berlin 0 6 * * *", "TZ=UTC 0 0 1 * *"} {
		if _, err := ParseSchedule(s); err != nil {
			t.Errorf("ParseSchedule(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", "every 5m", "@every", "@every five", "0 6 * *", "0 0 6 * * *", "61 * * * *", "CRON_TZ=Nowhere/Land 0 6 * * *"} {
		if _, err := ParseSchedule(s); err == nil {
			t.Errorf("ParseSchedule(%q) succeeded, want error", s)
		}
	}
}

func TestIsConfigError(t *testing.T) {
	if IsConfigError(nil) || IsConfigError(os.ErrNotExist) || IsConfigError(fmt.Errorf("x: %w", os.ErrNotExist)) {
		t.Error("IsConfigError true for a non-config error")
	}
	e := &Error{Msg: "boom"}
	if !IsConfigError(e) || !IsConfigError(fmt.Errorf("a: %w", fmt.Errorf("b: %w", e))) || e.Error() != "boom" {
		t.Error("IsConfigError false for a config error")
	}
}

func secretConfig(t *testing.T) Config {
	t.Helper()
	cfg := mustLoad(t, []string{
		"ERPSYNC_ERP_BASE_URL=https://erp.example.com",
		"ERPSYNC_ERP_USERNAME=integration",
		"ERPSYNC_ERP_PASSWORD=" + testPassword,
		"ERPSYNC_ERP_CLIENT_SECRET=" + testSecret,
		"ERPSYNC_DATABASE_URL=postgres://u:" + testDBPass + "@db/x",
	}, Options{Streams: testSpecs, NeedERP: true})
	if cfg.Sources[0].Logins[0].Password.Value() != testPassword || cfg.Sources[0].Logins[0].ClientSecret.Value() != testSecret {
		t.Fatalf("secrets not loaded: %+v", cfg.Sources[0])
	}
	return cfg
}

func TestSecretNeverFormatted(t *testing.T) {
	cfg := secretConfig(t)
	src := cfg.Sources[0]
	// The verbs sit in a variable so that vet lets %s and %d reach the
	// structs: a careless log line may use any of them.
	var out strings.Builder
	for _, verb := range []string{"%v", "%s", "%+v", "%#v", "%q", "%x", "%X"} {
		for _, v := range []any{cfg, &cfg, src, &src, cfg.Sources, src.Logins[0].Password, src.Logins[0].ClientSecret, cfg.DatabaseURL, []Secret{src.Logins[0].Password}, map[string]any{"pw": src.Logins[0].Password}} {
			fmt.Fprintf(&out, verb+"\n", v)
		}
	}
	fmt.Fprintln(&out, cfg, src, src.Logins[0].Password)
	fmt.Fprint(&out, cfg, src, src.Logins[0].Password)
	for _, s := range []string{testPassword, testSecret, testDBPass} {
		if strings.Contains(out.String(), s) {
			t.Errorf("a formatted Config shows the secret %q:\n%s", s, out.String())
		}
	}
	if !strings.Contains(out.String(), "[redacted]") {
		t.Errorf("no mask in %s", out.String())
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "cfg", cfg, "password", src.Logins[0].Password, "source", src)
	if s := buf.String(); strings.Contains(s, testPassword) || strings.Contains(s, testSecret) || strings.Contains(s, testDBPass) {
		t.Errorf("slog text output shows a secret: %s", s)
	}
}

func TestSecretWrongVerb(t *testing.T) {
	cfg := secretConfig(t)
	src := cfg.Sources[0]
	var out strings.Builder
	for _, verb := range []string{"%d", "%t", "%f", "%c"} {
		for _, v := range []any{cfg, src, src.Logins[0].Password, cfg.DatabaseURL} {
			fmt.Fprintf(&out, verb+"\n", v)
		}
	}
	for _, s := range []string{testPassword, testSecret, testDBPass} {
		if strings.Contains(out.String(), s) {
			t.Errorf("output shows the secret %q:\n%s", s, out.String())
		}
	}
}

func TestSecretNeverMarshalled(t *testing.T) {
	cfg := secretConfig(t)
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "cfg", cfg, "password", cfg.Sources[0].Logins[0].Password)
	for _, out := range []string{string(b), buf.String()} {
		for _, s := range []string{testPassword, testSecret, testDBPass} {
			if strings.Contains(out, s) {
				t.Errorf("output shows the secret %q: %s", s, out)
			}
		}
	}
}

// Settings of real installations: the answer size cap and the messaging
// prefix, from the environment or per source in the file.
func TestInstallationSettings(t *testing.T) {
	cfg := mustLoad(t, baseEnv(), Options{Streams: testSpecs})
	if s := cfg.Sources[0]; s.MaxResponse != 64<<20 || s.MessagingPrefix != "/messaging" || s.Keys.MaxResponse != "ERPSYNC_ERP_MAX_RESPONSE" {
		t.Errorf("defaults: max %d, prefix %q, key %q", s.MaxResponse, s.MessagingPrefix, s.Keys.MaxResponse)
	}
	for in, want := range map[string]int64{"128MiB": 128 << 20, "100MB": 100e6, "1GiB": 1 << 30, "1048576": 1 << 20, "512KiB": 512 << 10} {
		cfg := mustLoad(t, baseEnv("ERPSYNC_ERP_MAX_RESPONSE="+in, "ERPSYNC_ERP_MESSAGING_PREFIX=/chat"), Options{Streams: testSpecs})
		if s := cfg.Sources[0]; s.MaxResponse != want || s.MessagingPrefix != "/chat" {
			t.Errorf("%s: max %d prefix %q, want %d /chat", in, s.MaxResponse, s.MessagingPrefix, want)
		}
	}
	for _, bad := range []string{"lots", "-1MiB", "10KiB", "64 MiB x"} {
		_, err := Load(baseEnv("ERPSYNC_ERP_MAX_RESPONSE="+bad), Options{Streams: testSpecs})
		wantConfigError(t, err, "ERPSYNC_ERP_MAX_RESPONSE")
	}
	for _, bad := range []string{"messaging", "/messaging/", "/m?x"} {
		_, err := Load(baseEnv("ERPSYNC_ERP_MESSAGING_PREFIX="+bad), Options{Streams: testSpecs})
		wantConfigError(t, err, "ERPSYNC_ERP_MESSAGING_PREFIX", "messaging_prefix")
	}
	file := writeFile(t, "erpsync.yaml", `
sources:
  - name: a
    base_url: https://a.example.com
    username: u
    password_env: A_PASSWORD
    max_response: 8MiB
    messaging_prefix: /chat
  - name: b
    base_url: https://b.example.com
    username: u
    password_file: `+writeFile(t, "pw", "secret\n")+`
`)
	cfg = mustLoad(t, []string{"ERPSYNC_CONFIG=" + file, "A_PASSWORD=x"}, Options{Streams: testSpecs})
	a, b := cfg.Sources[0], cfg.Sources[1]
	if a.MaxResponse != 8<<20 || a.MessagingPrefix != "/chat" || a.Keys.MaxResponse != "sources[0].max_response" {
		t.Errorf("source a: %d %q %q", a.MaxResponse, a.MessagingPrefix, a.Keys.MaxResponse)
	}
	// Errors name the settings the operator actually wrote.
	if got := a.Logins[0].CredentialKeys(); got != "sources[0].username and A_PASSWORD (sources[0].password_env)" {
		t.Errorf("source a credentials: %q", got)
	}
	if got := b.Logins[0].CredentialKeys(); got != "sources[1].username and sources[1].password_file" {
		t.Errorf("source b credentials: %q", got)
	}
	if got := mustLoad(t, baseEnv(), Options{Streams: testSpecs}).Sources[0].Logins[0].CredentialKeys(); got != "ERPSYNC_ERP_USERNAME and ERPSYNC_ERP_PASSWORD" {
		t.Errorf("environment credentials: %q", got)
	}
	_, err := Load([]string{"ERPSYNC_CONFIG=" + writeFile(t, "bad.yaml", "sources:\n  - name: a\n    max_response: huge\n")}, Options{Streams: testSpecs})
	wantConfigError(t, err, "sources[0].max_response")
}

// historyOf renders each stream's history setting: on, off or default.
func historyOf(s Source) string {
	var parts []string
	for _, st := range s.Streams {
		v := "default"
		if st.History != nil {
			v = map[bool]string{true: "on", false: "off"}[*st.History]
		}
		parts = append(parts, st.Name+"="+v)
	}
	return strings.Join(parts, "; ")
}

func TestLoadHistory(t *testing.T) {
	opts := Options{Streams: testSpecs}
	path := writeFile(t, "c.yaml", `
sources:
  - base_url: https://erp.example.com
    username: u
    password_env: MY_ERP_PASSWORD
    streams:
      invoices: {history: false}
      cashboxes: {}
      messaging_messages: {history: true}
`)
	env := []string{"MY_ERP_PASSWORD=" + testPassword}
	cfg := mustLoad(t, env, Options{Streams: testSpecs, ConfigFile: path})
	if got, want := historyOf(cfg.Sources[0]), "cashboxes=default; invoices=off; messaging_messages=on"; got != want {
		t.Errorf("from the file: %s, want %s", got, want)
	}

	// ERPSYNC_HISTORY names the streams that keep it, everywhere.
	cfg = mustLoad(t, append(env, "ERPSYNC_HISTORY=cashboxes"), Options{Streams: testSpecs, ConfigFile: path})
	if got, want := historyOf(cfg.Sources[0]), "cashboxes=on; invoices=off; messaging_messages=off"; got != want {
		t.Errorf("with ERPSYNC_HISTORY: %s, want %s", got, want)
	}
	cfg = mustLoad(t, baseEnv("ERPSYNC_HISTORY=none"), opts)
	if got := historyOf(cfg.Sources[0]); strings.Contains(got, "=on") || strings.Contains(got, "=default") {
		t.Errorf("ERPSYNC_HISTORY=none: %s", got)
	}
	cfg = mustLoad(t, baseEnv(), opts)
	if got := historyOf(cfg.Sources[0]); strings.Contains(got, "=on") || strings.Contains(got, "=off") {
		t.Errorf("without a setting every stream keeps its default: %s", got)
	}

	// Asking history of a stream that has no history table is an error.
	_, err := Load(baseEnv("ERPSYNC_STREAMS=invoices,balance_sheet", "ERPSYNC_HISTORY=balance_sheet"), opts)
	wantConfigError(t, err, "balance_sheet", "keeps no history", "ERPSYNC_HISTORY")
}

func TestLoadLogins(t *testing.T) {
	dir := t.TempDir()
	riyadh, jeddah := filepath.Join(dir, "riyadh"), filepath.Join(dir, "jeddah")
	os.WriteFile(riyadh, []byte(testPassword+"\n"), 0o600)
	os.WriteFile(jeddah, []byte("jeddah-pw\n"), 0o600)
	path := writeFile(t, "c.yaml", fmt.Sprintf(`
sources:
  - name: main
    base_url: https://erp.example.com
    logins:
      - {username: sync-riyadh, password_file: %s}
      - {username: sync-jeddah, password_file: %s}
      - {auth: plugin, client_id: ext-1, client_secret_env: EXT_SECRET}
`, riyadh, jeddah))
	cfg := mustLoad(t, []string{"EXT_SECRET=" + testSecret}, Options{Streams: testSpecs, ConfigFile: path, NeedERP: true})
	ls := cfg.Sources[0].Logins
	if len(ls) != 3 || ls[0].Name() != "sync-riyadh" || ls[0].Password.Value() != testPassword || ls[1].Name() != "sync-jeddah" ||
		ls[1].Password.Value() != "jeddah-pw" || ls[2].Name() != "ext-1" || ls[2].Auth != "plugin" || ls[2].ClientSecret.Value() != testSecret {
		t.Fatalf("logins = %+v", ls)
	}
	if got := ls[1].CredentialKeys(); got != "sources[0].logins[1].username and sources[0].logins[1].password_file" {
		t.Errorf("credential keys of the second login = %q", got)
	}

	// The single-login keys and a list of logins on one source are an
	// error naming both.
	both := writeFile(t, "both.yaml", fmt.Sprintf(`
sources:
  - base_url: https://erp.example.com
    username: someone
    logins:
      - {username: sync-riyadh, password_file: %s}
`, riyadh))
	_, err := Load(nil, Options{Streams: testSpecs, ConfigFile: both, NeedERP: true})
	wantConfigError(t, err, "sources[0]: logins", "sources[0].username")
	// So are the single-login variables on a source that lists logins.
	_, err = Load([]string{"ERPSYNC_SOURCE=main", "ERPSYNC_ERP_USERNAME=x", "ERPSYNC_ERP_PASSWORD=" + testPassword, "EXT_SECRET=s"},
		Options{Streams: testSpecs, ConfigFile: path, NeedERP: true})
	wantConfigError(t, err, "logins", "ERPSYNC_ERP_USERNAME", "ERPSYNC_ERP_PASSWORD")
	// ... but not on another source of the file.
	mustLoad(t, []string{"ERPSYNC_SOURCE=other", "ERPSYNC_ERP_BASE_URL=https://other.example.com", "ERPSYNC_ERP_USERNAME=x",
		"ERPSYNC_ERP_PASSWORD=" + testPassword, "EXT_SECRET=s"}, Options{Streams: testSpecs, ConfigFile: path, NeedERP: true})

	twice := writeFile(t, "twice.yaml", fmt.Sprintf(`
sources:
  - base_url: https://erp.example.com
    logins:
      - {username: sync, password_file: %[1]s}
      - {username: sync, password_file: %[1]s}
`, riyadh))
	_, err = Load(nil, Options{Streams: testSpecs, ConfigFile: twice, NeedERP: true})
	wantConfigError(t, err, `login "sync" is listed twice`)

	nopw := writeFile(t, "nopw.yaml", `
sources:
  - base_url: https://erp.example.com
    logins:
      - {username: sync}
`)
	_, err = Load(nil, Options{Streams: testSpecs, ConfigFile: nopw, NeedERP: true})
	wantConfigError(t, err, "sources[0].logins[0].password_file")
}

func TestLoadRequestBudget(t *testing.T) {
	cfg := mustLoad(t, baseEnv(), Options{Streams: testSpecs})
	if s := cfg.Sources[0]; s.MaxConcurrentRequests != 2 || s.MaxRequestsPerSecond != 0 {
		t.Errorf("defaults: %d concurrent, %g per second", s.MaxConcurrentRequests, s.MaxRequestsPerSecond)
	}
	cfg = mustLoad(t, baseEnv("ERPSYNC_ERP_MAX_CONCURRENT_REQUESTS=4", "ERPSYNC_ERP_MAX_REQUESTS_PER_SECOND=2.5"), Options{Streams: testSpecs})
	if s := cfg.Sources[0]; s.MaxConcurrentRequests != 4 || s.MaxRequestsPerSecond != 2.5 {
		t.Errorf("from the environment: %d concurrent, %g per second", s.MaxConcurrentRequests, s.MaxRequestsPerSecond)
	}
	path := writeFile(t, "c.yaml", `
sources:
  - base_url: https://erp.example.com
    username: u
    password_env: P
    max_concurrent_requests: 1
    max_requests_per_second: 10
`)
	cfg = mustLoad(t, []string{"P=" + testPassword}, Options{Streams: testSpecs, ConfigFile: path})
	if s := cfg.Sources[0]; s.MaxConcurrentRequests != 1 || s.MaxRequestsPerSecond != 10 {
		t.Errorf("from the file: %d concurrent, %g per second", s.MaxConcurrentRequests, s.MaxRequestsPerSecond)
	}
	for _, bad := range []struct{ env, want string }{
		{"ERPSYNC_ERP_MAX_CONCURRENT_REQUESTS=0", "ERPSYNC_ERP_MAX_CONCURRENT_REQUESTS"},
		{"ERPSYNC_ERP_MAX_CONCURRENT_REQUESTS=two", "ERPSYNC_ERP_MAX_CONCURRENT_REQUESTS"},
		{"ERPSYNC_ERP_MAX_REQUESTS_PER_SECOND=-1", "ERPSYNC_ERP_MAX_REQUESTS_PER_SECOND"},
	} {
		_, err := Load(baseEnv(bad.env), Options{Streams: testSpecs})
		wantConfigError(t, err, bad.want)
	}
}

func TestLoadStreamSettings(t *testing.T) {
	path := writeFile(t, "c.yaml", `
sources:
  - base_url: https://erp.example.com
    username: u
    password_env: P
    streams:
      balance_sheet: {months: 36}
      invoices: {}
`)
	env := []string{"P=" + testPassword}
	cfg := mustLoad(t, env, Options{Streams: testSpecs, ConfigFile: path})
	bs, _ := cfg.Sources[0].Stream("balance_sheet")
	if bs.Settings["months"] != "36" || bs.Settings["reread_months"] != "3" {
		t.Errorf("balance_sheet settings = %v, want months 36 and the default reread_months 3", bs.Settings)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"balance_sheet: {monthz: 3}", "sources[0].streams.balance_sheet.monthz: unknown setting; balance_sheet takes schedule, history, months, reread_months"},
		{"balance_sheet: {months: many}", `sources[0].streams.balance_sheet.months: "many": not a number of months`},
		{"invoices: {months: 3}", "sources[0].streams.invoices.months: unknown setting; invoices takes schedule, history"},
		{"invoices: {history: maybe}", "sources[0].streams.invoices.history"},
	} {
		p := writeFile(t, "bad.yaml", "sources:\n  - base_url: https://erp.example.com\n    username: u\n    password_env: P\n    streams:\n      "+bad.yaml+"\n")
		_, err := Load(env, Options{Streams: testSpecs, ConfigFile: p})
		wantConfigError(t, err, bad.want)
	}
}
