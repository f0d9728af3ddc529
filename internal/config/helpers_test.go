package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const (
	testPassword = "pw-Hunter2+/=secret"
	testSecret   = "plugin-client-S3cret"
	testDBPass   = "db-pa55word"
)

// testSpecs is a catalog as configuration sees the product's.
var testSpecs = []StreamSpec{
	{Name: "invoices", Schedule: "@every 5m", Follows: true, SweepSchedule: "@every 6h", WindowSchedule: "@every 20m", Core: true, History: true},
	{Name: "currencies", Schedule: "@every 30m", Core: true, History: true},
	{Name: "cashboxes", Schedule: "@every 30m", Core: true, History: true},
	{Name: "cashbox_reconciliations", Schedule: "@every 30m", Core: true, History: true},
	{Name: "journal_entries", Schedule: "@every 30m", Follows: true, History: true},
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

// oneSource writes a config file of one source with one login, whose
// password is in the variable of sourcePassword; more is the rest of the
// source's keys, as YAML indented under it.
func oneSource(t *testing.T, more string) string {
	t.Helper()
	return writeFile(t, "c.yaml", "sources:\n  - base_url: https://erp.example.com\n    username: u\n    password_env: P\n"+strings.TrimPrefix(more, "\n"))
}

// sourcePassword is the variable oneSource's login takes its password from.
const sourcePassword = "P=" + testPassword

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
