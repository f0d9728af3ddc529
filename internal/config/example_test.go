package config

import (
	"os"
	"path/filepath"
	"regexp"
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
	// Every secret file the example names.
	for _, m := range regexp.MustCompile(`/etc/erpsync/secret/([A-Za-z0-9._-]+)`).FindAllStringSubmatch(string(b), -1) {
		if err := os.WriteFile(filepath.Join(dir, m[1]), []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	text := strings.ReplaceAll(string(b), "/etc/erpsync/secret/", dir+"/")
	path := filepath.Join(dir, "erpsync.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load([]string{"ERPSYNC_DATABASE_URL=postgres://localhost/x"}, Options{ConfigFile: path, NeedERP: true,
		Streams: []StreamSpec{{Name: "invoices", Core: true}, {Name: "currencies", Core: true}, {Name: "cashboxes", Core: true}, {Name: "cashbox_reconciliations", Core: true},
			{Name: "balance_sheet", Settings: []SettingSpec{{Key: "months", Default: "24"}, {Key: "reread_months", Default: "3"}}}}})
	if err != nil {
		t.Fatalf("example config: %v", err)
	}
	if len(cfg.Sources) != 2 || cfg.Sources[0].Name != "main" || cfg.Sources[1].Logins[0].Auth != "plugin" {
		t.Fatalf("sources = %+v", cfg.Sources)
	}
	if sc, _ := cfg.Sources[0].Stream("currencies"); sc.Schedule != "CRON_TZ=Europe/Berlin 0 6 * * *" {
		t.Errorf("currencies schedule = %q", sc.Schedule)
	}
	main := cfg.Sources[0]
	if len(main.Logins) != 2 || main.Logins[1].Password.Value() != "s3cret" {
		t.Errorf("main's logins = %d, want two with their password files read", len(main.Logins))
	}
	if main.MaxConcurrentRequests != 2 || main.MaxRequestsPerSecond != 5 {
		t.Errorf("main's budget = %d requests, %g a second; want 2 and 5", main.MaxConcurrentRequests, main.MaxRequestsPerSecond)
	}
	if sc, ok := main.Stream("balance_sheet"); !ok || sc.Settings["months"] != "24" || sc.Settings["reread_months"] != "3" {
		t.Errorf("balance_sheet = %+v, want months 24 and reread_months 3", sc)
	}
}
