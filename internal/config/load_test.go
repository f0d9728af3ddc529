package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLoad is what Load makes of the variables and the file: the defaults,
// which wins, and every setting read into its place.
func TestLoad(t *testing.T) {
	t.Run("FillsTheDefaultsOfASourceOfTheVariablesAlone", func(t *testing.T) {
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
	})

	t.Run("HasNoSourceWithoutERPVariables", func(t *testing.T) {
		cfg := mustLoad(t, []string{"ERPSYNC_DATABASE_URL=postgres://x"}, Options{Streams: testSpecs})
		if len(cfg.Sources) != 0 {
			t.Errorf("sources = %+v, want none", cfg.Sources)
		}
		if cfg.DatabaseURL.Value() != "postgres://x" {
			t.Errorf("DatabaseURL = %q", cfg.DatabaseURL.Value())
		}
		_, err := Load([]string{"ERPSYNC_DATABASE_URL=postgres://x"}, Options{Streams: testSpecs, NeedERP: true})
		wantConfigError(t, err, "ERPSYNC_ERP_BASE_URL")
	})

	t.Run("NamesTheVariablesSourceAndEnablesTheStreamsTheyList", func(t *testing.T) {
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
	})

	t.Run("ReadsTheDatabaseURLFromEitherVariableThenTheFile", func(t *testing.T) {
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
	})

	t.Run("RequiresADatabaseOnlyWhenAsked", func(t *testing.T) {
		cfg := mustLoad(t, baseEnv(), Options{Streams: testSpecs})
		wantConfigError(t, cfg.RequireDatabase(), "ERPSYNC_DATABASE_URL")
	})

	t.Run("ReadsSourcesFromTheFileWithTheVariablesOnTop", func(t *testing.T) {
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
	})

	t.Run("PrefersTheConfigFlagToERPSYNC_CONFIG", func(t *testing.T) {
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
	})

	t.Run("ReadsTheProcessVariables", func(t *testing.T) {
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
	})

	t.Run("ReadsExtensionCredentials", func(t *testing.T) {
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
	})

	t.Run("AcceptsPlainHTTPOnlyOnLoopback", func(t *testing.T) {
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
	})

	// Settings of real installations: the answer size cap and the messaging
	// prefix, from the environment or per source in the file.
	t.Run("ReadsTheAnswerBoundAndMessagingPrefixOfAnInstallation", func(t *testing.T) {
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
			wantConfigError(t, err, "ERPSYNC_ERP_MESSAGING_PREFIX")
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
	})

	t.Run("ReadsHistoryFromTheFileAndERPSYNC_HISTORY", func(t *testing.T) {
		opts := Options{Streams: testSpecs}
		path := oneSource(t, `
    streams:
      invoices: {history: false}
      cashboxes: {}
      messaging_messages: {history: true}
`)
		env := []string{sourcePassword}
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
	})

	t.Run("ReadsAListOfLoginsOrOneLoginNeverBoth", func(t *testing.T) {
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
	})

	t.Run("ReadsTheRequestBudget", func(t *testing.T) {
		cfg := mustLoad(t, baseEnv(), Options{Streams: testSpecs})
		if s := cfg.Sources[0]; s.MaxConcurrentRequests != 2 || s.MaxRequestsPerSecond != 0 {
			t.Errorf("defaults: %d concurrent, %g per second", s.MaxConcurrentRequests, s.MaxRequestsPerSecond)
		}
		cfg = mustLoad(t, baseEnv("ERPSYNC_ERP_MAX_CONCURRENT_REQUESTS=4", "ERPSYNC_ERP_MAX_REQUESTS_PER_SECOND=2.5"), Options{Streams: testSpecs})
		if s := cfg.Sources[0]; s.MaxConcurrentRequests != 4 || s.MaxRequestsPerSecond != 2.5 {
			t.Errorf("from the environment: %d concurrent, %g per second", s.MaxConcurrentRequests, s.MaxRequestsPerSecond)
		}
		path := oneSource(t, `
    max_concurrent_requests: 1
    max_requests_per_second: 10
`)
		cfg = mustLoad(t, []string{sourcePassword}, Options{Streams: testSpecs, ConfigFile: path})
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
	})

	t.Run("ReadsAStreamsOwnSettingsAgainstItsSpec", func(t *testing.T) {
		path := oneSource(t, `
    streams:
      balance_sheet: {months: 36}
      invoices: {}
`)
		env := []string{sourcePassword}
		cfg := mustLoad(t, env, Options{Streams: testSpecs, ConfigFile: path})
		bs, _ := cfg.Sources[0].Stream("balance_sheet")
		if bs.Settings["months"] != "36" || bs.Settings["reread_months"] != "3" {
			t.Errorf("balance_sheet settings = %v, want months 36 and the default reread_months 3", bs.Settings)
		}
		for _, bad := range []struct{ yaml, want string }{
			{"balance_sheet: {monthz: 3}", `sources[0].streams.balance_sheet.monthz: unknown setting; balance_sheet takes schedule, history, drift, months, reread_months; did you mean "months"?`},
			{"balance_sheet: {months: many}", `sources[0].streams.balance_sheet.months: "many": not a number of months`},
			{"invoices: {months: 3}", "sources[0].streams.invoices.months: unknown setting; invoices takes schedule, sweep_schedule, window_schedule, window_pages, history, drift"},
			{"invoices: {history: maybe}", "sources[0].streams.invoices.history"},
		} {
			p := oneSource(t, "    streams:\n      "+bad.yaml+"\n")
			_, err := Load(env, Options{Streams: testSpecs, ConfigFile: p})
			wantConfigError(t, err, bad.want)
		}
	})
}

