package config

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md's table of settings from the keys")

const (
	docsPath   = "../../docs/configuration.md"
	tableStart = "<!-- settings: rendered from internal/config/keys.go; go test ./internal/config -run TestKeys -update -->\n"
	tableEnd   = "<!-- end of settings -->\n"
)

// settingsTable renders the keys as docs/configuration.md lists them.
func settingsTable() string {
	code := func(s string) string { return "`" + s + "`" }
	var b strings.Builder
	b.WriteString("| variable | in the file | meaning | default |\n|---|---|---|---|\n")
	for _, k := range keys {
		variable := ""
		switch {
		case k.secret:
			variable = code(k.env) + " / " + code(k.env+"_FILE")
		case k.fallback != "":
			variable = code(k.env) + " (else " + code(k.fallback) + ")"
		case k.env != "":
			variable = code(k.env)
		}
		path := map[level]string{topLevel: "", sourceLevel: "sources[].", loginLevel: "sources[].", streamLevel: "sources[].streams.<stream>."}[k.level]
		inFile := ""
		switch {
		case k.name == "":
		case k.secret:
			inFile = code(path+k.name+"_file") + " / " + code(path+k.name+"_env")
		case k.top:
			inFile = code(k.name) + "; per stream " + code(path+k.name)
		default:
			inFile = code(path + k.name)
		}
		def := k.defDoc
		if k.def != "" {
			def = code(k.def)
		}
		b.WriteString("| " + variable + " | " + inFile + " | " + k.doc + " | " + def + " |\n")
	}
	return b.String()
}

// TestKeys is the table of settings: every key described, its default one
// its own parser accepts, and docs/configuration.md listing them all.
func TestKeys(t *testing.T) {
	t.Run("DescribesEveryKey", func(t *testing.T) {
		for _, k := range keys {
			if k.doc == "" || k.name == "" && k.env == "" || strings.Contains(k.doc, "|") {
				t.Errorf("key %q (%s): no description, no name, or a | that would break the table", k.name, k.env)
			}
			if k.secret && k.def != "" {
				t.Errorf("secret %s has a default", k.name)
			}
		}
	})

	t.Run("AcceptsEveryDefault", func(t *testing.T) {
		var cfg Config
		d := dest{cfg: &cfg, src: &Source{}, login: &Login{}, stream: &StreamConfig{}}
		for _, k := range keys {
			if k.def != "" && k.set != nil {
				if err := k.set(d, k.def); err != nil {
					t.Errorf("%s: default %q: %v", k.name, k.def, err)
				}
			}
		}
	})

	t.Run("AreAllInTheDocs", func(t *testing.T) {
		b, err := os.ReadFile(docsPath)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(b)
		start, end := strings.Index(doc, tableStart), strings.Index(doc, tableEnd)
		if start < 0 || end < start {
			t.Fatalf("%s has no table between %q and %q", docsPath, tableStart, tableEnd)
		}
		want := settingsTable()
		if got := doc[start+len(tableStart) : end]; got != want {
			if *update {
				if err := os.WriteFile(docsPath, []byte(doc[:start+len(tableStart)]+want+doc[end:]), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			t.Errorf("%s's table of settings is not the keys'; run go test ./internal/config -run TestKeys -update\n got:\n%s\nwant:\n%s", docsPath, got, want)
		}
	})
}
