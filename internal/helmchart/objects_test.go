package helmchart

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// object is a Kubernetes object as far as the tests read it; raw is the
// whole of it, for comparing objects.
type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`       // a ConfigMap's, or a Secret's in base64
	StringData map[string]string `yaml:"stringData"` // a Secret's
	Spec       struct {
		Replicas *int `yaml:"replicas"`
		// Selector is a Service's labels, or the matchLabels of another
		// kind's (see selector).
		Selector    map[string]any `yaml:"selector"`
		Template    podTemplate    `yaml:"template"`
		JobTemplate struct {
			Spec struct {
				Template podTemplate `yaml:"template"`
			} `yaml:"spec"`
		} `yaml:"jobTemplate"`
		MinAvailable any `yaml:"minAvailable"`
		Groups       any `yaml:"groups"`
		Endpoints    []struct {
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
	raw map[string]any
}

type podTemplate struct {
	Metadata struct {
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec podSpec `yaml:"spec"`
}

type podSpec struct {
	AutomountServiceAccountToken  *bool `yaml:"automountServiceAccountToken"`
	TerminationGracePeriodSeconds *int  `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot   *bool `yaml:"runAsNonRoot"`
		RunAsUser      *int  `yaml:"runAsUser"`
		SeccompProfile struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	Affinity struct {
		PodAntiAffinity struct {
			Preferred []struct {
				Term struct {
					LabelSelector struct {
						MatchLabels map[string]string `yaml:"matchLabels"`
					} `yaml:"labelSelector"`
				} `yaml:"podAffinityTerm"`
			} `yaml:"preferredDuringSchedulingIgnoredDuringExecution"`
		} `yaml:"podAntiAffinity"`
	} `yaml:"affinity"`
	Containers []container `yaml:"containers"`
	Volumes    []volume    `yaml:"volumes"`
}

