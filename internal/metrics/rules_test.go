package metrics

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"gopkg.in/yaml.v3"

	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/testutil"
)

// The alerting rules shipped for operators, and their copy for the
// Prometheus Operator.
const (
	rulesDir      = "../../deploy/prometheus"
	rulesFile     = "erpsync-rules.yaml"
	rulesTestFile = "erpsync-rules.test.yaml"
	operatorRules = "../../deploy/kubernetes/prometheusrule.yaml"
	// runbooks holds one section per alert, headed "#### Alert: <Name>";
	// runbookPrefix is where GitHub shows it, and the lowercased alert
	// name is that heading's anchor.
	runbooks      = "../../docs/operating.md"
	runbookPrefix = "https://github.com/erpsync/erpsync/blob/main/docs/operating.md#alert-"
)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(rulesDir, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	if len(f.Groups) == 0 {
		t.Fatalf("%s: no rule groups", rulesFile)
	}
	return f
}

// exported builds a registry the way the daemon uses it, with every
// erpsync family touched at least once, and returns the families it
// exports by name, together with those of `erpsync verify` (written to a
// textfile or pushed to a Pushgateway, not served by the daemon).
func exported(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	m := New()
	m.Declare("default", "invoices", []string{"north", "south"}, 5*time.Minute)
	m.DeclareFollow("default", "invoices", []string{"north", "south"}, 30*time.Second)
	m.DeclareWindow("default", "invoices", []string{"north", "south"}, 10*time.Minute)
	m.Budget("default", map[model.RunKind]float64{model.KindFollow: 240, model.KindWindow: 240, model.KindSweep: 100}, 500, 1.5)
	m.RunFinished("default", "invoices", model.RunOutcome{Login: "north", Kind: model.KindWindow, Status: model.StatusSucceeded,
		Elapsed: time.Second, WindowedAt: time.Now()})
	m.FollowMissed("default", "invoices", "north", 1)
	m.DriftCounted("default", "invoices", "date", "unusable", 3)
	m.RunFinished("default", "invoices", model.RunOutcome{Login: "north", Kind: model.KindFollow, Status: model.StatusSucceeded,
		Elapsed: time.Second, FollowedAt: time.Now(), Swept: true})
	m.PageCommitted("default", "invoices", model.RunStats{Pages: 1, Inserted: 2, Updated: 1, Unchanged: 3, Rejected: 1})
	m.RunFinished("default", "invoices", model.RunOutcome{Login: "north", Status: model.StatusSucceeded, Elapsed: time.Second,
		FreshAt: time.Now(), HeldDeletions: 2})
	m.RunFinished("default", "currencies", model.RunOutcome{Login: "north", Status: model.StatusFailed, Elapsed: time.Second})
	erp := m.ERP("default")
	erp.Request("/api/invoices/", "invoices", "window", 200, 10*time.Millisecond)
	erp.Retry("/api/invoices/", "rate_limited")
	erp.RateLimitWait(time.Second)
	erp.InFlight(1)
	erp.BudgetWait(time.Second)
	m.Skipped("default", "invoices", SkipLocked)
	m.Skipped("default", "invoices", SkipBudget)
	m.LockHeldByOther("default", "invoices", time.Minute)
	m.LockHeldByForeign("default", "invoices")
	m.Pruned("sync_runs", 1)
	m.SetReady(true)
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	// One stream compared, one that could not be: every family exported.
	verify, err := Verification([]Verified{
		{Source: "default", Stream: "invoices", Done: true, MismatchedRows: 3, MismatchedGroups: 1},
		{Source: "default", Stream: "currencies"},
	}, time.Now()).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range verify {
		if _, dup := out[f.GetName()]; dup {
			t.Fatalf("%s is exported by both the daemon and erpsync verify", f.GetName())
		}
		out[f.GetName()] = f
	}
	return out
}

// metricName matches the names of the families this registry exports:
// erpsync's own and those of the Go and process collectors. Other names
// in the rules (up, functions, label names) come from Prometheus itself.
var metricName = regexp.MustCompile(`\b(?:erpsync|process|go)_[A-Za-z0-9_:]*`)

// quoted strips label values and other string literals, which may hold
// anything.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")

// ruleMetricNames returns the metric names an expression uses.
func ruleMetricNames(expr string) []string {
	names := metricName.FindAllString(quoted.ReplaceAllString(expr, `""`), -1)
	slices.Sort(names)
	return slices.Compact(names)
}

