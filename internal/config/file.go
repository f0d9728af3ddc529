package config

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// fileTree is the YAML file (configs/erpsync.example.yaml shows it) as
// Load reads it: the text of every key, by where it is written. Reading
// it refuses a key that is not a setting of the place it is written in,
// naming the line, the key's path and the nearest key there.
type fileTree struct {
	top     map[string]scalar
	streams []string // the top-level list of streams, when written
	sources []fileSource
}

// scalar is one value as the file writes it.
type scalar struct {
	text string
	line int
}

// fileSource is an entry of sources.
type fileSource struct {
	at     string            // "sources[0]"
	keys   map[string]scalar // its keys, and the keys of its one login
	logins []fileLogin       // its list of logins; nil when it has none
	// streams are the keys of sources[].streams.<stream>, by stream.
	streams map[string]map[string]scalar
}

// fileLogin is an entry of sources[].logins.
type fileLogin struct {
	at   string // "sources[0].logins[1]"
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

// readFile reads the config file at path; specs are the catalog's
// streams, whose names and settings it checks.
func readFile(path string, specs []StreamSpec) (fileTree, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return fileTree{}, errf("config file: %v", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fileTree{}, errf("config file %s: %v", path, err)
	}
	r := fileReader{path: path, specs: specs}
	t := fileTree{top: map[string]scalar{}}
	if len(doc.Content) == 0 {
		return t, nil
	}
	pairs, err := r.pairs(doc.Content[0], "the file")
	if err != nil {
		return fileTree{}, err
	}
	known := fileKeys(topLevel)
	for _, kv := range pairs {
		switch {
		case kv.key == "sources":
			err = r.each(kv.value, "sources", func(item *yaml.Node, at string) error {
				fs, err := r.source(item, at)
				t.sources = append(t.sources, fs)
				return err
			})
		case kv.key == "streams":
			err = r.each(kv.value, "streams", func(item *yaml.Node, at string) error {
				s, err := r.scalar(item, at)
				t.streams = append(t.streams, s.text)
				return err
			})
			if err == nil {
				if err := checkStreamList(t.streams, specs); err != nil {
					return fileTree{}, r.errAt(kv.line, "streams", err.Error())
				}
			}
		case slices.Contains(known, kv.key):
			t.top[kv.key], err = r.scalar(kv.value, kv.key)
		default:
			err = r.errAt(kv.line, kv.key, unknownKey(kv.key, known, "the top of the file"))
		}
		if err != nil {
			return fileTree{}, err
		}
	}
	return t, nil
}

// fileReader walks the file's nodes.
type fileReader struct {
	path  string
	specs []StreamSpec
}

// pair is a key of a mapping and its value.
type pair struct {
	key   string
	line  int
	value *yaml.Node
}

// errAt is a problem at a line of the file, in the key at.
func (r fileReader) errAt(line int, at, msg string) error {
	return errf("config file %s, line %d: %s: %s", r.path, line, at, msg)
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
// after the ones written, which win. A key written twice is refused.
func (r fileReader) pairs(n *yaml.Node, at string) ([]pair, error) {
	n = node(n)
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, r.errAt(n.Line, at, "must be a mapping of keys to values")
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
				ps, err := r.pairs(m, at)
				if err != nil {
					return nil, err
				}
				merged = append(merged, ps...)
			}
			continue
		}
		if j := slices.IndexFunc(own, func(p pair) bool { return p.key == k.Value }); j >= 0 {
			return nil, r.errAt(k.Line, join(at, k.Value), fmt.Sprintf("written twice (first on line %d)", own[j].line))
		}
		own = append(own, pair{key: k.Value, line: k.Line, value: v})
	}
	for _, m := range merged {
		if !slices.ContainsFunc(own, func(p pair) bool { return p.key == m.key }) {
			own = append(own, m)
		}
	}
	return own, nil
}

// join is the path of key in the mapping at.
func join(at, key string) string {
	if at == "the file" {
		return key
	}
	return at + "." + key
}