type container struct {
	Name           string   `yaml:"name"`
	Args           []string `yaml:"args"`
	Env            []envVar `yaml:"env"`
	StartupProbe   *probe   `yaml:"startupProbe"`
	LivenessProbe  *probe   `yaml:"livenessProbe"`
	ReadinessProbe *probe   `yaml:"readinessProbe"`
	Ports          []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		Privileged               *bool `yaml:"privileged"`
		Capabilities             struct {
			Add  []string `yaml:"add"`
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *keyRef `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

// keyRef is a key of a Secret or ConfigMap.
type keyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type volume struct {
	Name      string `yaml:"name"`
	Projected *struct {
		DefaultMode *int `yaml:"defaultMode"`
		Sources     []struct {
			ConfigMap *projection `yaml:"configMap"`
			Secret    *projection `yaml:"secret"`
		} `yaml:"sources"`
	} `yaml:"projected"`
}

// projection is a ConfigMap's or Secret's keys in a projected volume.
type projection struct {
	Name  string `yaml:"name"`
	Items []struct {
		Key  string `yaml:"key"`
		Path string `yaml:"path"`
		Mode *int   `yaml:"mode"`
	} `yaml:"items"`
}

// objects are a rendering's, or a file's.
type objects []object

// ofKind returns the objects of a kind.
func (objs objects) ofKind(kind string) objects {
	var out objects
	for _, o := range objs {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// find returns the object of a kind and name, or nil.
func (objs objects) find(kind, name string) *object {
	for i := range objs {
		if objs[i].Kind == kind && objs[i].Metadata.Name == name {
			return &objs[i]
		}
	}
	return nil
}

// one returns the one object of a kind, failing the test when there is
// not exactly one.
func (objs objects) one(t *testing.T, kind string) object {
	t.Helper()
	of := objs.ofKind(kind)
	if len(of) != 1 {
		t.Fatalf("%d objects of kind %s, want one", len(of), kind)
	}
	return of[0]
}

// pod is the pod an object makes, with the object.
type pod struct {
	owner *object
	podTemplate
}

func (p pod) String() string { return p.owner.Kind + " " + p.owner.Metadata.Name }

// pods returns the pods the objects make: a Deployment's, a Job's, a
// CronJob's Jobs'.
func (objs objects) pods() []pod {
	var out []pod
	for i := range objs {
		switch o := &objs[i]; o.Kind {
		case "Deployment", "Job":
			out = append(out, pod{o, o.Spec.Template})
		case "CronJob":
			out = append(out, pod{o, o.Spec.JobTemplate.Spec.Template})
		}
	}
	return out
}

// replicas returns the Deployment's pod.
func (objs objects) replicas(t *testing.T) pod {
	t.Helper()
	d := objs.one(t, "Deployment")
	return pod{&d, d.Spec.Template}
}

// selector returns the labels an object selects pods by.
func (o object) selector() map[string]string {
	sel := o.Spec.Selector
	if o.Kind != "Service" {
		sel, _ = sel["matchLabels"].(map[string]any)
	}
	out := map[string]string{}
	for k, v := range sel {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// selects says whether labels match a selector (a non-empty one).
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// hook returns the events of a Helm hook and its weight; no events for an
// object that is not one.
func (o object) hook(t *testing.T) (events []string, weight int) {
	t.Helper()
	a := o.Metadata.Annotations
	if a["helm.sh/hook"] == "" {
		return nil, 0
	}
	events = strings.Split(a["helm.sh/hook"], ",")
	if w := a["helm.sh/hook-weight"]; w != "" {
		var err error
		if weight, err = strconv.Atoi(w); err != nil {
			t.Fatalf("%s %s: helm.sh/hook-weight %q: %v", o.Kind, o.Metadata.Name, w, err)
		}
	}
	return events, weight
}

// reference is a key of a Secret or ConfigMap a pod reads.
type reference struct {
	kind string // Secret or ConfigMap
	keyRef
	from string // where the pod names it
}

// references returns the Secret and ConfigMap keys a pod reads, from its
// containers' environment and its projected volumes.
func (p pod) references() []reference {
	var out []reference
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				out = append(out, reference{"Secret", *e.ValueFrom.SecretKeyRef, "container " + c.Name + ", " + e.Name})
			}
		}
	}
	for _, v := range p.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			for kind, proj := range map[string]*projection{"Secret": s.Secret, "ConfigMap": s.ConfigMap} {
				if proj == nil {
					continue
				}
				for _, it := range proj.Items {
					out = append(out, reference{kind, keyRef{proj.Name, it.Key}, "volume " + v.Name})
				}
			}
		}
	}
	return out
}

// env returns a container's variable of a name, or nil.
func (c container) env(name string) *envVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// without returns a copy of v without the values at the paths given, dot
// separated; "*" stands for every element of a list.
func without(v any, paths ...string) any {
	out := deepCopy(v)
	for _, p := range paths {
		remove(out, strings.Split(p, "."))
	}
	return out
}

func remove(v any, path []string) {
	switch v := v.(type) {
	case map[string]any:
		if len(path) == 1 {
			delete(v, path[0])
		} else if next, ok := v[path[0]]; ok {
			remove(next, path[1:])
		}
	case []any:
		if path[0] == "*" {
			for _, e := range v {
				remove(e, path[1:])
			}
		}
	}
}

// differences says where got and want differ, each as the path and the
// two values.
func differences(path string, got, want any) []string {
	gm, gok := got.(map[string]any)
	wm, wok := want.(map[string]any)
	if gok && wok {
		keys := maps.Clone(gm)
		maps.Copy(keys, wm)
		var out []string
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			out = append(out, differences(path+"."+k, gm[k], wm[k])...)
		}
		return out
	}
	gl, gok := got.([]any)
	wl, wok := want.([]any)
	if gok && wok && len(gl) == len(wl) {
		var out []string
		for i := range gl {
			out = append(out, differences(path+"."+strconv.Itoa(i), gl[i], wl[i])...)
		}
		return out
	}
	if reflect.DeepEqual(got, want) {
		return nil
	}
	return []string{fmt.Sprintf("%s is %v, want %v", path, got, want)}
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

// bytesOf reads a memory quantity as Kubernetes (256Mi, 1G, 64Mi) or Go's
// GOMEMLIMIT (230MiB, 1GiB) write it.
func bytesOf(q string) (int64, error) {
	units := map[string]int64{"": 1, "B": 1, "Ki": 1 << 10, "KiB": 1 << 10, "Mi": 1 << 20, "MiB": 1 << 20,
		"Gi": 1 << 30, "GiB": 1 << 30, "k": 1e3, "M": 1e6, "G": 1e9}
	i := strings.IndexFunc(q, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(q)
	}
	n, err := strconv.ParseInt(q[:i], 10, 64)
	unit, ok := units[q[i:]]
	if err != nil || !ok {
		return 0, fmt.Errorf("%q is not a memory quantity (units: %s)", q, strings.Join(slices.Sorted(maps.Keys(units)), ", "))
	}
	return n * unit, nil
}
