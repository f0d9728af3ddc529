package helmchart

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/erpsync/erpsync/internal/cli"
	"github.com/erpsync/erpsync/internal/config"
	"github.com/erpsync/erpsync/internal/sync/streams"
)

const (
	kubernetesDir = "../../deploy/kubernetes"
	// rulesFile is the alert rules' one source; the chart carries a copy,
	// chartRulesFile, since helm reads no file outside the chart.
	rulesFile      = "../../deploy/prometheus/erpsync-rules.yaml"
	chartRulesFile = chartDir + "/files/erpsync-rules.yaml"
	settingsDoc    = "../../docs/configuration.md"
)

// rendering is what a values file of the chart's ci/ directory makes.
type rendering struct {
	file string
	// runtime and owner are the Secret keys of the two database URLs: the
	// runtime role's, read by the replicas and the verification, and the
	// schema owner's, read by the migration only.
	runtime, owner keyRef
	madeSecrets    bool // the chart makes both Secrets (else they are the user's)
	replicas       int
	sources        int  // in the configuration
	operator       bool // the Prometheus Operator's objects
	verify         bool // the verification's CronJob
}

var renderings = []rendering{
	{file: "ci/default-values.yaml", runtime: keyRef{"erpsync", "database-url"}, owner: keyRef{"erpsync-owner", "database-url"},
		madeSecrets: true, replicas: 2, sources: 1},
	{file: "ci/existing-secret-values.yaml", runtime: keyRef{"warehouse-runtime", "runtime-url"}, owner: keyRef{"warehouse-owner", "owner-url"},
		replicas: 2, sources: 1},
	{file: "ci/monitoring-values.yaml", runtime: keyRef{"erpsync", "database-url"}, owner: keyRef{"erpsync-owner", "database-url"},
		madeSecrets: true, replicas: 2, sources: 1, operator: true, verify: true},
	{file: "ci/multi-source-values.yaml", runtime: keyRef{"erpsync", "database-url"}, owner: keyRef{"erpsync-owner", "database-url"},
		madeSecrets: true, replicas: 2, sources: 2},
	{file: "ci/single-replica-values.yaml", runtime: keyRef{"erpsync", "database-url"}, owner: keyRef{"erpsync-owner", "database-url"},
		madeSecrets: true, replicas: 1, sources: 1},
}