// TestRules documents the alerting and recording rules shipped for operators
// (deploy/prometheus/erpsync-rules.yaml) and their copy for the Prometheus
// Operator.
func TestRules(t *testing.T) {
	// An alert that refers to a metric erpsync does not export fails (a typo or a
	// renamed metric would otherwise leave the alert silent forever); every alert
	// carries a severity, a summary, a description and its runbook_url.
	t.Run("UseOnlyMetricsErpsyncExportsAndCarryWhatAnAlertNeeds", func(t *testing.T) {
		fams := exported(t)
		rules := readRules(t)
		used := 0
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				name := r.Alert + r.Record
				if strings.TrimSpace(r.Expr) == "" {
					t.Errorf("%s: no expression", name)
				}
				for _, n := range ruleMetricNames(r.Expr) {
					used++
					if _, ok := fams[n]; ok {
						continue
					}
					// A histogram's or summary's series carry suffixes.
					base, ok := "", false
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						if b, cut := strings.CutSuffix(n, suffix); cut {
							base, ok = b, true
						}
					}
					f := fams[base]
					if ok && f != nil && (f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY) &&
						(!strings.HasSuffix(n, "_bucket") || f.GetType() == dto.MetricType_HISTOGRAM) {
						continue
					}
					t.Errorf("%s uses %s, which erpsync does not export", name, n)
				}
				if r.Alert == "" {
					continue
				}
				if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
					t.Errorf("%s: labels.severity is %q", r.Alert, r.Labels["severity"])
				}
				for _, a := range []string{"summary", "description"} {
					if strings.TrimSpace(r.Annotations[a]) == "" {
						t.Errorf("%s: no annotations.%s", r.Alert, a)
					}
				}
				if want := runbookPrefix + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
					t.Errorf("%s: runbook_url is %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
				}
			}
		}
		if used == 0 {
			t.Fatal("no metric names found in the rules")
		}
	})

	// Every alert has a runbook section in docs/operating.md, and no runbook is left
	// for an alert that is gone: the first would make runbook_url land at the top of
	// the page, the second would send an operator to an alert that cannot fire.
	t.Run("HaveARunbookEachAndEveryRunbookAnAlert", func(t *testing.T) {
		b, err := os.ReadFile(runbooks)
		if err != nil {
			t.Fatal(err)
		}
		sections := map[string]bool{} // alert name -> heading seen
		for line := range strings.Lines(string(b)) {
			if name, ok := strings.CutPrefix(strings.TrimSpace(line), "#### Alert: "); ok {
				sections[strings.TrimSpace(name)] = true
			}
		}
		alerts := map[string]bool{}
		for _, g := range readRules(t).Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				alerts[r.Alert] = true
				// The heading's GitHub anchor is "alert-" and the lowercased
				// name only while the name is letters and digits.
				if strings.Trim(r.Alert, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") != "" {
					t.Errorf("%s: the name holds more than letters and digits, so its runbook's anchor is not %q", r.Alert, "alert-"+strings.ToLower(r.Alert))
				}
				if !sections[r.Alert] {
					t.Errorf("%s: no heading \"#### Alert: %s\" in %s, where its runbook_url points", r.Alert, r.Alert, runbooks)
				}
			}
		}
		for name := range sections {
			if !alerts[name] {
				t.Errorf("%s has a runbook (\"#### Alert: %s\") but no alert in %s", runbooks, name, rulesFile)
			}
		}
	})

	// A rule that uses a label name the metrics it refers to do not carry fails, e.g.
	// login on a per-stream metric, or a login label missing from a metric the alerts
	// expect it on.
	t.Run("UseOnlyLabelsTheirMetricsCarry", func(t *testing.T) {
		labels := labelNames(exported(t))
		// The alerts on a stream's data tell the logins apart.
		for _, n := range []string{"erpsync_last_success_timestamp_seconds", "erpsync_last_run_failed", "erpsync_deletions_held"} {
			if !labels[n]["login"] {
				t.Errorf("%s has no login label", n)
			}
		}
		for _, g := range readRules(t).Groups {
			for _, r := range g.Rules {
				for _, p := range ruleLabelProblems(r.Expr, labels) {
					t.Errorf("%s: %s", r.Alert+r.Record, p)
				}
			}
		}
	})

	// The PrometheusRule for the Prometheus Operator carries the rule file's groups.
	t.Run("AreCopiedWholeIntoThePrometheusOperatorsRule", func(t *testing.T) {
		var file struct {
			Groups any `yaml:"groups"`
		}
		var operator struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Groups any `yaml:"groups"`
			} `yaml:"spec"`
		}
		for path, into := range map[string]any{filepath.Join(rulesDir, rulesFile): &file, operatorRules: &operator} {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, into); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
		if operator.Kind != "PrometheusRule" {
			t.Fatalf("%s: kind %q", operatorRules, operator.Kind)
		}
		if file.Groups == nil || !reflect.DeepEqual(file.Groups, operator.Spec.Groups) {
			t.Fatalf("%s: spec.groups differ from %s; copy the groups over", operatorRules, rulesFile)
		}
	})

	t.Run("PassPromtoolsChecksAndTheirUnitTests", func(t *testing.T) {
		promtool := testutil.RequireTool(t, "promtool", "prometheus")
		for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
			cmd := exec.Command(promtool, args...)
			cmd.Dir = rulesDir
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	})
}

