package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// problem is one configuration problem: the setting as the user wrote it
// and what is wrong with it (msg), and where it is written when that is a
// line of the config file.
type problem struct {
	file string
	line int
	msg  string
}

func (p problem) String() string {
	if p.line > 0 {
		return fmt.Sprintf("%s:%d: %s", p.file, p.line, p.msg)
	}
	return p.msg
}

// configError is every problem of a configuration; the CLI exits 2 on it.
// Its problems are in the order of where they are: the variables' first,
// in the order they were found (the table's), then the file's by line.
type configError struct{ problems []problem }

func (e *configError) Error() string {
	if len(e.problems) == 1 {
		return e.problems[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d configuration problems:", len(e.problems))
	for _, p := range e.problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

// newConfigError is the error of problems (nil for none), sorted.
func newConfigError(problems []problem) error {
	if len(problems) == 0 {
		return nil
	}
	sorted := slices.Clone(problems)
	slices.SortStableFunc(sorted, func(a, b problem) int { return cmp.Compare(a.line, b.line) })
	return &configError{problems: sorted}
}

func errf(format string, args ...any) error {
	return &configError{problems: []problem{{msg: fmt.Sprintf(format, args...)}}}
}

// IsConfigError reports whether err is (or wraps) a configuration problem.
func IsConfigError(err error) bool {
	var ce *configError
	return errors.As(err, &ce)
}

// shutdown derives the phases of a stop from shutdown_timeout, or from
// shutdown_grace when only that is set (cfg.Shutdown holds what the two
// read).
func shutdown(cfg *Config, timeout, grace value) error {
	switch {
	case timeout.set && grace.set:
		g := cfg.Shutdown.Grace
		cfg.Shutdown = shutdownWithin(cfg.Shutdown.Timeout)
		if g > cfg.Shutdown.Grace {
			return fmt.Errorf("%s does not fit %s %s (at most %s)", g, timeout.from, cfg.Shutdown.Timeout, cfg.Shutdown.Grace)
		}
		cfg.Shutdown.Grace = g
	case grace.set:
		cfg.Shutdown = ShutdownWithGrace(cfg.Shutdown.Grace)
	default:
		cfg.Shutdown = shutdownWithin(cfg.Shutdown.Timeout)
	}
	return nil
}

// checkLogin requires, of the commands that read the ERP, a login's
// credentials; unsure says of a key whether its absence is the
// consequence of another problem, and so no problem of its own.
func checkLogin(p place, l Login, unsure func(key) bool) *problem {
	var pr problem
	switch {
	case l.Auth == "plugin" && (l.ClientID == "" && !unsure(clientIDKey) || l.ClientSecret == "" && !unsure(clientSecretKey)):
		pr = p.missing(l.CredentialKeys(), errors.New("plugin auth needs both"))
	case l.Auth == "token" && l.Username == "" && !unsure(usernameKey):
		pr = p.missing(l.Keys.Username, errors.New("not set"))
	case l.Auth == "token" && l.Password == "" && !unsure(passwordKey):
		hint := l.Keys.Password
		switch {
		case hint == passwordKey.env:
			hint += " or " + passwordKey.env + "_FILE"
		case p.vars:
			hint += ", or " + passwordKey.env + " / " + passwordKey.env + "_FILE"
		}
		pr = p.missing(l.Keys.Password, fmt.Errorf("login %s has no password: set %s", l.Username, hint))
	default:
		return nil
	}
	return &pr
}

// checkStreamList keeps the names of a list of streams that the catalog
// knows (specs nil: no catalog to check against), each once, and refuses
// the others, each for its reason.
func checkStreamList(names []string, specs []StreamSpec) (kept []string, refused []error) {
	for _, n := range names {
		if slices.Contains(kept, n) {
			refused = append(refused, fmt.Errorf("stream %q is listed twice", n))
			continue
		}
		if err := checkStreamName(n, specs); err != nil {
			refused = append(refused, fmt.Errorf("%q: %v", n, err))
			continue
		}
		kept = append(kept, n)
	}
	return kept, refused
}

// checkStreamName refuses a stream the catalog does not know, with the
// nearest name or the known ones.
func checkStreamName(name string, specs []StreamSpec) error {
	if specs == nil || slices.ContainsFunc(specs, func(s StreamSpec) bool { return s.Name == name }) {
		return nil
	}
	known := specNames(specs, nil)
	if near := nearest(name, known); near != "" {
		return fmt.Errorf("unknown stream; did you mean %q?", near)
	}
	return fmt.Errorf("unknown stream; known: %s", strings.Join(known, ", "))
}

// unknownKey says a key is not one of known, suggesting the nearest
// (what names the place, "a source").
func unknownKey(key string, known []string, what string) string {
	if near := nearest(key, known); near != "" {
		return fmt.Sprintf("unknown key; did you mean %q?", near)
	}
	return fmt.Sprintf("unknown key; %s takes %s", what, strings.Join(known, ", "))
}

// nearest is the word of words a typo of word most likely meant: at most
// two edits away, and fewer than a third of its letters.
func nearest(word string, words []string) string {
	best, bestD := "", 3
	for _, w := range words {
		if d := editDistance(word, w); d < bestD && d*3 <= len(word)+1 {
			best, bestD = w, d
		}
	}
	return best
}

// editDistance counts the letters inserted, deleted, replaced or swapped
// with their neighbour that turn a into b.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// specOf is the catalog's stream of that name, or a stream with no
// defaults when the catalog has none.
func specOf(specs []StreamSpec, name string) StreamSpec {
	if i := slices.IndexFunc(specs, func(s StreamSpec) bool { return s.Name == name }); i >= 0 {
		return specs[i]
	}
	return StreamSpec{Name: name}
}

// specNames lists the catalog's streams, sorted; keep, if not nil, picks
// them.
func specNames(specs []StreamSpec, keep func(StreamSpec) bool) []string {
	var out []string
	for _, sp := range specs {
		if keep == nil || keep(sp) {
			out = append(out, sp.Name)
		}
	}
	slices.Sort(out)
	return out
}
