package config

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// fileTree is the YAML file (configs/erpsync.example.yaml shows it) as
// Load reads it: the text of every key, by where it is written. Reading
// it finds every key that is not a setting of the place it is written in,
// naming the line, the key's path and the nearest key there, and goes on
// without that key.
type fileTree struct {
	path    string
	top     map[string]scalar
	streams []string // the top-level list of streams, when written
	sources []fileSource
	// problems are the mistakes found in the file's keys and shapes.
	problems []problem
	// meant are, by the path of a place, the keys its unknown keys were
	// probably meant to be: a check that such a key is missing would
	// only repeat the mistake.
	meant map[string][]string
	// secrets are the keys whose value written in the file is a secret
	// (a database URL's password), where they are.
	secrets []written
}

// written is a key where the file writes it.
type written struct {
	path string
	line int
}

// scalar is one value as the file writes it.
type scalar struct {
	text string
	line int
}

// fileSource is an entry of sources.
type fileSource struct {
	at     string            // "sources[0]"
	line   int               // where the entry starts
	keys   map[string]scalar // its keys, and the keys of its one login
	logins []fileLogin       // its list of logins; nil when it has none
	// streams are the keys of sources[].streams.<stream>, by stream.
	streams map[string]map[string]scalar
}

// fileLogin is an entry of sources[].logins.
type fileLogin struct {
	at   string // "sources[0].logins[1]"
	line int
	keys map[string]scalar
}

// written lists the keys of names the source writes.
func (fs fileSource) written(names []string) []string {
	var out []string
	for _, n := range names {
		if strings.TrimSpace(fs.keys[n].text) != "" {
			out = append(out, n)
		}
	}
	return out
}