// each reads a list (null: empty), item by item with its path (at[i]).
func (r fileReader) each(n *yaml.Node, at string, item func(n *yaml.Node, at string) error) error {
	n = node(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return r.errAt(n.Line, at, "must be a list")
	}
	for i, it := range n.Content {
		if err := item(it, fmt.Sprintf("%s[%d]", at, i)); err != nil {
			return err
		}
	}
	return nil
}

// scalar reads a single value (null: empty).
func (r fileReader) scalar(n *yaml.Node, at string) (scalar, error) {
	n = node(n)
	if isNull(n) {
		return scalar{line: n.Line}, nil
	}
	if n.Kind != yaml.ScalarNode {
		return scalar{}, r.errAt(n.Line, at, "must be a single value")
	}
	return scalar{text: n.Value, line: n.Line}, nil
}

// keys reads a mapping of single values, each one of known (what names
// the place in messages).
func (r fileReader) keys(n *yaml.Node, at string, known []string, what string) (map[string]scalar, error) {
	pairs, err := r.pairs(n, at)
	if err != nil {
		return nil, err
	}
	out := map[string]scalar{}
	for _, kv := range pairs {
		if !slices.Contains(known, kv.key) {
			return nil, r.errAt(kv.line, join(at, kv.key), unknownKey(kv.key, known, what))
		}
		if out[kv.key], err = r.scalar(kv.value, join(at, kv.key)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// source reads an entry of sources.
func (r fileReader) source(n *yaml.Node, at string) (fileSource, error) {
	fs := fileSource{at: at, keys: map[string]scalar{}}
	pairs, err := r.pairs(n, at)
	if err != nil {
		return fs, err
	}
	known := fileKeys(sourceLevel, loginLevel)
	for _, kv := range pairs {
		switch {
		case kv.key == "logins":
			err = r.each(kv.value, join(at, "logins"), func(item *yaml.Node, at string) error {
				keys, err := r.keys(item, at, fileKeys(loginLevel), "a login")
				fs.logins = append(fs.logins, fileLogin{at: at, keys: keys})
				return err
			})
		case kv.key == "streams":
			fs.streams, err = r.streams(kv.value, join(at, "streams"))
		case slices.Contains(known, kv.key):
			fs.keys[kv.key], err = r.scalar(kv.value, join(at, kv.key))
		default:
			err = r.errAt(kv.line, join(at, kv.key), unknownKey(kv.key, known, "a source"))
		}
		if err != nil {
			return fs, err
		}
	}
	return fs, nil
}

// streams reads a source's streams: each one the catalog knows, with the
// keys every stream takes and the settings of its own.
func (r fileReader) streams(n *yaml.Node, at string) (map[string]map[string]scalar, error) {
	pairs, err := r.pairs(n, at)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]scalar{}
	for _, kv := range pairs {
		sat := join(at, kv.key)
		if err := checkStreamName(kv.key, r.specs); err != nil {
			return nil, r.errAt(kv.line, sat, err.Error())
		}
		sp := specOf(r.specs, kv.key)
		known := fileKeys(streamLevel)
		for _, s := range sp.Settings {
			known = append(known, s.Key)
		}
		sn, err := r.pairs(kv.value, sat)
		if err != nil {
			return nil, err
		}
		keys := map[string]scalar{}
		for _, s := range sn {
			if !slices.Contains(known, s.key) {
				return nil, r.errAt(s.line, join(sat, s.key), unknownSetting(sp, s.key))
			}
			if keys[s.key], err = r.scalar(s.value, join(sat, s.key)); err != nil {
				return nil, err
			}
		}
		out[kv.key] = keys
	}
	return out, nil
}

// unknownSetting says a stream takes no such key, listing those it takes
// (sweep_schedule only for a stream that follows) and the nearest.
func unknownSetting(sp StreamSpec, key string) string {
	var takes []string
	for _, k := range fileKeys(streamLevel) {
		if k != sweepScheduleKey.name || sp.Follows {
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