// TestChart documents the Helm chart deploy/helm/erpsync.
func TestChart(t *testing.T) {
	// Helm cannot read deploy/prometheus/, so the chart carries the rule file;
	// edit that one and copy it over.
	t.Run("CarriesTheAlertRuleFileByteForByte", func(t *testing.T) {
		want, err := os.ReadFile(rulesFile)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(chartRulesFile)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s differs from %s: cp %s %s", chartRulesFile, rulesFile, strings.TrimPrefix(rulesFile, "../../"), strings.TrimPrefix(chartRulesFile, "../../"))
		}
	})

	t.Run("TestsEveryValuesFileOfItsCIDirectory", func(t *testing.T) {
		files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var tested []string
		for _, r := range renderings {
			tested = append(tested, filepath.Join(chartDir, r.file))
		}
		if slices.Sort(tested); !slices.Equal(files, tested) {
			t.Fatalf("ci/ holds %q, the tests render %q", files, tested)
		}
	})

	// helm lint, then helm lint --strict, with the chart's defaults and with
	// each values file: clean means no warning and no error.
	t.Run("Lints", func(t *testing.T) {
		for _, values := range append([]string{""}, ciFiles()...) {
			args := []string{"lint", chartDir, "--kube-version", kubeVersion}
			if values != "" {
				args = append(args, "--values", filepath.Join(chartDir, values))
			}
			out, err := runHelm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
				t.Errorf("helm lint with %q is not clean:\n%s", values, out)
				continue
			}
			if _, err := runHelm(t, append(args, "--strict")...); err != nil {
				t.Error(err)
			}
		}
	})

	// Installing fails, naming what to set, where the replicas could not run.
	t.Run("RefusesValuesItCannotRun", func(t *testing.T) {
		defaults := filepath.Join(chartDir, "ci/default-values.yaml")
		for _, c := range []struct {
			name string
			args []string
			want string
		}{
			{"NoCredentials", nil, "secret.stringData.database-url is required"},
			{"NoOwnersURL", []string{"--set", "secret.existingSecret=mine"}, "migration.secret.stringData.database-url is required"},
			{"APasswordFileNotMounted", []string{"--values", defaults, "--set", "config.sources[0].password_file=/etc/erpsync/secret/riyadh-password"},
				`secret.fileKeys does not list "riyadh-password"`},
			{"AVariableTheChartSets", []string{"--values", defaults, "--set", "env.GOMEMLIMIT=1GiB"}, "GOMEMLIMIT is set twice"},
		} {
			t.Run(c.name, func(t *testing.T) {
				_, err := template(t, chartDir, c.args...)
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("rendering %q: %v, want an error saying %q", c.args, err, c.want)
				}
			})
		}
	})

	// With its defaults the chart makes the objects of deploy/kubernetes/, but
	// for what is the chart's own: names of the release in labels and
	// selectors, the image from values, Helm's annotations, the namespace.
	t.Run("MakesDeployKubernetesObjectsWithItsDefaults", func(t *testing.T) {
		// The Secrets made out of band, as deploy/kubernetes/ has them.
		chart := render(t, "ci/default-values.yaml", "--set", "secret.existingSecret=erpsync", "--set", "migration.secret.existingSecret=erpsync-migrate",
			"--set", "verify.enabled=true", "--set", "verify.pushgateway=http://pushgateway.monitoring:9091")
		chartsOwn := []string{"selector", "template.metadata", "template.spec.containers.*.image",
			"template.spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.*.podAffinityTerm.labelSelector",
			"jobTemplate.metadata", "jobTemplate.spec.template.metadata", "jobTemplate.spec.template.spec.containers.*.image"}
		for _, file := range []string{"deployment.yaml", "migrate-job.yaml", "verify-cronjob.yaml", "pdb.yaml", "service.yaml"} {
			k := readObjects(t, filepath.Join(kubernetesDir, file))[0]
			c := chart.find(k.Kind, k.Metadata.Name)
			if c == nil {
				t.Errorf("%s: the chart makes no %s %s", file, k.Kind, k.Metadata.Name)
				continue
			}
			for _, d := range differences("spec", without(c.raw["spec"], chartsOwn...), without(k.raw["spec"], chartsOwn...)) {
				t.Errorf("%s %s: %s (as in %s)", k.Kind, k.Metadata.Name, d, file)
			}
			if k.Kind == "Service" && !reflect.DeepEqual(c.Metadata.Annotations, k.Metadata.Annotations) {
				t.Errorf("Service annotations %v, want %s's %v", c.Metadata.Annotations, file, k.Metadata.Annotations)
			}
		}

		// The configuration may be written otherwise (a schedule per stream
		// rather than at the top, which every values file would inherit), but
		// erpsync reads the same from it.
		kustomize := slices.Concat(readObjects(t, filepath.Join(kubernetesDir, "deployment.yaml")),
			readObjects(t, filepath.Join(kubernetesDir, "configmap.yaml")))
		want, err := loadConfig(t, kustomize, kustomize.replicas(t))
		if err != nil {
			t.Fatalf("deploy/kubernetes/: %v", err)
		}
		got, err := loadConfig(t, chart, chart.replicas(t))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := describe(got), describe(want); !slices.Equal(got, want) {
			for _, l := range got {
				if !slices.Contains(want, l) {
					t.Errorf("the chart's configuration has %s, which deploy/kubernetes/'s has not", l)
				}
			}
			for _, l := range want {
				if !slices.Contains(got, l) {
					t.Errorf("the chart's configuration lacks deploy/kubernetes/'s %s", l)
				}
			}
		}

		// The Secrets the chart makes hold the keys of the example's.
		made, examples := render(t, "ci/default-values.yaml"), readObjects(t, filepath.Join(kubernetesDir, "secret.example.yaml"))
		for example, name := range map[string]string{"erpsync": renderings[0].runtime.Name, "erpsync-migrate": renderings[0].owner.Name} {
			s, c := examples.find("Secret", example), made.find("Secret", name)
			if s == nil || c == nil {
				t.Errorf("secret.example.yaml's Secret %s: %v, the chart's %s: %v", example, s != nil, name, c != nil)
				continue
			}
			if got, want := slices.Sorted(maps.Keys(c.Data)), slices.Sorted(maps.Keys(s.StringData)); !slices.Equal(got, want) {
				t.Errorf("Secret %s holds %q, want secret.example.yaml's %s's %q", name, got, example, want)
			}
		}
	})

	for _, r := range renderings {
		t.Run(filepath.Base(r.file), func(t *testing.T) {
			r.check(t, render(t, r.file))
		})
	}

	// NOTES.txt, rendered with each values file (helm template leaves it out,
	// so a copy of the chart renders it into a ConfigMap of its own), shows
	// none of the values' secrets.
	t.Run("NotesShowNoSecret", func(t *testing.T) {
		dir := copyChart(t)
		notes, err := os.ReadFile(filepath.Join(dir, "templates", "NOTES.txt"))
		if err != nil {
			t.Fatal(err)
		}
		tmpl := `{{- define "erpsync.notesUnderTest" }}` + string(notes) + "{{- end }}\n" +
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: {{ include \"erpsync.notesUnderTest\" . | quote }}\n"
		if err := os.WriteFile(filepath.Join(dir, "templates", "notes-under-test.yaml"), []byte(tmpl), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, r := range renderings {
			out, err := template(t, dir, "--values", filepath.Join(dir, r.file), "--show-only", "templates/notes-under-test.yaml")
			if err != nil {
				t.Fatal(err)
			}
			text := parseObjects(t, r.file, out).one(t, "ConfigMap").Data["notes"]
			if !strings.Contains(text, "Secret "+r.runtime.Name) {
				t.Errorf("%s: the notes do not say where the credentials are (Secret %s):\n%s", r.file, r.runtime.Name, text)
			}
			for _, v := range secretValues(t, r.file) {
				if strings.Contains(text, v) || strings.Contains(text, base64.StdEncoding.EncodeToString([]byte(v))) {
					t.Errorf("%s: the notes show a secret of the values:\n%s", r.file, text)
				}
			}
		}
	})
}

// check holds the rules every rendering keeps.
func (r rendering) check(t *testing.T, objs objects) {
	t.Run("LabelsEveryObjectAsTheReleasesPart", func(t *testing.T) {
		for _, o := range objs {
			l := o.Metadata.Labels
			if l["app.kubernetes.io/name"] != "erpsync" || l["app.kubernetes.io/instance"] != release ||
				l["app.kubernetes.io/managed-by"] != "Helm" || l["app.kubernetes.io/part-of"] != "erpsync" {
				t.Errorf("%s %s: labels %v", o.Kind, o.Metadata.Name, l)
			}
		}
	})

	// Every pod runs under the restricted Pod Security Standard, without a
	// token, with bounded memory and the Go GC told of the bound.
	t.Run("HardensEveryPod", func(t *testing.T) {
		pods := objs.pods()
		if len(pods) < 2 {
			t.Fatalf("%d pods, want the replicas' and the migration's at least", len(pods))
		}
		for _, p := range pods {
			s := p.Spec
			if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
				t.Errorf("%s: automountServiceAccountToken is not false", p)
			}
			if sc := s.SecurityContext; !isTrue(sc.RunAsNonRoot) || sc.RunAsUser == nil || *sc.RunAsUser == 0 || sc.SeccompProfile.Type != "RuntimeDefault" {
				t.Errorf("%s: pod securityContext %+v, want runAsNonRoot, a user other than root, seccomp RuntimeDefault", p, sc)
			}
			for _, c := range s.Containers {
				sc := c.SecurityContext
				if !isTrue(sc.RunAsNonRoot) || !isTrue(sc.ReadOnlyRootFilesystem) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
					isTrue(sc.Privileged) || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) || len(sc.Capabilities.Add) > 0 {
					t.Errorf("%s, container %s: securityContext %+v, want non-root, a read-only root filesystem, no privilege escalation, every capability dropped", p, c.Name, sc)
				}
				res := c.Resources
				if res.Requests["cpu"] == "" || res.Requests["memory"] == "" || res.Limits["memory"] == "" {
					t.Errorf("%s, container %s: resources %+v, want requests of cpu and memory and a memory limit", p, c.Name, res)
					continue
				}
				if e := c.env("GOMEMLIMIT"); e != nil {
					soft, err1 := bytesOf(e.Value)
					hard, err2 := bytesOf(res.Limits["memory"])
					if err1 != nil || err2 != nil || soft >= hard {
						t.Errorf("%s, container %s: GOMEMLIMIT %s, want below the memory limit %s (%v, %v)", p, c.Name, e.Value, res.Limits["memory"], err1, err2)
					}
				}
			}
		}
	})

	// The replicas: probes on the endpoints erpsync serves, a shutdown that
	// ends before the kubelet's SIGKILL, and no migration of their own.
	t.Run("RunsTheReplicasAsTheDaemon", func(t *testing.T) {
		d := objs.one(t, "Deployment")
		if d.Spec.Replicas == nil || *d.Spec.Replicas != r.replicas {
			t.Errorf("replicas %v, want %d", d.Spec.Replicas, r.replicas)
		}
		s := d.Spec.Template.Spec
		if len(s.Containers) != 1 {
			t.Fatalf("%d containers, want one", len(s.Containers))
		}
		c := s.Containers[0]
		if len(c.Args) == 0 || c.Args[0] != "run" {
			t.Errorf("args %q, want erpsync run", c.Args)
		}
		for _, p := range []struct {
			name, path string
			probe      *probe
		}{{"startupProbe", "/healthz", c.StartupProbe}, {"livenessProbe", "/healthz", c.LivenessProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}} {
			if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port != "http" {
				t.Errorf("%s: %+v, want an HTTP GET of %s on port http", p.name, p.probe, p.path)
			}
		}
		addr := c.env("ERPSYNC_HTTP_ADDR")
		if addr == nil || len(c.Ports) != 1 || c.Ports[0].Name != "http" {
			t.Fatalf("ERPSYNC_HTTP_ADDR %+v, ports %+v, want the address and one port named http", addr, c.Ports)
		}
		if _, port, err := net.SplitHostPort(addr.Value); err != nil || port != strconv.Itoa(c.Ports[0].ContainerPort) {
			t.Errorf("ERPSYNC_HTTP_ADDR %q, want the port http, %d", addr.Value, c.Ports[0].ContainerPort)
		}
		if e := c.env("ERPSYNC_AUTO_MIGRATE"); e == nil || e.Value != "false" {
			t.Errorf("ERPSYNC_AUTO_MIGRATE %+v, want false: the runtime role may not migrate", e)
		}
		e := c.env("ERPSYNC_SHUTDOWN_TIMEOUT")
		if e == nil {
			t.Fatal("no ERPSYNC_SHUTDOWN_TIMEOUT")
		}
		stop, err := time.ParseDuration(e.Value)
		if grace := s.TerminationGracePeriodSeconds; err != nil || grace == nil || stop >= time.Duration(*grace)*time.Second {
			t.Errorf("ERPSYNC_SHUTDOWN_TIMEOUT %v (%v), terminationGracePeriodSeconds %v: want the timeout below the grace period", stop, err, grace)
		}
	})

	// Helm runs the migration, and waits for it, before it applies anything
	// else of an install or an upgrade; it connects as the schema's owner.
	t.Run("MigratesAsTheOwnerBeforeInstallAndUpgrade", func(t *testing.T) {
		j := objs.one(t, "Job")
		events, _ := j.hook(t)
		if !slices.Contains(events, "pre-install") || !slices.Contains(events, "pre-upgrade") {
			t.Errorf("hook events %q, want pre-install and pre-upgrade", events)
		}
		if p := j.Metadata.Annotations["helm.sh/hook-delete-policy"]; !strings.Contains(p, "before-hook-creation") {
			t.Errorf("hook-delete-policy %q, want before-hook-creation: a Job's template cannot change, so the next upgrade's must replace it", p)
		}
		c := j.Spec.Template.Spec.Containers[0]
		if !slices.Equal(c.Args, []string{"migrate"}) {
			t.Errorf("args %q, want erpsync migrate", c.Args)
		}
		e := c.env("ERPSYNC_MIGRATE_DATABASE_URL")
		if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || *e.ValueFrom.SecretKeyRef != r.owner {
			t.Errorf("ERPSYNC_MIGRATE_DATABASE_URL %+v, want the owner's URL from %+v", e, r.owner)
		}
	})

	// The owner's credentials are in no pod but the migration's, and the
	// others connect as the runtime role.
	t.Run("KeepsTheOwnersSecretFromOtherPods", func(t *testing.T) {
		for _, p := range objs.pods() {
			if p.owner.Kind == "Job" {
				continue
			}
			for _, ref := range p.references() {
				if ref.kind == "Secret" && ref.Name == r.owner.Name {
					t.Errorf("%s reads the owner's Secret %s (%s)", p, ref.Name, ref.from)
				}
			}
			c := p.Spec.Containers[0]
			if e := c.env("ERPSYNC_MIGRATE_DATABASE_URL"); e != nil {
				t.Errorf("%s sets ERPSYNC_MIGRATE_DATABASE_URL", p)
			}
			if e := c.env("ERPSYNC_DATABASE_URL"); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || *e.ValueFrom.SecretKeyRef != r.runtime {
				t.Errorf("%s: ERPSYNC_DATABASE_URL %+v, want the runtime role's from %+v", p, e, r.runtime)
			}
		}
	})

	// With existing Secrets the chart makes none; else it makes both from the
	// values, the owner's as a hook before the migration.
	t.Run("MakesSecretsOnlyWhenNotGivenThem", func(t *testing.T) {
		if !wanted(t, objs, r.madeSecrets, "Secret") {
			return
		}
		runtimeValues, ownerValues := valuesSecrets(t, r.file)
		for ref, values := range map[keyRef]map[string]string{r.runtime: runtimeValues, r.owner: ownerValues} {
			s := objs.find("Secret", ref.Name)
			if s == nil {
				t.Errorf("no Secret %s", ref.Name)
				continue
			}
			got := map[string]string{}
			for k, v := range s.Data {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					t.Fatalf("Secret %s, key %s: %v", ref.Name, k, err)
				}
				got[k] = string(b)
			}
			if !reflect.DeepEqual(got, values) {
				t.Errorf("Secret %s holds keys %q, want the values' %q", ref.Name, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(values)))
			}
		}
		if owner := objs.find("Secret", r.owner.Name); owner != nil {
			if events, _ := owner.hook(t); !slices.Contains(events, "pre-install") || !slices.Contains(events, "pre-upgrade") {
				t.Errorf("the owner's Secret is no pre-install and pre-upgrade hook (%q): the migration would not find it on a first install", events)
			}
		}
	})

	// A key a pod reads from a Secret or ConfigMap the chart makes is there.
	t.Run("ResolvesEveryKeyItReads", func(t *testing.T) {
		for _, p := range objs.pods() {
			for _, ref := range p.references() {
				if o := objs.find(ref.kind, ref.Name); o != nil {
					if _, ok := o.Data[ref.Key]; !ok {
						t.Errorf("%s reads key %s of %s %s (%s), which has no such key", p, ref.Key, ref.kind, ref.Name, ref.from)
					}
				}
			}
		}
	})

	// A hook runs before the release's other objects exist: what it reads is
	// either not the chart's (made out of band) or a hook of its events made
	// before it (a lower weight).
	t.Run("RunsHooksOnlyOnWhatExistsBeforeThem", func(t *testing.T) {
		for _, p := range objs.pods() {
			events, weight := p.owner.hook(t)
			if len(events) == 0 {
				continue
			}
			for _, ref := range p.references() {
				o := objs.find(ref.kind, ref.Name)
				if o == nil {
					continue
				}
				if before, w := o.hook(t); !containsAll(before, events) || w >= weight {
					t.Errorf("%s, a %q hook of weight %d, reads %s %s (%s), which is made after it (hook %q, weight %d)",
						p, events, weight, ref.kind, ref.Name, ref.from, before, w)
				}
			}
		}
	})

	// The Deployment, the Service, the budget and the anti-affinity select the
	// replicas and no pod of the migration or the verification.
	t.Run("SelectsOnlyTheReplicas", func(t *testing.T) {
		d := objs.one(t, "Deployment")
		sel := d.selector()
		if !selects(sel, d.Spec.Template.Metadata.Labels) {
			t.Fatalf("the Deployment's selector %v does not select its pods %v", sel, d.Spec.Template.Metadata.Labels)
		}
		for _, p := range objs.pods() {
			if p.owner.Kind != "Deployment" && selects(sel, p.Metadata.Labels) {
				t.Errorf("the Deployment's selector %v selects the pods of %s", sel, p)
			}
		}
		for _, o := range append(objs.ofKind("Service"), objs.ofKind("PodDisruptionBudget")...) {
			if !reflect.DeepEqual(o.selector(), sel) {
				t.Errorf("%s %s selects %v, want the Deployment's %v", o.Kind, o.Metadata.Name, o.selector(), sel)
			}
		}
		for _, a := range d.Spec.Template.Spec.Affinity.PodAntiAffinity.Preferred {
			if !reflect.DeepEqual(a.Term.LabelSelector.MatchLabels, sel) {
				t.Errorf("anti-affinity selects %v, want the Deployment's %v", a.Term.LabelSelector.MatchLabels, sel)
			}
		}
	})

	// The configuration file is the values' config as written: nothing of the
	// chart's default configuration is merged into a values file's.
	t.Run("WritesTheConfigurationOfTheValues", func(t *testing.T) {
		want := valuesConfig(t, r.file)
		if want == nil {
			want = valuesConfig(t, "values.yaml")
		}
		var got any
		cm := objs.one(t, "ConfigMap")
		if err := yaml.Unmarshal([]byte(cm.Data["erpsync.yaml"]), &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("erpsync.yaml (%v):\n%s\nwant the values' config:\n%v", err, cm.Data["erpsync.yaml"], want)
		}
	})

	// erpsync's own loader accepts the configuration file and environment as
	// each pod sees them, without a warning.
	t.Run("LoadsItsConfigurationAsThePodsSeeIt", func(t *testing.T) {
		for _, p := range objs.pods() {
			if p.owner.Kind == "Job" {
				continue // migrate reads no configuration file
			}
			cfg, err := loadConfig(t, objs, p)
			if err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			if len(cfg.Sources) != r.sources || len(cfg.Warnings) > 0 {
				t.Errorf("%s: %d sources, warnings %q; want %d sources and no warning", p, len(cfg.Sources), cfg.Warnings, r.sources)
			}
		}
	})

	t.Run("SetsOnlyVariablesErpsyncReads", func(t *testing.T) {
		known := readVariables(t)
		for _, p := range objs.pods() {
			for _, c := range p.Spec.Containers {
				for _, e := range c.Env {
					if !known(e.Name) {
						t.Errorf("%s, container %s: erpsync reads no variable %s", p, c.Name, e.Name)
					}
				}
			}
		}
	})

	// One replica is kept through voluntary disruptions; a single replica has
	// no budget, which would block every node drain.
	t.Run("KeepsOneReplicaThroughDrains", func(t *testing.T) {
		pdbs := objs.ofKind("PodDisruptionBudget")
		switch {
		case r.replicas == 1 && len(pdbs) > 0:
			t.Errorf("a PodDisruptionBudget for one replica")
		case r.replicas > 1 && (len(pdbs) != 1 || pdbs[0].Spec.MinAvailable != 1):
			t.Errorf("PodDisruptionBudgets %+v, want one of minAvailable 1", pdbs)
		}
	})

	// The PrometheusRule carries the rule file's groups; the ServiceMonitor
	// scrapes the Service's port at /metrics. Neither unless asked.
	t.Run("MakesTheOperatorsObjectsOnlyWhenAsked", func(t *testing.T) {
		if !wanted(t, objs, r.operator, "PrometheusRule", "ServiceMonitor") {
			return
		}
		var file struct {
			Groups any `yaml:"groups"`
		}
		b, err := os.ReadFile(rulesFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &file); err != nil || file.Groups == nil {
			t.Fatalf("%s: %v", rulesFile, err)
		}
		if rule := objs.one(t, "PrometheusRule"); !reflect.DeepEqual(rule.Spec.Groups, file.Groups) {
			t.Errorf("the PrometheusRule's groups differ from %s's", rulesFile)
		}
		svc, mon := objs.one(t, "Service"), objs.one(t, "ServiceMonitor")
		if !selects(mon.selector(), svc.Metadata.Labels) {
			t.Errorf("the ServiceMonitor selects %v, the Service is labelled %v", mon.selector(), svc.Metadata.Labels)
		}
		if len(mon.Spec.Endpoints) != 1 || mon.Spec.Endpoints[0].Port != "http" || mon.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoints %+v, want port http, path /metrics", mon.Spec.Endpoints)
		}
	})

	t.Run("VerifiesOnlyWhenAsked", func(t *testing.T) {
		if !wanted(t, objs, r.verify, "CronJob") {
			return
		}
		c := objs.one(t, "CronJob").Spec.JobTemplate.Spec.Template.Spec.Containers[0]
		if len(c.Args) == 0 || c.Args[0] != "verify" {
			t.Errorf("args %q, want erpsync verify", c.Args)
		}
	})
}

