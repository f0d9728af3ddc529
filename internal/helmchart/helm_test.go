// Package helmchart tests the Helm chart deploy/helm/erpsync with the real
// helm: it lints the chart, renders it with each values file of its ci/
// directory, and checks the objects as deploy/kubernetes/, whose objects
// the chart makes, is checked.
package helmchart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

const (
	chartDir = "../../deploy/helm/erpsync"
	// helmModule and helmVersion are the helm the tests run, built from
	// source through the Go module proxy: a machine with Go needs nothing
	// else, and every machine runs the same helm.
	helmModule  = "helm.sh/helm/v3/cmd/helm"
	helmVersion = "v3.22.0"
	// kubeVersion is the oldest Kubernetes the chart supports (its Chart.yaml's
	// kubeVersion). A helm built with go install would otherwise render for
	// Kubernetes 1.20, which the release builds' link flags replace.
	kubeVersion = "1.27.0"
	// release and namespace are the names the chart is rendered with:
	// release "erpsync" names the objects as deploy/kubernetes/ does.
	release   = "erpsync"
	namespace = "erpsync"
)

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBinary returns the pinned helm, built into the user's cache on first
// use and reused after. When it cannot be built the test is skipped, but
// fails in CI (CI set): a chart test that skips there proves nothing.
func helmBinary(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() { helmPath, helmErr = installHelm() })
	if helmErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("helm %s is needed, and CI is set: %v", helmVersion, helmErr)
		}
		t.Skipf("helm %s could not be installed (set CI to make this a failure): %v", helmVersion, helmErr)
	}
	return helmPath
}

// installHelm builds helm with `go install` into a directory of its version
// under the user's cache, unless it is there already. It builds into a
// temporary directory beside it and renames, so that two test runs at once
// never see half a binary.
func installHelm() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "erpsync", "helm-"+helmVersion)
	bin := filepath.Join(dir, "helm")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", helmModule+"@"+helmVersion)
	// GOFLAGS of the caller's (-count, -run) are not build flags.
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %v\n%s", helmModule, helmVersion, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, "helm"), bin); err != nil {
		return "", err
	}
	return bin, nil
}

// runHelm runs helm with args and returns its standard output, and its
// standard error in the error when it fails.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helmBinary(t), args...)
	// No kubeconfig, no repositories of the user's: lint and template need
	// no cluster, and must not depend on what this machine has.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(home, "kubeconfig"), "HELM_CONFIG_HOME="+home,
		"HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.String(), nil
}

// template renders the chart at dir with the values files and flags given.
func template(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	return runHelm(t, append([]string{"template", release, dir, "--namespace", namespace, "--kube-version", kubeVersion}, args...)...)
}

// render renders the chart with a values file of its ci/ directory (and
// more flags) and returns the objects, failing the test when helm fails.
func render(t *testing.T, valuesFile string, args ...string) objects {
	t.Helper()
	out, err := template(t, chartDir, append([]string{"--values", filepath.Join(chartDir, valuesFile)}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return parseObjects(t, valuesFile, out)
}

// parseObjects reads the YAML documents of a rendering or of a file.
func parseObjects(t *testing.T, from, text string) objects {
	t.Helper()
	var out objects
	for doc := range yamlDocuments(t, from, text) {
		var o object
		if err := doc.Decode(&o); err != nil {
			t.Fatalf("%s: %v", from, err)
		}
		if err := doc.Decode(&o.raw); err != nil {
			t.Fatalf("%s: %v", from, err)
		}
		out = append(out, o)
	}
	return out
}

// yamlDocuments yields the non-empty documents of text.
func yamlDocuments(t *testing.T, from, text string) func(func(*yaml.Node) bool) {
	return func(yield func(*yaml.Node) bool) {
		dec := yaml.NewDecoder(strings.NewReader(text))
		for {
			var doc yaml.Node
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", from, err)
			}
			if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
				continue // a document of comments only
			}
			if !yield(&doc) {
				return
			}
		}
	}
}

// readObjects reads the objects of a file of the repository.
func readObjects(t *testing.T, path string) objects {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseObjects(t, path, string(b))
}

// copyChart copies the chart into a new directory of the test's and
// returns it, for a test that adds a template of its own.
func copyChart(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "erpsync")
	err := filepath.WalkDir(chartDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(chartDir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
