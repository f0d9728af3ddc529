package dashboards

import (
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// repo is the repository's root, seen from this package's directory (where go test runs).
const repo = "../.."

// The parts of the files this test reads.
type (
	composeFile struct {
		Services map[string]composeService `yaml:"services"`
	}
	composeService struct {
		Image       string            `yaml:"image"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		DependsOn   map[string]any    `yaml:"depends_on"`
	}
	datasourcesFile struct {
		Datasources []struct {
			Name           string            `yaml:"name"`
			Type           string            `yaml:"type"`
			UID            string            `yaml:"uid"`
			URL            string            `yaml:"url"`
			User           string            `yaml:"user"`
			IsDefault      bool              `yaml:"isDefault"`
			JSONData       map[string]any    `yaml:"jsonData"`
			SecureJSONData map[string]string `yaml:"secureJsonData"`
		} `yaml:"datasources"`
	}
	dashboardsFile struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	prometheusFile struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
)

func readYAML[T any](t *testing.T, name string) T {
	t.Helper()
	var v T
	b, err := os.ReadFile(filepath.Join(repo, name))
	if err == nil {
		err = yaml.Unmarshal(b, &v)
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

// mounts maps a service's bind-mount targets to their host paths, and fails the test for a host
// path that is not in the repository: compose would mount an empty directory instead.
func mounts(t *testing.T, name string, s composeService) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":") // host:target[:ro]
		if len(parts) < 2 || !strings.HasPrefix(parts[0], "./") {
			continue // a named volume
		}
		if _, err := os.Stat(filepath.Join(repo, parts[0])); err != nil {
			t.Errorf("service %s mounts %s: %v", name, parts[0], err)
		}
		out[parts[1]] = parts[0]
	}
	return out
}

// envRef is how the provisioning file names an environment variable: $__env{NAME}, ${NAME} or $NAME.
var envRef = regexp.MustCompile(`^\$(?:__env\{(\w+)\}|\{(\w+)\}|(\w+))$`)

func TestDockerCompose(t *testing.T) {
	// docker-compose.yml runs Grafana with both dashboards and the data sources they read
	// provisioned from files: the warehouse as the analyst login, the metrics from a Prometheus
	// service that scrapes erpsync.
	t.Run("ProvisionsGrafanaWithBothDashboardsAndTheirDataSources", func(t *testing.T) {
		compose := readYAML[composeFile](t, "docker-compose.yml")
		sources := readYAML[datasourcesFile](t, "deploy/grafana/provisioning/datasources/datasources.yaml")
		providers := readYAML[dashboardsFile](t, "deploy/grafana/provisioning/dashboards/dashboards.yaml")

		grafana, ok := compose.Services["grafana"]
		if !ok {
			t.Fatal("docker-compose.yml has no grafana service")
		}
		if !regexp.MustCompile(`^grafana/grafana:\d+\.\d+\.\d+$`).MatchString(grafana.Image) {
			t.Errorf("grafana image %q: want grafana/grafana pinned to a release (x.y.z)", grafana.Image)
		}
		gm := mounts(t, "grafana", grafana)
		if gm["/etc/grafana/provisioning"] != "./deploy/grafana/provisioning" {
			t.Errorf("grafana mounts %v: want ./deploy/grafana/provisioning at /etc/grafana/provisioning", gm)
		}

		// Each dashboard is mounted where a file provider loads from.
		var dirs []string
		for _, p := range providers.Providers {
			if p.Type == "file" {
				dirs = append(dirs, p.Options.Path)
			}
		}
		dashboardFiles := []string{"deploy/grafana/erpsync.json", "deploy/grafana/warehouse.json"}
		for _, file := range dashboardFiles {
			loaded := false
			for target, host := range gm {
				for _, dir := range dirs {
					if host == "./"+file && path.Dir(target) == dir {
						loaded = true
					}
				}
			}
			if !loaded {
				t.Errorf("%s is not mounted in a directory a file provider loads (%q); grafana mounts %v", file, dirs, gm)
			}
		}

		// Every data source a panel names is provisioned, with the type it expects. A uid of
		// the form ${var} is a data source variable (erpsync.json's DS_PROMETHEUS), which picks
		// a data source of the variable's type.
		types := map[string]string{} // by uid
		provisioned := map[string]bool{}
		for _, ds := range sources.Datasources {
			types[ds.UID] = ds.Type
			provisioned[ds.Type] = true
		}
		for _, file := range dashboardFiles {
			d := loadDashboard(t, file)
			dsVars := map[string]string{} // name: plugin type
			for _, v := range d.Variables {
				var typ string
				if v.Type == "datasource" && json.Unmarshal(v.Query, &typ) == nil {
					dsVars[v.Name] = typ
				}
			}
			refs := map[DataSourceRef]string{} // each data source the dashboard names: a panel naming it
			for _, p := range d.Panels() {
				for _, ref := range p.Datasources() {
					if ref != nil { // a row; its panels name their own
						refs[*ref] = p.Title
					}
				}
			}
			for ref, title := range refs {
				name, isVar := strings.CutPrefix(ref.UID, "${")
				name = strings.TrimSuffix(name, "}")
				switch {
				case isVar && !provisioned[dsVars[name]]:
					t.Errorf("%s (panel %q among others): variable %s takes a data source of type %q; none is provisioned", file, title, name, dsVars[name])
				case !isVar && types[ref.UID] != ref.Type:
					t.Errorf("%s (panel %q among others): data source uid %s of type %s is not provisioned (have %v)", file, title, ref.UID, ref.Type, types)
				}
			}
		}

		// The warehouse data source logs in as the compose analyst login, to the compose database.
		pg := compose.Services["postgres"]
		roles, err := os.ReadFile(filepath.Join(repo, "deploy/compose/initdb/20-demo-logins.sql"))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`CREATE ROLE analyst LOGIN PASSWORD '([^']*)' IN ROLE erpsync_analyst;`).FindSubmatch(roles)
		if m == nil {
			t.Fatal("20-demo-logins.sql no longer creates the analyst login as a member of erpsync_analyst")
		}
		for _, ds := range sources.Datasources {
			switch ds.Type {
			case postgresType:
				if ds.UID != warehouseUID || ds.User != "analyst" || ds.JSONData["database"] != pg.Environment["POSTGRES_DB"] {
					t.Errorf("warehouse data source: uid %s, user %s, database %v; want %s, analyst, %s",
						ds.UID, ds.User, ds.JSONData["database"], warehouseUID, pg.Environment["POSTGRES_DB"])
				}
				host, _, err := net.SplitHostPort(ds.URL)
				if _, ok := compose.Services[host]; err != nil || !ok || host != "postgres" {
					t.Errorf("warehouse data source url %q: want the compose postgres service", ds.URL)
				}
				ref := envRef.FindStringSubmatch(ds.SecureJSONData["password"])
				if ref == nil {
					t.Errorf("warehouse password %q: want it from an environment variable", ds.SecureJSONData["password"])
					break
				}
				if env := ref[1] + ref[2] + ref[3]; grafana.Environment[env] != string(m[1]) {
					t.Errorf("grafana's %s = %q, want the analyst login's password from 20-demo-logins.sql", env, grafana.Environment[env])
				}
			case "prometheus":
				u, err := url.Parse(ds.URL)
				if _, ok := compose.Services[u.Hostname()]; err != nil || !ok {
					t.Errorf("prometheus data source url %q: no such compose service", ds.URL)
				}
			}
		}
		for _, dep := range []string{"postgres", "prometheus"} {
			if _, ok := grafana.DependsOn[dep]; !ok {
				t.Errorf("grafana does not depend on %s", dep)
			}
		}

		// Prometheus loads erpsync's rules from a mounted file and scrapes a compose service.
		prom, ok := compose.Services["prometheus"]
		if !ok {
			t.Fatal("docker-compose.yml has no prometheus service")
		}
		pm := mounts(t, "prometheus", prom)
		if pm["/etc/prometheus/prometheus.yml"] != "./deploy/prometheus/prometheus.yml" {
			t.Fatalf("prometheus mounts %v: want ./deploy/prometheus/prometheus.yml at /etc/prometheus/prometheus.yml", pm)
		}
		cfg := readYAML[prometheusFile](t, "deploy/prometheus/prometheus.yml")
		if len(cfg.RuleFiles) == 0 || pm[cfg.RuleFiles[0]] != "./deploy/prometheus/erpsync-rules.yaml" {
			t.Errorf("prometheus.yml rule_files %q: want the mount of ./deploy/prometheus/erpsync-rules.yaml (%v)", cfg.RuleFiles, pm)
		}
		for _, sc := range cfg.ScrapeConfigs {
			for _, st := range sc.StaticConfigs {
				for _, target := range st.Targets {
					host, _, err := net.SplitHostPort(target)
					if _, ok := compose.Services[host]; err != nil || !ok {
						t.Errorf("prometheus.yml scrapes %q: no such compose service", target)
					}
				}
			}
		}
	})
}
