package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSecret is the mask a secret wears wherever it could be printed.
func TestSecret(t *testing.T) {
	cfg := secretConfig(t)
	t.Run("IsNeverFormatted", func(t *testing.T) {
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
	})

	t.Run("IsNeverFormattedByAWrongVerb", func(t *testing.T) {
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
	})

	t.Run("IsNeverMarshalled", func(t *testing.T) {
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
	})
}

// TestSecretSources is where secrets are read from: a variable, a file, or a
// variable the file names.
func TestSecretSources(t *testing.T) {
	t.Run("ReadsAPasswordFileDroppingItsTrailingNewline", func(t *testing.T) {
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
	})

	t.Run("RefusesTheVariableAndTheFileTogether", func(t *testing.T) {
		p := writeFile(t, "pw", testPassword+"\n")
		_, err := Load(baseEnv("ERPSYNC_ERP_PASSWORD_FILE="+p), Options{Streams: testSpecs})
		wantConfigError(t, err, "ERPSYNC_ERP_PASSWORD", "not both")
	})

	t.Run("RefusesAFileItCannotReadOrAnEmptyOne", func(t *testing.T) {
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
	})

	t.Run("ReadsTheVariableTheFileNames", func(t *testing.T) {
		path := oneSource(t, "")
		cfg := mustLoad(t, []string{sourcePassword}, Options{Streams: testSpecs, ConfigFile: path, NeedERP: true})
		if len(cfg.Sources) != 1 || cfg.Sources[0].Name != "default" || cfg.Sources[0].Logins[0].Password.Value() != testPassword {
			t.Errorf("sources = %+v", cfg.Sources)
		}
		_, err := Load(nil, Options{Streams: testSpecs, ConfigFile: path, NeedERP: true})
		wantConfigError(t, err, "password", "ERPSYNC_ERP_PASSWORD")
	})

	t.Run("NamesTheKeyOfAFileItCannotRead", func(t *testing.T) {
		path := writeFile(t, "c.yaml", "sources:\n  - name: a\n    base_url: https://erp.example.com\n    password_file: /nonexistent/pw\n")
		_, err := Load(nil, Options{Streams: testSpecs, ConfigFile: path})
		wantConfigError(t, err, "sources[0].password_file")
	})
}