// wanted says whether objects of the kinds are wanted, and fails the test
// when they are not but are there.
func wanted(t *testing.T, objs objects, want bool, kinds ...string) bool {
	t.Helper()
	for _, k := range kinds {
		if n := len(objs.ofKind(k)); n > 0 && !want {
			t.Errorf("%d objects of kind %s, want none", n, k)
		}
	}
	return want
}

// podView writes the files a pod's projected volumes hold where it
// mounts them, inside a directory of the test's (a Secret's keys hold
// placeholders, with the volume's modes), and returns the pod's first
// container's environment (a Secret's value a placeholder) and the path
// of its --config file there.
func podView(t *testing.T, objs objects, p pod) (env []string, configFile string) {
	t.Helper()
	root := t.TempDir()
	c := p.Spec.Containers[0]
	inPod := func(path string) string { return filepath.Join(root, filepath.FromSlash(path)) }
	var mounts []string
	for _, m := range c.VolumeMounts {
		for _, v := range p.Spec.Volumes {
			if v.Name != m.Name || v.Projected == nil {
				continue
			}
			mounts = append(mounts, m.MountPath)
			mode := 0o644
			if v.Projected.DefaultMode != nil {
				mode = *v.Projected.DefaultMode
			}
			for _, s := range v.Projected.Sources {
				proj, content := s.Secret, func(string) string { return "ci-secret" }
				if s.ConfigMap != nil {
					cm := objs.find("ConfigMap", s.ConfigMap.Name)
					if cm == nil {
						t.Fatalf("%s mounts ConfigMap %s, which the chart does not make", p, s.ConfigMap.Name)
					}
					proj, content = s.ConfigMap, func(key string) string { return cm.Data[key] }
				}
				for _, it := range proj.Items {
					path, m := inPod(m.MountPath+"/"+it.Path), mode
					if it.Mode != nil {
						m = *it.Mode
					}
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, []byte(content(it.Key)), 0o600); err != nil {
						t.Fatal(err)
					}
					if err := os.Chmod(path, os.FileMode(m)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	// The configuration names files by their paths in the pod.
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("%s: args %q name no --config file", p, c.Args)
	}
	configFile = inPod(c.Args[i+1])
	text, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatalf("%s: --config %s is in none of its volumes: %v", p, c.Args[i+1], err)
	}
	for _, m := range mounts {
		text = bytes.ReplaceAll(text, []byte(m+"/"), []byte(inPod(m)+"/"))
	}
	if err := os.Chmod(configFile, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(configFile, text, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			v = "ci-secret"
			if strings.HasSuffix(e.Name, "DATABASE_URL") {
				v = "postgres://erpsync@postgres.invalid:5432/erpsync"
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return env, configFile
}

// loadConfig loads the configuration as a pod's erpsync would, with
// erpsync's own loader and catalog of streams (see podView).
func loadConfig(t *testing.T, objs objects, p pod) (config.Config, error) {
	t.Helper()
	catalog, err := streams.Default()
	if err != nil {
		t.Fatal(err)
	}
	env, file := podView(t, objs, p)
	return config.Load(env, config.Options{ConfigFile: file, NeedERP: true, Streams: cli.StreamSpecs(catalog)})
}

// describe says what a configuration makes erpsync do, one line per
// process setting, source, login and stream, without where each setting
// was written.
func describe(cfg config.Config) []string {
	process := cfg
	process.Sources, process.Warnings = nil, nil
	out := []string{fmt.Sprintf("%+v", process)}
	for _, s := range cfg.Sources {
		for _, l := range s.Logins {
			out = append(out, fmt.Sprintf("source %s: login %s (%s)", s.Name, l.Name(), l.Auth))
		}
		for _, st := range s.Streams {
			out = append(out, fmt.Sprintf("source %s: stream %s on %q, sweeps on %q, drift %s, settings %v",
				s.Name, st.Name, st.Schedule, st.SweepSchedule, st.Drift, st.Settings))
		}
		s.Logins, s.Streams, s.Keys = nil, nil, config.SourceKeys{}
		out = append(out, fmt.Sprintf("%+v", s))
	}
	return out
}

// goRuntimeVariables are read by the Go runtime every Go program carries.
var goRuntimeVariables = []string{"GOMEMLIMIT", "GOGC", "GOMAXPROCS", "GODEBUG"}

// readVariables says which variables erpsync reads: those of the settings
// section of docs/configuration.md, whose table of settings is rendered
// from internal/config's keys (a test there holds it so) and whose other
// table lists the variables read elsewhere (OTEL_* stands for every
// OTEL_ variable), and the Go runtime's.
func readVariables(t *testing.T) func(string) bool {
	t.Helper()
	b, err := os.ReadFile(settingsDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "\n## Settings\n")
	section, _, _ = strings.Cut(section, "\n## ")
	names := slices.Clone(goRuntimeVariables)
	for line := range strings.Lines(section) {
		if cells := strings.Split(line, "|"); strings.HasPrefix(line, "|") && len(cells) > 2 {
			for _, m := range variableName.FindAllStringSubmatch(cells[1], -1) {
				names = append(names, m[1])
			}
		}
	}
	if !slices.Contains(names, "ERPSYNC_DATABASE_URL") || !slices.Contains(names, "OTEL_*") {
		t.Fatalf("%s: the settings name %q, want ERPSYNC_DATABASE_URL and OTEL_* among them", settingsDoc, names)
	}
	return func(name string) bool {
		return slices.ContainsFunc(names, func(n string) bool {
			prefix, wild := strings.CutSuffix(n, "*")
			return n == name || wild && strings.HasPrefix(name, prefix)
		})
	}
}

// variableName is a variable in a cell of a table: `NAME`, or `PREFIX_*`.
var variableName = regexp.MustCompile("`([A-Z][A-Z0-9_]*\\*?)`")

// valuesSecrets returns the values a values file gives the chart's two
// Secrets: the runtime role's and the owner's.
func valuesSecrets(t *testing.T, file string) (runtime, owner map[string]string) {
	t.Helper()
	var v struct {
		Secret struct {
			StringData map[string]string `yaml:"stringData"`
		} `yaml:"secret"`
		Migration struct {
			Secret struct {
				StringData map[string]string `yaml:"stringData"`
			} `yaml:"secret"`
		} `yaml:"migration"`
	}
	b, err := os.ReadFile(filepath.Join(chartDir, file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return v.Secret.StringData, v.Migration.Secret.StringData
}

// valuesConfig returns the config block of a values file of the chart, or
// nil.
func valuesConfig(t *testing.T, file string) any {
	t.Helper()
	var v struct {
		Config any `yaml:"config"`
	}
	b, err := os.ReadFile(filepath.Join(chartDir, file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return v.Config
}

// secretValues returns every secret a values file gives.
func secretValues(t *testing.T, file string) []string {
	t.Helper()
	runtime, owner := valuesSecrets(t, file)
	return slices.Concat(slices.Collect(maps.Values(runtime)), slices.Collect(maps.Values(owner)))
}

// ciFiles returns the chart's ci/ values files, relative to the chart.
func ciFiles() []string {
	var out []string
	for _, r := range renderings {
		out = append(out, r.file)
	}
	return out
}

func isTrue(b *bool) bool { return b != nil && *b }

// containsAll says whether every one of want is in have.
func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