// streamNames are the streams the source writes, sorted.
func (fs fileSource) streamNames() []string {
	var out []string
	for n := range fs.streams {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// variables are the variables the file names as holding a secret
// (password_env), which erpsync therefore reads.
func (t fileTree) variables() []string {
	var out []string
	add := func(keys map[string]scalar) {
		for name, v := range keys {
			if strings.HasSuffix(name, "_env") && strings.TrimSpace(v.text) != "" {
				out = append(out, strings.TrimSpace(v.text))
			}
		}
	}
	for _, fs := range t.sources {
		add(fs.keys)
		for _, fl := range fs.logins {
			add(fl.keys)
		}
	}
	return out
}

// readFile reads the config file at path; specs are the catalog's
// streams, whose names and settings it checks. Its error is a file it
// cannot read or that is not YAML: the mistakes in its keys are the
// tree's problems.
func readFile(path string, specs []StreamSpec) (fileTree, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return fileTree{}, errf("config file: %v", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fileTree{}, &configError{problems: []problem{yamlProblem(path, b, err)}}
	}
	r := &fileReader{path: path, specs: specs, meant: map[string][]string{}}
	t := fileTree{path: path, top: map[string]scalar{}}
	if len(doc.Content) > 0 {
		r.top(&t, doc.Content[0])
	}
	t.problems, t.meant, t.secrets = r.problems, r.meant, r.secrets
	return t, nil
}

// top reads the top of the file into t.
func (r *fileReader) top(t *fileTree, n *yaml.Node) {
	known := fileKeys(topLevel)
	for _, kv := range r.pairs(n, "the file") {
		switch {
		case kv.key == "sources":
			r.each(kv.value, "sources", func(item *yaml.Node, at string) {
				t.sources = append(t.sources, r.source(item, at))
			})
		case kv.key == "streams":
			var names []string
			if !r.each(kv.value, "streams", func(item *yaml.Node, at string) {
				if s, ok := r.scalar(item, at); ok {
					names = append(names, s.text)
				}
			}) {
				continue
			}
			kept, refused := checkStreamList(names, r.specs)
			for _, err := range refused {
				r.report(kv.line, "streams", err.Error())
			}
			t.streams = kept
		case slices.Contains(known, kv.key):
			if s, ok := r.scalar(kv.value, kv.key); ok {
				t.top[kv.key] = s
				r.inline(topLevel, kv.key, kv.key, s)
			}
		default:
			r.unknown(kv, "the file", known, "the top of the file")
		}
	}
}

// yamlProblem is the YAML library's error at the line of the problem. The
// library names the line where the block holding the problem starts (for
// a key indented wrongly under sources, the line of sources:; in a
// top-level mapping, line 1), so the line is found again: the first at
// which the text up to it fails as the whole does. A truncated text is
// still YAML unless something is left open, so that is the line where the
// problem is, or where what was left open (a quote) starts.
func yamlProblem(path string, b []byte, err error) problem {
	line, msg := 0, err.Error()
	if m := yamlErrorPattern.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	// Each try parses the text up to a line: bounded, for a config file is
	// a few hundred lines and anything far larger is no config file.
	lines := bytes.SplitAfter(b, []byte("\n"))
	for n, end := 1, 0; n <= len(lines) && n <= maxLinesSearched; n++ {
		end += len(lines[n-1])
		var doc yaml.Node
		if err := yaml.Unmarshal(b[:end], &doc); err != nil {
			if m := yamlErrorPattern.FindStringSubmatch(err.Error()); m != nil && m[2] == msg {
				line = n
				break
			}
		}
	}
	if strings.Contains(msg, "did not find expected key") || strings.Contains(msg, "did not find expected '-'") ||
		strings.Contains(msg, "mapping values are not allowed") {
		msg += " (check the indentation of this line against the lines above)"
	}
	if strings.Contains(msg, "unexpected end of stream") {
		msg += " (a quote or bracket opened on this line is not closed)"
	}
	return problem{file: path, line: line, msg: "not valid YAML: " + msg}
}

// maxLinesSearched bounds the search for a YAML mistake's line.
const maxLinesSearched = 5000

// yamlErrorPattern reads the YAML library's error: its line (if any) and
// what is wrong.
var yamlErrorPattern = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// fileReader walks the file's nodes, noting every problem and going on.
type fileReader struct {
	path     string
	specs    []StreamSpec
	problems []problem
	meant    map[string][]string
	secrets  []written
}

// pair is a key of a mapping and its value.
type pair struct {
	key   string
	line  int
	value *yaml.Node
}

// report is a problem at a line of the file, in the key at.
func (r *fileReader) report(line int, at, msg string) {
	r.problems = append(r.problems, problem{file: r.path, line: line, msg: at + ": " + msg})
}

// unknown reports a key that is not one of known (in the mapping at, what
// names the place), noting the key it was probably meant to be. A secret
// written in the file itself, which it never holds, is one of the
// file's secrets.
func (r *fileReader) unknown(kv pair, at string, known []string, what string) {
	if k, ok := secretNamed(kv.key); ok && slices.Contains(known, k.name+"_file") {
		r.meant[at] = append(r.meant[at], k.name+"_file")
		r.secrets = append(r.secrets, written{path: join(at, kv.key), line: kv.line})
		r.report(kv.line, join(at, kv.key), fmt.Sprintf("a secret is never written in the file itself: give %[1]s_file (a file holding it) or %[1]s_env (a variable holding it)", k.name))
		return
	}
	if near := nearest(kv.key, known); near != "" {
		r.meant[at] = append(r.meant[at], near)
	}
	r.report(kv.line, join(at, kv.key), unknownKey(kv.key, known, what))
}

// inline notes a key of the level, written at path, whose value is a
// secret (a database URL with its password).
func (r *fileReader) inline(l level, name, path string, s scalar) {
	if k, ok := keyAt(l, name); ok && k.exposes != nil && k.exposes(s.text) {
		r.secrets = append(r.secrets, written{path: path, line: s.line})
	}
}

// node follows an alias to what it names.
func node(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// pairs lists a mapping's keys (at is its path), those merged in with <<
// after the ones written, which win. A key written twice is reported and
// read once; a node that is no mapping is reported and reads as empty.
func (r *fileReader) pairs(n *yaml.Node, at string) []pair {
	n = node(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		r.report(n.Line, at, "must be a mapping of keys to values")
		return nil
	}
	var own, merged []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" {
			from := []*yaml.Node{node(v)}
			if from[0].Kind == yaml.SequenceNode {
				from = from[0].Content
			}
			for _, m := range from {
				merged = append(merged, r.pairs(m, at)...)
			}
			continue
		}
		if j := slices.IndexFunc(own, func(p pair) bool { return p.key == k.Value }); j >= 0 {
			r.report(k.Line, join(at, k.Value), fmt.Sprintf("written twice (first on line %d)", own[j].line))
			continue
		}
		own = append(own, pair{key: k.Value, line: k.Line, value: v})
	}
	for _, m := range merged {
		if !slices.ContainsFunc(own, func(p pair) bool { return p.key == m.key }) {
			own = append(own, m)
		}
	}
	return own
}

// join is the path of key in the mapping at.
func join(at, key string) string {
	if at == "the file" {
		return key
	}
	return at + "." + key
}

// each reads a list (null: empty), item by item with its path (at[i]);
// false when it is no list.
func (r *fileReader) each(n *yaml.Node, at string, item func(n *yaml.Node, at string)) bool {
	n = node(n)
	if isNull(n) {
		return true
	}
	if n.Kind != yaml.SequenceNode {
		r.report(n.Line, at, "must be a list")
		return false
	}
	for i, it := range n.Content {
		item(it, fmt.Sprintf("%s[%d]", at, i))
	}
	return true
}

// scalar reads a single value (null: empty); false when it is not one.
func (r *fileReader) scalar(n *yaml.Node, at string) (scalar, bool) {
	n = node(n)
	if isNull(n) {
		return scalar{line: n.Line}, true
	}
	if n.Kind != yaml.ScalarNode {
		r.report(n.Line, at, "must be a single value")
		return scalar{}, false
	}
	return scalar{text: n.Value, line: n.Line}, true
}

// keys reads a mapping of single values at level, each one of known
// (what names the place in messages).
func (r *fileReader) keys(n *yaml.Node, at string, l level, known []string, what string) map[string]scalar {
	out := map[string]scalar{}
	for _, kv := range r.pairs(n, at) {
		if !slices.Contains(known, kv.key) {
			r.unknown(kv, at, known, what)
			continue
		}
		if s, ok := r.scalar(kv.value, join(at, kv.key)); ok {
			out[kv.key] = s
			r.inline(l, kv.key, join(at, kv.key), s)
		}
	}
	return out
}

// source reads an entry of sources.
func (r *fileReader) source(n *yaml.Node, at string) fileSource {
	fs := fileSource{at: at, line: node(n).Line, keys: map[string]scalar{}}
	known := fileKeys(sourceLevel, loginLevel)
	for _, kv := range r.pairs(n, at) {
		switch {
		case kv.key == "logins":
			r.each(kv.value, join(at, "logins"), func(item *yaml.Node, at string) {
				keys := r.keys(item, at, loginLevel, fileKeys(loginLevel), "a login")
				fs.logins = append(fs.logins, fileLogin{at: at, line: node(item).Line, keys: keys})
			})
		case kv.key == "streams":
			fs.streams = r.streams(kv.value, join(at, "streams"))
		case slices.Contains(known, kv.key):
			if s, ok := r.scalar(kv.value, join(at, kv.key)); ok {
				fs.keys[kv.key] = s
				r.inline(sourceLevel, kv.key, join(at, kv.key), s)
			}
		default:
			r.unknown(kv, at, known, "a source")
		}
	}
	return fs
}

// streams reads a source's streams: each one the catalog knows, with the
// keys every stream takes and the settings of its own.
func (r *fileReader) streams(n *yaml.Node, at string) map[string]map[string]scalar {
	out := map[string]map[string]scalar{}
	for _, kv := range r.pairs(n, at) {
		sat := join(at, kv.key)
		if err := checkStreamName(kv.key, r.specs); err != nil {
			r.report(kv.line, sat, err.Error())
			continue
		}
		sp := specOf(r.specs, kv.key)
		known := fileKeys(streamLevel)
		for _, s := range sp.Settings {
			known = append(known, s.Key)
		}
		keys := map[string]scalar{}
		for _, s := range r.pairs(kv.value, sat) {
			if !slices.Contains(known, s.key) {
				r.report(s.line, join(sat, s.key), unknownSetting(sp, s.key))
				continue
			}
			if v, ok := r.scalar(s.value, join(sat, s.key)); ok {
				keys[s.key] = v
			}
		}
		out[kv.key] = keys
	}
	return out
}

// unknownSetting says a stream takes no such key, listing those it takes
// (those of a stream that follows only for one) and the nearest.
func unknownSetting(sp StreamSpec, key string) string {
	var takes []string
	for _, k := range fileKeys(streamLevel) {
		if sk, _ := keyAt(streamLevel, k); !sk.follows || sp.Follows {
			takes = append(takes, k)
		}
	}
	for _, s := range sp.Settings {
		takes = append(takes, s.Key)
	}
	msg := "unknown setting; " + sp.Name + " takes " + strings.Join(takes, ", ")
	if near := nearest(key, takes); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return msg
}