func TestSecretFileReadableByEveryone(t *testing.T) {
	secretFile := func(t *testing.T, mode os.FileMode) string {
		t.Helper()
		p := writeFile(t, "pw", testPassword+"\n")
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wantWarning := func(t *testing.T, cfg Config, want ...string) {
		t.Helper()
		if len(cfg.Warnings) != 1 {
			t.Fatalf("warnings %q, want one", cfg.Warnings)
		}
		for _, w := range append(want, "every user") {
			if !strings.Contains(cfg.Warnings[0], w) {
				t.Errorf("warning %q does not contain %q", cfg.Warnings[0], w)
			}
		}
		if strings.Contains(cfg.Warnings[0], testPassword) {
			t.Errorf("warning %q shows the secret", cfg.Warnings[0])
		}
	}

	t.Run("IsReadWithAWarningNamingTheVariable", func(t *testing.T) {
		p := secretFile(t, 0o644)
		cfg := mustLoad(t, []string{"ERPSYNC_ERP_BASE_URL=https://erp.example.com", "ERPSYNC_ERP_USERNAME=u", "ERPSYNC_ERP_PASSWORD_FILE=" + p},
			Options{Streams: testSpecs, NeedERP: true})
		if cfg.Sources[0].Logins[0].Password.Value() != testPassword {
			t.Error("password not read")
		}
		wantWarning(t, cfg, "ERPSYNC_ERP_PASSWORD_FILE", p, "0644")
	})

	t.Run("IsReadWithAWarningNamingTheKey", func(t *testing.T) {
		p := secretFile(t, 0o604)
		path := writeFile(t, "c.yaml", "sources:\n  - base_url: https://erp.example.com\n    logins:\n      - {auth: plugin, client_id: c, client_secret_file: "+p+"}\n")
		wantWarning(t, mustLoad(t, nil, Options{Streams: testSpecs, ConfigFile: path, NeedERP: true}), "sources[0].logins[0].client_secret_file", "0604")
	})

	t.Run("IsReadSilentlyWhenOnlyItsOwnerOrGroupMayReadIt", func(t *testing.T) {
		for _, mode := range []os.FileMode{0o600, 0o640, 0o440, 0o400} {
			cfg := mustLoad(t, []string{"ERPSYNC_ERP_BASE_URL=https://erp.example.com", "ERPSYNC_ERP_PASSWORD_FILE=" + secretFile(t, mode)}, Options{Streams: testSpecs})
			if len(cfg.Warnings) > 0 {
				t.Errorf("mode %04o: warnings %q", mode, cfg.Warnings)
			}
		}
	})
}

// TestConfigFileReadableByEveryone: the rule of secret files holds for the
// config file when it writes a secret in any key: a database URL's password,
// a base URL's user information or query, a password or client secret written
// as it is. Every key that may hold one is enumerated from the table.
func TestConfigFileReadableByEveryone(t *testing.T) {
	// secretIn writes, for a key of the table, a file that gives it a secret
	// value; the secret is one the test helpers look for in messages.
	secretIn := map[string][]string{
		"database_url":         {"database_url: postgres://u:" + testDBPass + "@db/x\n", "database_url: 'host=db user=u password=" + testDBPass + "'\n", "database_url: postgres://u@db/x?password=" + testDBPass + "\n"},
		"migrate_database_url": {"migrate_database_url: postgres://owner:" + testDBPass + "@db/x\n"},
		"base_url":             {"sources:\n  - base_url: https://u:" + testPassword + "@erp.example.com\n", "sources:\n  - base_url: https://erp.example.com/?key=" + testSecret + "\n"},
		"password":             {"sources:\n  - password: " + testPassword + "\n", "sources:\n  - logins:\n      - {username: u, password: " + testPassword + "}\n"},
		"client_secret":        {"sources:\n  - client_secret: " + testSecret + "\n", "sources:\n  - logins:\n      - {auth: plugin, client_secret: " + testSecret + "}\n"},
	}
	load := func(t *testing.T, text string, mode os.FileMode) (string, Config) {
		t.Helper()
		path := writeFile(t, "c.yaml", text)
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		cfg, _ := Load(nil, Options{Streams: testSpecs, ConfigFile: path}) // a secret written as it is is also refused
		return path, cfg
	}
	// Both ways: a key the table does not mark is not left out of the rule
	// by the weakening of its mark.
	for name := range secretIn {
		if !slices.ContainsFunc(keys, func(k key) bool { return k.name == name && (k.exposes != nil || k.secret) }) {
			t.Errorf("%s may hold a secret, but no key of that name is marked secret or exposes it", name)
		}
	}
	for _, k := range keys {
		if k.exposes == nil && !k.secret {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			texts := secretIn[k.name]
			if len(texts) == 0 {
				t.Fatalf("no file writing a secret in %s: add one", k.name)
			}
			for _, text := range texts {
				path, cfg := load(t, text, 0o644)
				if len(cfg.Warnings) != 1 {
					t.Fatalf("%q at mode 0644: warnings %q, want one", text, cfg.Warnings)
				}
				w := cfg.Warnings[0]
				for _, want := range []string{"config file: " + path + " can be read by every user of the host (mode 0644)", k.name + " on line "} {
					if !strings.Contains(w, want) {
						t.Errorf("%q: warning %q lacks %q", text, w, want)
					}
				}
				for _, s := range []string{testPassword, testSecret, testDBPass} {
					if strings.Contains(w, s) {
						t.Errorf("warning %q shows the secret", w)
					}
				}
				for _, mode := range []os.FileMode{0o600, 0o640} {
					if _, cfg := load(t, text, mode); len(cfg.Warnings) > 0 {
						t.Errorf("%q at mode %04o: warnings %q", text, mode, cfg.Warnings)
					}
				}
			}
		})
	}

	t.Run("SaysNothingOfAFileThatWritesNoSecret", func(t *testing.T) {
		_, cfg := load(t, "database_url: postgres://u@db/x?sslmode=require\nmigrate_database_url: 'host=db user=owner'\nsources:\n  - base_url: https://erp.example.com/base/\n    username: u\n    password_file: /nonexistent\n", 0o666)
		if len(cfg.Warnings) > 0 {
			t.Errorf("warnings %q, want none", cfg.Warnings)
		}
	})
}
