package config

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// exampleSpecs are the streams the examples name.
var exampleSpecs = []StreamSpec{{Name: "invoices", Core: true, Follows: true}, {Name: "currencies", Core: true}, {Name: "cashboxes", Core: true},
	{Name: "cashbox_reconciliations", Core: true},
	{Name: "balance_sheet", Settings: []SettingSpec{{Key: "months", Default: "24"}, {Key: "reread_months", Default: "3"}}}}

// withSecrets writes text as a config file whose secret files (under
// /etc/erpsync/secret/) exist, mode 0600, in a directory of the test's.
func withSecrets(t *testing.T, text string) string {
	t.Helper()
	dir := t.TempDir()
	for _, m := range regexp.MustCompile(`/etc/erpsync/secret/([A-Za-z0-9._-]+)`).FindAllStringSubmatch(text, -1) {
		if err := os.WriteFile(filepath.Join(dir, m[1]), []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "erpsync.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(text, "/etc/erpsync/secret/", dir+"/")), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// envFile reads the variables a systemd EnvironmentFile sets.
func envFile(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

// TestExamples are the configurations the repository ships: each loads as
// its comments say.
func TestExamples(t *testing.T) {
	b, err := os.ReadFile("../../configs/erpsync.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	example := string(b)

	t.Run("TheExampleConfigLoads", func(t *testing.T) {
		cfg, err := Load([]string{"ERPSYNC_DATABASE_URL=postgres://localhost/x"}, Options{ConfigFile: withSecrets(t, example), NeedERP: true, Streams: exampleSpecs})
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
		// A schedule and no sweep schedule: every run a complete sweep.
		if sc, _ := main.Stream("invoices"); sc.SweepSchedule != "@every 2m" || sc.SweepFrom != FromSchedule {
			t.Errorf("invoices sweep %q from %q, want its schedule", sc.SweepSchedule, sc.SweepFrom)
		}
		if len(cfg.Warnings) > 0 {
			t.Errorf("warnings: %q", cfg.Warnings)
		}
	})

	t.Run("ItsCommentedSettingsLoadWhenUncommented", func(t *testing.T) {
		commented := regexp.MustCompile(`(?m)^(\s*)# ((sweep_schedule|drift): .*)$`)
		if n := len(commented.FindAllString(example, -1)); n < 3 {
			t.Fatalf("%d commented settings, want the three of sweep_schedule and drift", n)
		}
		text := commented.ReplaceAllString(example, "$1$2")
		cfg, err := Load(nil, Options{ConfigFile: withSecrets(t, text), NeedERP: true, Streams: exampleSpecs})
		if err != nil {
			t.Fatalf("example config, uncommented: %v", err)
		}
		sc, _ := cfg.Sources[0].Stream("invoices")
		if sc.SweepSchedule != "@every 6h" || sc.Drift != DriftStop {
			t.Errorf("invoices = %+v", sc)
		}
	})

	t.Run("TheSystemdEnvironmentFitsTheExampleConfig", func(t *testing.T) {
		// The unit reads erpsync.env beside the example config: nothing it
		// sets may be meant for a source the file does not have.
		env := envFile(t, "../../deploy/systemd/erpsync.env.example")
		if _, err := Load(env, Options{ConfigFile: withSecrets(t, example), NeedERP: true, Streams: exampleSpecs}); err != nil {
			t.Errorf("erpsync.env.example with the example config: %v", err)
		}
	})

	t.Run("TheKubernetesConfigLoads", func(t *testing.T) {
		b, err := os.ReadFile("../../deploy/kubernetes/configmap.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var cm struct {
			Data map[string]string `yaml:"data"`
		}
		if err := yaml.Unmarshal(b, &cm); err != nil || cm.Data["erpsync.yaml"] == "" {
			t.Fatalf("configmap: %v, data %v", err, cm.Data)
		}
		cfg, err := Load(nil, Options{ConfigFile: withSecrets(t, cm.Data["erpsync.yaml"]), NeedERP: true, Streams: exampleSpecs})
		if err != nil {
			t.Fatalf("the configmap's erpsync.yaml: %v", err)
		}
		if len(cfg.Sources) != 1 || cfg.Sources[0].Logins[0].Password.Value() != "s3cret" {
			t.Errorf("sources = %+v", cfg.Sources)
		}
	})
}