// TestRuleMetricNames pins the extraction TestRules relies on.
func TestRuleMetricNames(t *testing.T) {
	t.Run("FindsTheMetricsAnExpressionUses", func(t *testing.T) {
		got := ruleMetricNames(`sum by (source) (rate(erpsync_run_duration_seconds_bucket{stream="erpsync_x"}[5m]))
		/ ignoring (le) time() - process_start_time_seconds and up{job="erpsync"} > erpsync_ready`)
		want := []string{"erpsync_ready", "erpsync_run_duration_seconds_bucket", "process_start_time_seconds"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
}

// targetLabels are the labels Prometheus adds to every series it scrapes
// (a Pushgateway's series carry job and instance too).
var targetLabels = []string{"job", "instance"}

// labelNames returns, by metric name, the label names a family's series
// carry, with "le" on a histogram's _bucket series and the target labels
// on every one.
func labelNames(fams map[string]*dto.MetricFamily) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for name, f := range fams {
		names := map[string]bool{}
		for _, l := range targetLabels {
			names[l] = true
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				names[l.GetName()] = true
			}
		}
		out[name] = names
		if f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY {
			for _, suffix := range []string{"_sum", "_count"} {
				out[name+suffix] = names
			}
		}
		if f.GetType() == dto.MetricType_HISTOGRAM {
			bucket := map[string]bool{"le": true}
			for l := range names {
				bucket[l] = true
			}
			out[name+"_bucket"] = bucket
		}
	}
	return out
}

var (
	// labelList matches the label names of an aggregation (by, without)
	// and of vector matching (on, ignoring, group_left, group_right).
	labelList = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)`)
	// selector matches a metric name and its label matchers.
	selector = regexp.MustCompile(`(` + metricName.String() + `)\s*\{([^{}]*)\}`)
	// matcher matches the label name of one label matcher.
	matcher = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)`)
	// aggregated matches an aggregation of one metric's series, directly
	// or through functions of them: max by (a, b) (max_over_time(m[3d])).
	// Its last group is the closing parentheses that follow.
	aggregated = regexp.MustCompile(`\b(?:by|without)\s*\(([^()]*)\)\s*\(\s*((?:[a-z_]+\s*\(\s*)*)(` +
		metricName.String() + `)\s*(?:\{[^{}]*\})?\s*(?:\[[^\]]*\])?((?:\s*\))*)`)
)

