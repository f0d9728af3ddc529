package config

import (
	"strings"
	"testing"
)

// TestFile is the YAML file's mistakes, each named where it is written.
func TestFile(t *testing.T) {
	t.Run("RefusesEachMistakeNamingItsKey", func(t *testing.T) {
		tests := []struct {
			name string
			yaml string
			opts Options
			want []string
		}{
			{name: "unknown top-level key", yaml: "log_levle: debug\n", want: []string{"log_levle"}},
			{name: "unknown source key", yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    pasword_file: /x\n", want: []string{"pasword_file"}},
			{name: "unknown stream key", yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    streams:\n      invoices:\n        cron: '@hourly'\n", want: []string{"cron"}},
			{name: "not YAML", yaml: "sources: [\n", want: []string{"c.yaml:1: not valid YAML"}},
			{name: "duplicate source names", yaml: "sources:\n  - name: a\n    base_url: https://a.example.com\n  - name: a\n    base_url: https://b.example.com\n", want: []string{"sources[1]", `"a"`, "twice"}},
			{name: "two unnamed sources", yaml: "sources:\n  - base_url: https://a.example.com\n  - base_url: https://b.example.com\n", want: []string{`"default"`, "twice"}},
			{name: "bad stream schedule", yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    streams:\n      invoices:\n        schedule: 'every five minutes'\n", want: []string{"invoices", "every five minutes", "streams.invoices.schedule"}},
			{name: "bad time zone", yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    streams:\n      currencies:\n        schedule: 'CRON_TZ=Mars/Olympus 0 6 * * *'\n", want: []string{"currencies", "Mars/Olympus"}},
			{name: "unknown stream", yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    streams:\n      invoicez: {}\n", opts: Options{Streams: testSpecs[:2]}, want: []string{"sources[0].streams.invoicez", "unknown stream", `did you mean "invoices"?`}},
			{name: "plain http", yaml: "sources:\n  - name: a\n    base_url: http://erp.example.com\n", want: []string{"HTTPS is required", `source "a"`, "sources[0].base_url"}},
			{name: "bad timeout", yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    timeout: soon\n", want: []string{"sources[0].timeout", "soon"}},
			{name: "bad page size", yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    page_size: 20000\n", want: []string{"sources[0].page_size", "20000"}},
			{name: "bad auth", yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    auth: basic\n", want: []string{"sources[0].auth", "basic"}},
			{name: "bad plugin scheme", yaml: "sources:\n  - name: a\n    base_url: https://erp.example.com\n    auth: plugin\n    plugin_scheme: 'Two Words'\n", want: []string{"sources[0].plugin_scheme", "Two Words"}},
			{name: "bad source name", yaml: "sources:\n  - name: 'my source'\n    base_url: https://erp.example.com\n", want: []string{"my source", "name"}},
			{name: "bad messaging prefix", yaml: "sources:\n  - name: a\n    messaging_prefix: chat\n", want: []string{"sources[0].messaging_prefix", "chat"}},
			{name: "bad max response", yaml: "sources:\n  - name: a\n    max_response: huge\n", want: []string{"sources[0].max_response", "huge"}},
			{name: "bad budget", yaml: "sources:\n  - name: a\n    max_concurrent_requests: 0\n", want: []string{"sources[0].max_concurrent_requests", "0 is not between 1 and 100"}},
			{name: "bad login auth", yaml: "sources:\n  - name: a\n    logins:\n      - {username: u, auth: oauth}\n", want: []string{"sources[0].logins[0].auth", "oauth"}},
			{name: "bad retention", yaml: "retention: 12h\n", want: []string{"retention", "less than a day"}},
			{name: "grace beyond the timeout", yaml: "shutdown_timeout: 20s\nshutdown_grace: 15s\n", want: []string{"shutdown_grace: 15s does not fit shutdown_timeout 20s (at most 12s)"}},
			{name: "bad top-level stream", yaml: "streams: [invoices, invoicez]\n", opts: Options{Streams: testSpecs}, want: []string{"c.yaml:1: streams", `"invoicez": unknown stream; did you mean "invoices"?`}},
			{name: "bad shutdown grace in file", yaml: "shutdown_grace: forever\n", want: []string{"shutdown_grace", "forever"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				tt.opts.ConfigFile = writeFile(t, "c.yaml", tt.yaml)
				_, err := Load(nil, tt.opts)
				wantConfigError(t, err, tt.want...)
				// No variable is set: an error that names one blames the
				// user for what they did not write.
				if err != nil && strings.Contains(err.Error(), "ERPSYNC_") {
					t.Errorf("error %q names a variable; the mistake is in the file", err)
				}
			})
		}
	})
}

func TestFileKeys(t *testing.T) {
	load := func(t *testing.T, yaml string) error {
		t.Helper()
		_, err := Load(nil, Options{Streams: testSpecs, ConfigFile: writeFile(t, "c.yaml", yaml)})
		return err
	}

	t.Run("SuggestsTheNearestKeyForATypo", func(t *testing.T) {
		for _, tt := range []struct{ yaml, want string }{
			{"sources:\n  - name: a\n    login:\n      - {username: u}\n", `c.yaml:3: sources[0].login: unknown key; did you mean "logins"?`},
			{"log_levle: debug\n", `c.yaml:1: log_levle: unknown key; did you mean "log_level"?`},
			{"sources:\n  - logins:\n      - {username: u, pasword_file: /x}\n", `c.yaml:3: sources[0].logins[0].pasword_file: unknown key; did you mean "password_file"?`},
			{"sources:\n  - streams:\n      invoices: {schedul: '@hourly'}\n", `sources[0].streams.invoices.schedul: unknown setting; invoices takes schedule, sweep_schedule, window_schedule, window_pages, history, drift; did you mean "schedule"?`},
			{"sources:\n  - streams:\n      invoices: {drfit: stop}\n", `did you mean "drift"?`},
		} {
			err := load(t, tt.yaml)
			wantConfigError(t, err, tt.want)
			// Go's own words for a YAML field are no help to an operator.
			for _, goWords := range []string{"not found in type", "config.", "fileSource"} {
				if err != nil && strings.Contains(err.Error(), goWords) {
					t.Errorf("error %q speaks of Go types (%q)", err, goWords)
				}
			}
		}
	})

	t.Run("ListsTheKeysThereWhenNoneIsNear", func(t *testing.T) {
		err := load(t, "sources:\n  - name: a\n    cron: x\n")
		wantConfigError(t, err, "sources[0].cron: unknown key; a source takes name, base_url", "logins", "password_file", "password_env", "streams")
		err = load(t, "color: blue\n")
		wantConfigError(t, err, "color: unknown key; the top of the file takes database_url", "sources", "schedule", "sweep_schedule")
	})

	t.Run("RefusesAKeyWrittenTwice", func(t *testing.T) {
		err := load(t, "sources:\n  - name: a\n    page_size: 10\n    page_size: 20\n")
		wantConfigError(t, err, "c.yaml:4: sources[0].page_size: written twice (first on line 3)")
	})

	t.Run("RefusesAValueOfTheWrongShape", func(t *testing.T) {
		wantConfigError(t, load(t, "sources:\n  name: a\n"), "c.yaml:2: sources: must be a list")
		wantConfigError(t, load(t, "sources:\n  - page_size: [1, 2]\n"), "sources[0].page_size: must be a single value")
		wantConfigError(t, load(t, "sources:\n  - streams: [invoices]\n"), "sources[0].streams: must be a mapping")
		wantConfigError(t, load(t, "- a\n- b\n"), "c.yaml:1: the file: must be a mapping")
	})

	t.Run("ReadsMergedKeysAndAliases", func(t *testing.T) {
		path := writeFile(t, "c.yaml", `
common: &common
  base_url: https://erp.example.com
  page_size: 200
sources:
  - <<: *common
    name: a
    page_size: 300
  - <<: *common
    name: b
`)
		_, err := Load(nil, Options{Streams: testSpecs, ConfigFile: path})
		wantConfigError(t, err, `common: unknown key`)

		path = writeFile(t, "c.yaml", `
sources:
  - &a
    name: a
    base_url: https://erp.example.com
    page_size: 200
  - <<: *a
    name: b
    page_size: 300
`)
		cfg := mustLoad(t, nil, Options{Streams: testSpecs, ConfigFile: path})
		a, b := cfg.Sources[0], cfg.Sources[1]
		if a.PageSize != 200 || b.Name != "b" || b.BaseURL != "https://erp.example.com" || b.PageSize != 300 {
			t.Errorf("sources = %s %d, %s %s %d; want b to take a's URL and keep its own page size", a.Name, a.PageSize, b.Name, b.BaseURL, b.PageSize)
		}
	})
}

// TestYAMLMistakes: a file that is not valid YAML is refused at the line of its
// mistake, where the YAML library names the line where the block holding it
// starts (line 1 for a key indented wrongly under sources).
func TestYAMLMistakes(t *testing.T) {
	t.Run("AreReportedAtTheLineOfTheMistake", func(t *testing.T) {
		for _, tt := range []struct {
			name, yaml, want string
		}{
			{"a key indented less than its siblings", "sources:\n  - name: a\n  base_url: https://erp.example.com\n    page_size: 3\n",
				`c.yaml:3: not valid YAML: did not find expected '-' indicator (check the indentation`},
			{"a key indented more than its siblings", "log_level: info\nsources:\n  - name: a\n    base_url: https://erp.example.com\n   page_size: 10\n",
				`c.yaml:5: not valid YAML: did not find expected '-' indicator`},
			{"a key under a value", "log_level: info\nhttp_addr: :8080\n  retention: 30d\n",
				`c.yaml:3: not valid YAML: mapping values are not allowed in this context`},
			{"a tab", "log_level: info\nsources:\n  - name: a\n\tbase_url: https://erp.example.com\n",
				`c.yaml:4: not valid YAML: found a tab character that violates indentation`},
			{"an unclosed quote", "log_level: info\nsources:\n  - name: \"a\n    base_url: https://erp.example.com\n",
				`c.yaml:3: not valid YAML: found unexpected end of stream (a quote or bracket opened on this line is not closed)`},
			{"an unclosed bracket", "log_level: info\nstreams: [invoices, currencies\nsources: []\n",
				`c.yaml:2: not valid YAML: did not find expected ',' or ']'`},
			{"a key written twice", "log_level: info\nhttp_addr: :8080\nlog_level: debug\n",
				`c.yaml:3: log_level: written twice (first on line 1)`},
		} {
			t.Run(tt.name, func(t *testing.T) {
				_, err := Load(nil, Options{Streams: testSpecs, ConfigFile: writeFile(t, "c.yaml", tt.yaml)})
				wantConfigError(t, err, tt.want)
				if err != nil && strings.Contains(err.Error(), "yaml: line") {
					t.Errorf("%v: the YAML library's own line, which is the block's", err)
				}
			})
		}
	})
}