// TestProblems is how Load reports a configuration with several mistakes: every
// one at once, in the order of where it is, and none that only follows from
// another.
func TestProblems(t *testing.T) {
	problems := func(t *testing.T, err error) []string {
		t.Helper()
		wantConfigError(t, err)
		var ce *configError
		if !errors.As(err, &ce) {
			t.Fatalf("%v is no *configError", err)
		}
		var out []string
		for _, p := range ce.problems {
			out = append(out, p.String())
		}
		return out
	}
	wantProblems := func(t *testing.T, err error, want ...string) {
		t.Helper()
		got := problems(t, err)
		if len(got) != len(want) {
			t.Fatalf("%d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
		}
		for i := range want {
			if !strings.Contains(got[i], want[i]) {
				t.Errorf("problem %d is %q, want one containing %q\nall:\n%s", i+1, got[i], want[i], strings.Join(got, "\n"))
			}
		}
	}

	t.Run("ReportsEveryProblemAtOnceInTheOrderOfWhereItIs", func(t *testing.T) {
		path := writeFile(t, "c.yaml", `log_level: verbose
sources:
  - name: a
    base_url: https://erp.example.com
    username: u
    password_env: P
    page_size: 20000
    timout: 5s
    streams:
      invoicez: {}
      balance_sheet: {months: many}
  - name: b
    base_url: http://erp.example.com
    logins:
      - {username: x, password_file: /nonexistent/pw}
retention: 1h
`)
		_, err := Load([]string{"ERPSYNC_CONFIG=" + path, sourcePassword, "ERPSYNC_HTTP_ADDR=8080", "ERPSYNC_STREAMS=invoices,balance_sheet,bogus"},
			Options{Streams: testSpecs, NeedERP: true})
		wantProblems(t, err,
			"ERPSYNC_HTTP_ADDR: \"8080\" is not host:port",
			`ERPSYNC_STREAMS: "bogus": unknown stream`,
			"c.yaml:1: log_level: \"verbose\"",
			"c.yaml:7: source \"a\": sources[0].page_size: 20000 is not between 1 and 10000",
			`c.yaml:8: sources[0].timout: unknown key; did you mean "timeout"?`,
			"c.yaml:10: sources[0].streams.invoicez: unknown stream",
			`c.yaml:11: source "a": sources[0].streams.balance_sheet.months: "many": not a number of months`,
			"c.yaml:13: source \"b\": sources[1].base_url: \"http://erp.example.com\": HTTPS is required",
			"c.yaml:15: source \"b\": sources[1].logins[0].password_file: cannot read /nonexistent/pw",
			"c.yaml:16: retention: 1h0m0s is less than a day",
		)
		if first := strings.SplitN(err.Error(), "\n", 2)[0]; first != "10 configuration problems:" {
			t.Errorf("the error begins %q, want the count of problems", first)
		}
	})

	t.Run("ReportsNoProblemThatFollowsFromAnother", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			yaml string
			env  []string
			want []string
		}{
			// The password is missing because its key is misspelt: the misspelling is
			// the problem. Likewise a URL's.
			{"a misspelt key of a setting that is required", "sources:\n  - base_url: https://erp.example.com\n    username: u\n    pasword_file: /x\n", nil,
				[]string{`c.yaml:4: sources[0].pasword_file: unknown key; did you mean "password_file"?`}},
			{"a misspelt base_url", "sources:\n  - base_ur: https://erp.example.com\n    username: u\n    password_env: P\n", []string{sourcePassword},
				[]string{`c.yaml:2: sources[0].base_ur: unknown key; did you mean "base_url"?`}},
			// A password written in the file is refused as such, not also missing.
			{"a password written in the file", "sources:\n  - base_url: https://erp.example.com\n    username: u\n    password: " + testPassword + "\n", nil,
				[]string{"c.yaml:4: sources[0].password: a secret is never written in the file itself: give password_file"}},
			// A secret file that cannot be read is that, not a login without a password.
			{"a secret file that cannot be read", "sources:\n  - base_url: https://erp.example.com\n    username: u\n    password_file: /nonexistent/pw\n", nil,
				[]string{`c.yaml:4: source "default": sources[0].password_file: cannot read /nonexistent/pw`}},
			// A refused timeout says nothing of the grace that must fit it.
			{"a refused shutdown timeout", "shutdown_timeout: soon\nshutdown_grace: 15s\n", baseEnv(),
				[]string{`c.yaml:1: shutdown_timeout: "soon" is not a duration`}},
			// A refused schedule makes no sweep-schedule problem of its own.
			{"a refused schedule", "sources:\n  - base_url: https://erp.example.com\n    streams:\n      invoices: {schedule: often}\n", baseEnv(),
				[]string{`c.yaml:4: source "default": sources[0].streams.invoices.schedule: "often"`}},
			// Variables meant for a source that is not there make no "no source" too.
			{"variables without their source", "sources:\n  - name: main\n    base_url: https://erp.example.com\n    username: u\n    password_env: P\n",
				[]string{sourcePassword, "ERPSYNC_SOURCE=other", "ERPSYNC_ERP_USERNAME=v"},
				[]string{"ERPSYNC_ERP_USERNAME: these variables describe the source named \"other\""}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				_, err := Load(tt.env, Options{Streams: testSpecs, NeedERP: true, ConfigFile: writeFile(t, "c.yaml", tt.yaml)})
				wantProblems(t, err, tt.want...)
			})
		}
	})

	// A key at the top of the file (or a variable) that every stream takes is one
	// setting: its mistake is reported there, once, and not blamed on a stream,
	// least of all one that cannot follow.
	t.Run("ReportsAMistakeInASharedSettingOnceWhereItIsWritten", func(t *testing.T) {
		for _, tt := range []struct {
			name, yaml string
			env        []string
			want       string
		}{
			{"sweep_schedule at the top", "sweep_schedule: \"every 6h\"\n", nil, `c.yaml:1: sweep_schedule: "every 6h": expected exactly 5 fields`},
			{"schedule at the top", "schedule: often\n", nil, `c.yaml:1: schedule: "often"`},
			{"ERPSYNC_SWEEP_SCHEDULE", "", []string{"ERPSYNC_SWEEP_SCHEDULE=every 6h"}, `ERPSYNC_SWEEP_SCHEDULE: "every 6h"`},
			{"ERPSYNC_SCHEDULE", "", []string{"ERPSYNC_SCHEDULE=@every"}, `ERPSYNC_SCHEDULE: "@every"`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				yaml := tt.yaml + `sources:
  - name: a
    base_url: https://a.example.com
    streams: {cashbox_reconciliations: {}, invoices: {}, currencies: {}}
  - name: b
    base_url: https://b.example.com
`
				_, err := Load(tt.env, Options{Streams: testSpecs, ConfigFile: writeFile(t, "c.yaml", yaml)})
				wantProblems(t, err, tt.want)
				for _, blamed := range []string{"stream", "source"} {
					if strings.Contains(err.Error(), blamed) {
						t.Errorf("%v: blamed on a %s", err, blamed)
					}
				}
			})
		}
	})
}