// splitLabels splits a label list ("source, stream") into its names.
func splitLabels(list string) []string {
	var out []string
	for _, l := range strings.Split(list, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// ruleLabelProblems checks the label names an expression uses against
// the labels of the metrics it uses (labels, by metric name; metrics not
// in it, such as up, are not checked): a matcher's label must be one of
// its metric's, an aggregation of one metric's series may only keep or
// drop labels of that metric, and every other label name in by, on,
// ignoring and group_ lists must be one of some metric's of the
// expression. A label a metric lacks matches nothing, or keeps nothing,
// without an error: such an alert stays silent or loses its labels.
func ruleLabelProblems(expr string, labels map[string]map[string]bool) []string {
	expr = quoted.ReplaceAllString(expr, `""`)
	var problems []string
	var all map[string]bool
	for _, n := range ruleMetricNames(expr) {
		for l := range labels[n] {
			if all == nil {
				all = map[string]bool{}
			}
			all[l] = true
		}
	}
	for _, m := range selector.FindAllStringSubmatch(expr, -1) {
		have, ok := labels[m[1]]
		if !ok {
			continue
		}
		for _, mm := range matcher.FindAllStringSubmatch(m[2], -1) {
			if !have[mm[1]] {
				problems = append(problems, m[1]+" has no label "+mm[1])
			}
		}
	}
	for _, m := range aggregated.FindAllStringSubmatch(expr, -1) {
		have, ok := labels[m[3]]
		// The aggregation's argument is the metric alone when the
		// parentheses of its functions and its own close right after it.
		if !ok || strings.Count(m[4], ")") < strings.Count(m[2], "(")+1 {
			continue
		}
		for _, l := range splitLabels(m[1]) {
			if !have[l] {
				problems = append(problems, "aggregation by ("+m[1]+") of "+m[3]+", which has no label "+l)
			}
		}
	}
	if all != nil {
		for _, m := range labelList.FindAllStringSubmatch(expr, -1) {
			for _, l := range splitLabels(m[1]) {
				if !all[l] {
					problems = append(problems, "label "+l+" is on none of the metrics the rule uses")
				}
			}
		}
	}
	slices.Sort(problems)
	return slices.Compact(problems)
}

// TestRuleLabelProblems pins the checks TestRules relies on.
func TestRuleLabelProblems(t *testing.T) {
	t.Run("FindsEveryLabelAMetricOfTheRuleLacks", func(t *testing.T) {
		labels := map[string]map[string]bool{
			"erpsync_a": {"job": true, "instance": true, "source": true, "stream": true, "login": true},
			"erpsync_b": {"job": true, "instance": true, "source": true, "stream": true},
		}
		for expr, want := range map[string][]string{
			`max by (source, stream, login) (erpsync_a) > on (source, stream) group_left () max by (source, stream) (erpsync_b)`: nil,
			`max by (source, stream) (max_over_time(erpsync_b{stream="x"}[5m]))`:                                                 nil,
			`max by (login) (erpsync_b + ignoring (login) group_right () erpsync_a)`:                                             nil,
			`up{job="erpsync"} and on (instance) erpsync_b`:                                                                      nil,
			`max by (source, stream, login) (max_over_time(erpsync_b[5m]))`:                                                      {"aggregation by (source, stream, login) of erpsync_b, which has no label login", "label login is on none of the metrics the rule uses"},
			`erpsync_b{login="north"}`:                        {"erpsync_b has no label login"},
			`erpsync_a > on (source, stream, logn) erpsync_b`: {"label logn is on none of the metrics the rule uses"},
		} {
			if got := ruleLabelProblems(expr, labels); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: got %q, want %q", expr, got, want)
			}
		}
	})
}

// TestMetrics documents the daemon's collectors.
func TestMetrics(t *testing.T) {
	// ErpsyncStreamStale finds the logins of a stream whose data were never complete
	// through erpsync_deletions_held, which Declare must therefore export for every
	// login before any run.
	t.Run("DeclareExportsHeldDeletionsForEveryLoginBeforeAnyRun", func(t *testing.T) {
		m := New()
		m.Declare("default", "invoices", []string{"north", "south"}, 5*time.Minute)
		m.DeclareFollow("default", "invoices", []string{"north", "south"}, 30*time.Second)
		m.FollowMissed("default", "invoices", "north", 1)
		m.DriftCounted("default", "invoices", "date", "unusable", 3)
		m.RunFinished("default", "invoices", model.RunOutcome{Login: "north", Kind: model.KindFollow, Status: model.StatusSucceeded,
			Elapsed: time.Second, FollowedAt: time.Now(), Swept: true})
		fams, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		var logins []string
		for _, f := range fams {
			if f.GetName() != "erpsync_deletions_held" {
				continue
			}
			for _, s := range f.GetMetric() {
				for _, l := range s.GetLabel() {
					if l.GetName() == "login" {
						logins = append(logins, l.GetValue())
					}
				}
			}
		}
		slices.Sort(logins)
		if want := []string{"north", "south"}; !reflect.DeepEqual(logins, want) {
			t.Fatalf("erpsync_deletions_held declared for logins %q, want %q", logins, want)
		}
	})
}
