package config

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEnvironment is the variables' mistakes, each named by its variable, and
// the source the ERPSYNC_ERP_* variables describe.
func TestEnvironment(t *testing.T) {
	t.Run("RefusesEachMistakeNamingItsVariable", func(t *testing.T) {
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
			{"schedule", baseEnv("ERPSYNC_SCHEDULE=@every"), Options{Streams: testSpecs}, []string{"ERPSYNC_SCHEDULE: \"@every\""}},
			{"page size", baseEnv("ERPSYNC_ERP_PAGE_SIZE=lots"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_PAGE_SIZE", "lots"}},
			{"page size negative", baseEnv("ERPSYNC_ERP_PAGE_SIZE=-1"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_PAGE_SIZE", "-1"}},
			{"page size too big", baseEnv("ERPSYNC_ERP_PAGE_SIZE=10001"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_PAGE_SIZE", "10001"}},
			{"timeout", baseEnv("ERPSYNC_ERP_TIMEOUT=1h2x"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_TIMEOUT"}},
			{"negative timeout", baseEnv("ERPSYNC_ERP_TIMEOUT=-1s"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_TIMEOUT"}},
			{"auth", baseEnv("ERPSYNC_ERP_AUTH=oauth"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_AUTH", "oauth"}},
			{"source name", baseEnv("ERPSYNC_SOURCE=a/b"), Options{Streams: testSpecs}, []string{"ERPSYNC_SOURCE", "a/b"}},
			{"unknown stream", baseEnv("ERPSYNC_STREAMS=invoices,bogus"), Options{Streams: testSpecs[:2]}, []string{"bogus", "ERPSYNC_STREAMS"}},
			{"stream twice", baseEnv("ERPSYNC_STREAMS=invoices,invoices"), Options{Streams: testSpecs}, []string{"invoices", "twice"}},
			{"unknown history stream", baseEnv("ERPSYNC_HISTORY=invoices,invoicse"), Options{Streams: testSpecs}, []string{"ERPSYNC_HISTORY", `"invoicse": unknown stream; did you mean "invoices"?`}},
			{"plain http", baseEnv("ERPSYNC_ERP_BASE_URL=http://erp.example.com"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_BASE_URL", "HTTPS is required"}},
			{"plain http lan", baseEnv("ERPSYNC_ERP_BASE_URL=http://192.168.1.10:8000"), Options{Streams: testSpecs}, []string{"HTTPS is required"}},
			{"not a url", baseEnv("ERPSYNC_ERP_BASE_URL=erp.example.com"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_BASE_URL"}},
			{"ftp", baseEnv("ERPSYNC_ERP_BASE_URL=ftp://erp.example.com"), Options{Streams: testSpecs}, []string{"ERPSYNC_ERP_BASE_URL", "https"}},
			{"base url with user information", baseEnv("ERPSYNC_ERP_BASE_URL=https://sync:" + testPassword + "@erp.example.com"), Options{Streams: testSpecs},
				[]string{`ERPSYNC_ERP_BASE_URL: "https://[redacted]@erp.example.com": user information`}},
			{"base url with a query", baseEnv("ERPSYNC_ERP_BASE_URL=https://erp.example.com/?api_key=" + testSecret), Options{Streams: testSpecs},
				[]string{`ERPSYNC_ERP_BASE_URL: "https://erp.example.com/?api_key=[redacted]": a query`}},
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
	})

	t.Run("RefusesANumberWithTrailingGarbage", func(t *testing.T) {
		for _, v := range []string{"50abc", "1e3", "10 20", "12.5"} {
			_, err := Load(baseEnv("ERPSYNC_ERP_PAGE_SIZE="+v), Options{Streams: testSpecs})
			wantConfigError(t, err, "ERPSYNC_ERP_PAGE_SIZE")
		}
	})
}

// TestVariablesDescribeOneSource is the rule that places the ERPSYNC_ERP_*
// variables: on the file's source of the name ERPSYNC_SOURCE gives
// ("default" unless set), else on one more source, which needs a URL.
func TestVariablesDescribeOneSource(t *testing.T) {
	pw := writeFile(t, "pw", "s3cret\n")
	// The shape of configs/erpsync.example.yaml: a source that lists its
	// logins, and one with the single-login keys.
	listed := writeFile(t, "listed.yaml", `
sources:
  - name: main
    base_url: https://erp.example.com
    logins:
      - {username: sync-riyadh, password_file: `+pw+`}
  - name: subsidiary
    base_url: https://sub.example.com
    auth: plugin
    client_id: erpsync
    client_secret_file: `+pw+`
`)

	t.Run("ApplyToTheFileSourceOfTheirName", func(t *testing.T) {
		path := writeFile(t, "c.yaml", "sources:\n  - base_url: https://erp.example.com\n    username: sync\n")
		cfg := mustLoad(t, []string{"ERPSYNC_ERP_PASSWORD=" + testPassword}, Options{Streams: testSpecs, ConfigFile: path, NeedERP: true})
		if len(cfg.Sources) != 1 || cfg.Sources[0].Logins[0].Password.Value() != testPassword || cfg.Sources[0].Logins[0].Keys.Password != "ERPSYNC_ERP_PASSWORD" {
			t.Errorf("sources = %+v, want the file's one source with the variable's password", cfg.Sources)
		}
	})

	t.Run("NeverMakeASourceOfAPasswordMeantForTheFile", func(t *testing.T) {
		// The systemd example's env file set ERPSYNC_ERP_PASSWORD beside a
		// file whose logins are listed: that was a source "default" with
		// no URL, refused (or, for status, kept) as if the user had
		// written one.
		for _, needERP := range []bool{true, false} {
			cfg, err := Load([]string{"ERPSYNC_ERP_PASSWORD=" + testPassword}, Options{Streams: testSpecs, ConfigFile: listed, NeedERP: needERP})
			wantConfigError(t, err, "ERPSYNC_ERP_PASSWORD", `"default"`, "ERPSYNC_SOURCE", "main, subsidiary", "ERPSYNC_ERP_BASE_URL", "password_file or password_env")
			for _, s := range cfg.Sources {
				if s.Name == "default" {
					t.Errorf("NeedERP %v: a phantom source %q", needERP, s.Name)
				}
			}
		}
		// Nor of a source-wide setting with no source to go to.
		_, err := Load([]string{"ERPSYNC_ERP_PAGE_SIZE=50", "ERPSYNC_SOURCE=branch"}, Options{Streams: testSpecs, ConfigFile: listed})
		wantConfigError(t, err, "ERPSYNC_ERP_PAGE_SIZE", `"branch"`)
	})

	t.Run("NameBothWhenTheirSourceListsLogins", func(t *testing.T) {
		_, err := Load([]string{"ERPSYNC_SOURCE=main", "ERPSYNC_ERP_PASSWORD=" + testPassword}, Options{Streams: testSpecs, ConfigFile: listed})
		wantConfigError(t, err, "sources[0].logins and ERPSYNC_ERP_PASSWORD", "not both", "password_file or password_env")
	})

	t.Run("DescribeOneMoreSourceWithAURL", func(t *testing.T) {
		cfg := mustLoad(t, baseEnv(), Options{Streams: testSpecs, ConfigFile: listed, NeedERP: true})
		if len(cfg.Sources) != 3 || cfg.Sources[2].Name != "default" || cfg.Sources[2].BaseURL != "https://erp.example.com" {
			t.Errorf("sources = %+v, want main, subsidiary and the variables' default", cfg.Sources)
		}
		// The file's sources keep their own settings.
		if cfg.Sources[0].Logins[0].Password.Value() != "s3cret" || cfg.Sources[0].Logins[0].Keys.Password != "sources[0].logins[0].password_file" {
			t.Errorf("main's login = %+v", cfg.Sources[0].Logins[0])
		}
	})

	t.Run("SetTheSourceWideSettingsOfTheirSourceOnly", func(t *testing.T) {
		cfg := mustLoad(t, []string{"ERPSYNC_SOURCE=subsidiary", "ERPSYNC_ERP_PAGE_SIZE=50"}, Options{Streams: testSpecs, ConfigFile: listed})
		if main, sub := cfg.Sources[0], cfg.Sources[1]; main.PageSize != 500 || sub.PageSize != 50 {
			t.Errorf("page sizes: main %d, subsidiary %d; want 500 and 50", main.PageSize, sub.PageSize)
		}
		_, err := Load([]string{"ERPSYNC_SOURCE=subsidiary", "ERPSYNC_ERP_PAGE_SIZE=0"}, Options{Streams: testSpecs, ConfigFile: listed})
		wantConfigError(t, err, `source "subsidiary": ERPSYNC_ERP_PAGE_SIZE: 0 is not between 1 and 10000`)
	})
}

// TestUnreadVariables: an ERPSYNC_* variable that erpsync does not read is a
// warning, with the nearest variable it does read, as a key of the file gets;
// none that erpsync reads is ever one.
func TestUnreadVariables(t *testing.T) {
	warnings := func(t *testing.T, env []string, opts Options) []string {
		t.Helper()
		opts.Streams = testSpecs
		cfg, _ := Load(env, opts) // the warnings come with an error too
		return cfg.Warnings
	}

	t.Run("AreWarnedOfWithTheNearestVariable", func(t *testing.T) {
		for _, tt := range []struct{ name, want string }{
			{"ERPSYNC_ERP_PASSWROD", "ERPSYNC_ERP_PASSWROD is not read by erpsync; did you mean ERPSYNC_ERP_PASSWORD?"},
			{"ERPSYNC_ERP_PASSWORD_FIEL", "ERPSYNC_ERP_PASSWORD_FIEL is not read by erpsync; did you mean ERPSYNC_ERP_PASSWORD_FILE?"},
			{"ERPSYNC_SHEDULE", "ERPSYNC_SHEDULE is not read by erpsync; did you mean ERPSYNC_SCHEDULE?"},
			{"ERPSYNC_DATABASEURL", "ERPSYNC_DATABASEURL is not read by erpsync; did you mean ERPSYNC_DATABASE_URL?"},
			{"ERPSYNC_COLOUR", "ERPSYNC_COLOUR is not read by erpsync (docs/configuration.md lists the variables it reads)"},
		} {
			got := warnings(t, baseEnv(tt.name+"="+testPassword), Options{})
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("%s: warnings %q, want [%q]", tt.name, got, tt.want)
			}
			for _, w := range got {
				if strings.Contains(w, testPassword) {
					t.Errorf("%s: warning %q shows the value", tt.name, w)
				}
			}
		}
	})

	// The warning comes with the error it explains.
	t.Run("AreWarnedOfWhenTheConfigurationIsRefused", func(t *testing.T) {
		env := []string{"ERPSYNC_ERP_BASE_URL=https://erp.example.com", "ERPSYNC_ERP_USERNAME=u", "ERPSYNC_ERP_PASSWROD=" + testPassword}
		cfg, err := Load(env, Options{Streams: testSpecs, NeedERP: true})
		wantConfigError(t, err, "login u has no password")
		if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "did you mean ERPSYNC_ERP_PASSWORD?") {
			t.Errorf("warnings %q, want the misspelt variable's", cfg.Warnings)
		}
	})

	t.Run("SayNothingOfOtherVariablesOrEmptyOnes", func(t *testing.T) {
		if got := warnings(t, baseEnv("PGPASSWORD=x", "ERPSYNC=x", "ERPSYNC_ERP_PASSWROD=", "HOME=/root"), Options{}); len(got) > 0 {
			t.Errorf("warnings %q, want none", got)
		}
	})

	t.Run("NeverNameAVariableErpsyncReads", func(t *testing.T) {
		for _, name := range knownVariables() {
			if got := warnings(t, []string{name + "=x"}, Options{}); len(got) > 0 {
				t.Errorf("%s: warnings %q", name, got)
			}
		}
		// A variable the file names as holding a secret is read.
		path := writeFile(t, "c.yaml", "sources:\n  - base_url: https://erp.example.com\n    auth: plugin\n    client_id: c\n    client_secret_env: ERPSYNC_DAMMAM_SECRET\n")
		if got := warnings(t, []string{"ERPSYNC_DAMMAM_SECRET=" + testSecret}, Options{ConfigFile: path}); len(got) > 0 {
			t.Errorf("a variable the file names: warnings %q", got)
		}
	})

	// Every ERPSYNC_* variable that erpsync's code, tests, examples and deployment
	// files set or read is one that Load knows: a variable read somewhere new
	// that this package is not told of fails here.
	t.Run("NeverNameAVariableTheRepositoryUses", func(t *testing.T) {
		name := regexp.MustCompile(`ERPSYNC_[A-Z0-9_]*[A-Z0-9]\b`)
		// A variable a config file names (password_env: ERPSYNC_RIYADH_PASSWORD)
		// is read with that file, as NeverNameAVariableErpsyncReads shows.
		namedByFile := regexp.MustCompile(`_env:\s*(ERPSYNC_[A-Z0-9_]+)`)
		seen, named := map[string]string{}, map[string]bool{}
		err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch {
			case d.IsDir() && (d.Name() == ".git" || path == "../../docs" || path == "../../bin"):
				return filepath.SkipDir
			case d.IsDir(), strings.HasSuffix(path, ".md"), filepath.Dir(path) == "../../internal/config":
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if bytes.IndexByte(b, 0) >= 0 {
				return nil // a binary built here
			}
			text := string(b)
			for _, m := range namedByFile.FindAllStringSubmatch(text, -1) {
				named[m[1]] = true
			}
			for _, m := range name.FindAllStringIndex(text, -1) {
				if m[1] < len(text) && text[m[1]] == '*' {
					continue // a family of names in a comment (ERPSYNC_ERP_*)
				}
				seen[text[m[0]:m[1]]] = path
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) < 20 {
			t.Fatalf("found only %d variables in the repository: %v", len(seen), seen)
		}
		for v, path := range seen {
			if named[v] {
				continue
			}
			if got := warnings(t, []string{v + "=x"}, Options{}); len(got) > 0 {
				t.Errorf("%s (in %s): warnings %q", v, path, got)
			}
		}
	})
}
