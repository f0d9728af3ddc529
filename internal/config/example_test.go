package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The example in configs/ must stay a valid configuration.
func TestExampleConfigLoads(t *testing.T) {
	b, err := os.ReadFile("../../configs/erpsync.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"erp-password", "subsidiary-client-secret"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	text := strings.ReplaceAll(string(b), "/etc/erpsync/secret/", dir+"/")
	path := filepath.Join(dir, "erpsync.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load([]string{"ERPSYNC_DATABASE_URL=postgres://localhost/x"}, Options{ConfigFile: path, NeedERP: true,
		Streams: []StreamSpec{{Name: "invoices", Core: true}, {Name: "currencies", Core: true}, {Name: "cashboxes", Core: true}, {Name: "cashbox_reconciliations", Core: true}}})
	if err != nil {
		t.Fatalf("example config: %v", err)
	}
	if len(cfg.Sources) != 2 || cfg.Sources[0].Name != "main" || cfg.Sources[1].Logins[0].Auth != "plugin" {
		t.Fatalf("sources = %+v", cfg.Sources)
	}
	if sc, _ := cfg.Sources[0].Stream("currencies"); sc.Schedule != "CRON_TZ=Europe/Berlin 0 6 * * *" {
		t.Errorf("currencies schedule = %q", sc.Schedule)
	}
	if cfg.Sources[0].Logins[0].Password.Value() != "s3cret" {
		t.Errorf("password file not read")
	}
}
