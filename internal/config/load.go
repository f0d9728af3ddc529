package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// configVariable names the config file, as --config does.
const configVariable = "ERPSYNC_CONFIG"

// Load reads the configuration from environ (os.Environ() form) and the
// optional YAML file. Tests pass their own environ.
//
// Its error lists every problem found, each naming the setting as the
// user wrote it (with the file's line where it is written there); a
// problem that follows from another (a password missing where the key
// that would give it is misspelt) is left out. With an error, the
// Config holds only what reporting it needs: the log settings and the
// warnings.
func Load(environ []string, opts Options) (Config, error) {
	l := &loader{env: envMap(environ), specs: opts.Streams, needERP: opts.NeedERP}
	if path := cmp.Or(opts.ConfigFile, l.env[configVariable]); path != "" {
		var err error
		if l.file, err = readFile(path, opts.Streams); err != nil {
			return Config{}, err
		}
	}
	cfg := l.load()
	if err := newConfigError(l.problems); err != nil {
		return Config{LogFormat: cfg.LogFormat, LogLevel: cfg.LogLevel, Warnings: cfg.Warnings}, err
	}
	return cfg, nil
}

// RequireDatabase is the check every command that touches Postgres makes.
func (c Config) RequireDatabase() error {
	if c.DatabaseURL == "" {
		return errf("no database: set ERPSYNC_DATABASE_URL (or DATABASE_URL, or database_url in the config file)")
	}
	return nil
}

// loader builds a Config from the variables and the file.
type loader struct {
	env      environment
	file     fileTree
	specs    []StreamSpec
	needERP  bool
	warnings []string
	problems []problem
	// sourcesUnread: a source could not be made of what was written, so
	// that no source at all is no problem of its own.
	sourcesUnread bool
}

// report notes a problem once: one in a setting that several places
// share is met at each.
func (l *loader) report(p problem) {
	if p.line > 0 {
		p.file = l.file.path
	}
	if !slices.Contains(l.problems, p) {
		l.problems = append(l.problems, p)
	}
}

// warn notes a warning once.
func (l *loader) warn(w string) {
	if !slices.Contains(l.warnings, w) {
		l.warnings = append(l.warnings, w)
	}
}

// value is a setting's text and where it came from.
type value struct {
	text string
	// from is the setting as the user wrote it, a variable or a path in
	// the file; for a default, where the user would write it.
	from string
	line int  // its line in the file, when written there
	set  bool // written by the user; else the default
	here bool // written in the file at the place itself
	// shared: a setting of many places (a variable or a top-level key
	// that every stream takes), checked once where it is written.
	shared bool
}

// place is where keys are read: the top of the file, a source, a login or
// a stream. It decides, for every key, which of the variable, the file
// and the default gives the value, and so what an error names.
type place struct {
	at   string            // its path in the file ("sources[0]"); "" at the top
	line int               // where the file writes it
	file map[string]scalar // the keys the file writes there
	env  environment
	// vars: the variables of the place's level apply to it. At a source
	// or a login, only the source the variables describe has them.
	vars   bool
	top    map[string]scalar // a stream: the keys at the top of the file
	inFile bool              // the place is in the file, not only in variables
	source string            // its source's name, for messages
	stream string            // its stream's name, for messages
	// meant are the keys the place's unknown keys were probably meant to be.
	meant []string
}

// path is a key's path at the place, as the file writes it.
func (p place) path(name string) string {
	if p.at == "" {
		return name
	}
	return p.at + "." + name
}

// value resolves a key at the place: the variable, then the file, then
// the default. A stream's own key comes before the variable, which is for
// the streams that set none, and the top of the file after it; a
// variable that lists streams wins over the file.
func (p place) value(k key) value {
	env, inEnv := p.fromEnv(k)
	own, inFile := fromFile(k, p.file, p.path(k.name))
	own.here = inFile
	switch {
	case inEnv && k.envNames:
		on := !strings.EqualFold(env.text, "none") && slices.Contains(splitList(env.text), p.stream)
		return value{text: strconv.FormatBool(on), from: env.from, set: true, shared: true}
	case inFile && k.level == streamLevel:
		return own
	case inEnv:
		env.shared = k.level == streamLevel
		return env
	case inFile:
		return own
	}
	if top, ok := fromFile(k, p.top, k.name); ok && k.top {
		top.shared = true
		return top
	}
	from := k.env
	if p.inFile || from == "" {
		from = p.path(k.name)
	}
	return value{text: k.def, from: from}
}

// fromEnv is the key's variable, where the variables apply.
func (p place) fromEnv(k key) (value, bool) {
	if !p.vars {
		return value{}, false
	}
	for _, name := range []string{k.env, k.fallback} {
		if v := p.env.get(name); name != "" && v != "" {
			return value{text: v, from: name, set: true}, true
		}
	}
	return value{}, false
}

// fromFile is the key as m (the keys of a place of the file) writes it;
// from is its path.
func fromFile(k key, m map[string]scalar, from string) (value, bool) {
	s := m[k.name]
	v := strings.TrimSpace(s.text)
	if v == "" {
		return value{}, false
	}
	return value{text: v, from: from, line: s.line, set: true}, true
}

// unsure: whether k is set cannot be told, because its value was refused
// (failed names the keys refused at the place) or an unknown key there
// was probably meant to be it. A check that k is missing would only
// repeat that problem.
func (p place) unsure(k key, failed map[string]bool) bool {
	forms := []string{k.name}
	if k.secret {
		forms = []string{k.name + "_file", k.name + "_env"}
	}
	return failed[k.name] || slices.ContainsFunc(forms, func(f string) bool { return slices.Contains(p.meant, f) })
}

// apply resolves a key at p and stores its value; false when the value is
// refused, which is reported (a shared setting's mistake once: p.where
// names it alone, the same at every place that takes it).
func (l *loader) apply(p place, d dest, k key) (value, bool) {
	v := p.value(k)
	if !v.set && v.text == "" {
		return v, true
	}
	if err := k.set(d, v.text); err != nil {
		l.report(p.fail(v, err))
		return v, false
	}
	return v, true
}

// applyAll applies the keys of a level (but its secrets, which secret
// reads): what each resolved to by name, and the names of those refused.
func (l *loader) applyAll(p place, d dest, lv level) (set map[string]value, failed map[string]bool) {
	set, failed = map[string]value{}, map[string]bool{}
	for _, k := range keys {
		if k.level != lv || k.set == nil || k.secret {
			continue
		}
		v, ok := l.apply(p, d, k)
		set[k.name] = v
		if !ok {
			failed[k.name] = true
		}
	}
	return set, failed
}

// checkShared checks, once, the settings every stream takes from one
// place: the stream keys' variables and top-level keys. An error in
// sweep_schedule at the top of the file is the top-level key's, not the
// first stream's that reads it.
func (l *loader) checkShared(top place) {
	for _, k := range keys {
		if k.level != streamLevel || k.set == nil {
			continue
		}
		scratch := dest{stream: &StreamConfig{}}
		if v := l.env.get(k.env); k.env != "" && !k.envNames && v != "" {
			if err := k.set(scratch, v); err != nil {
				l.report(top.fail(value{from: k.env}, err))
			}
		}
		if v, ok := fromFile(k, l.file.top, k.name); ok && k.top {
			if err := k.set(scratch, v.text); err != nil {
				l.report(top.fail(v, err))
			}
		}
	}
}

// where says where a setting is for a message: the setting as the user
// wrote it, after the source (and the stream, when the setting does not
// name it) it applies to; a shared setting alone.
func (p place) where(v value) string {
	if v.shared {
		return v.from
	}
	var at []string
	if p.source != "" {
		at = append(at, fmt.Sprintf("source %q", p.source))
	}
	if p.stream != "" && !(p.inFile && strings.HasPrefix(v.from, p.at+".")) {
		at = append(at, "stream "+p.stream)
	}
	if len(at) == 0 {
		return v.from
	}
	return strings.Join(at, ", ") + ": " + v.from
}

// fail is a configuration problem in the setting v.
func (p place) fail(v value, err error) problem {
	return problem{line: v.line, msg: fmt.Sprintf("%s: %v", p.where(v), err)}
}

// missing is a problem of a setting that is not set at the place: it is
// where the place is written, if in the file.
func (p place) missing(from string, err error) problem {
	return p.fail(value{from: from, line: p.line}, err)
}

func (l *loader) load() Config {
	l.warnUnread()
	l.warnExposed()
	l.problems = append(l.problems, l.file.problems...)
	var cfg Config
	top := place{file: l.file.top, env: l.env, vars: true, inFile: true}
	set, failed := l.applyAll(top, dest{cfg: &cfg}, topLevel)
	timeout, grace := set["shutdown_timeout"], set["shutdown_grace"]
	if !failed["shutdown_timeout"] && !failed["shutdown_grace"] {
		if err := shutdown(&cfg, timeout, grace); err != nil {
			l.report(top.fail(grace, err))
		}
	}
	l.checkShared(top)
	l.checkStreamVariables()
	cfg.Sources = l.sources(l.enabledStreams())
	if l.needERP && len(cfg.Sources) == 0 && !l.sourcesUnread {
		l.report(problem{msg: fmt.Sprintf("no ERP source: set %s or list sources in the config file", baseURLKey.env)})
	}
	cfg.Warnings = l.warnings
	return cfg
}

// enabledStreams are the streams every source enables, when
// ERPSYNC_STREAMS or the top of the file names them.
func (l *loader) enabledStreams() []string {
	if v := l.env.get(streamsEnv); v != "" {
		names, refused := checkStreamList(splitList(v), l.specs)
		for _, err := range refused {
			l.report(problem{msg: fmt.Sprintf("%s: %v", streamsEnv, err)})
		}
		return names
	}
	return l.file.streams
}

// checkStreamVariables refuses a stream that a variable listing streams
// (ERPSYNC_HISTORY) names and the catalog does not know: a misspelt name
// would otherwise go unheard.
func (l *loader) checkStreamVariables() {
	for _, k := range keys {
		v := l.env.get(k.env)
		if !k.envNames || v == "" || strings.EqualFold(strings.TrimSpace(v), "none") {
			continue
		}
		_, refused := checkStreamList(splitList(v), l.specs)
		for _, err := range refused {
			l.report(problem{msg: fmt.Sprintf("%s: %v", k.env, err)})
		}
	}
}

// sources builds the file's sources, and the one the variables describe
// when it is not one of them.
func (l *loader) sources(enabled []string) []Source {
	var names []string
	for i, fs := range l.file.sources {
		name := cmp.Or(strings.TrimSpace(fs.keys[nameKey.name].text), nameKey.def)
		if slices.Contains(names, name) {
			l.report(problem{line: cmp.Or(fs.keys[nameKey.name].line, fs.line), msg: fmt.Sprintf("sources[%d]: source name %q is used twice", i, name)})
		}
		names = append(names, name)
	}
	envSource, extra, err := l.env.describes(names)
	if err != nil {
		l.report(problem{msg: err.Error()})
		l.sourcesUnread = true
	}
	var out []Source
	for i, fs := range l.file.sources {
		out = append(out, l.source(place{at: fs.at, line: fs.line, file: fs.keys, env: l.env, vars: names[i] == envSource, inFile: true,
			meant: l.file.meant[fs.at]}, fs, enabled))
	}
	if extra {
		out = append(out, l.source(place{env: l.env, vars: true}, fileSource{}, enabled))
	}
	return out
}

// source builds one source at p (in the file as fs, or of the variables
// alone).
func (l *loader) source(p place, fs fileSource, enabled []string) Source {
	var src Source
	d := dest{src: &src}
	l.apply(p, d, nameKey)
	p.source = src.Name
	set, failed := l.applyAll(p, d, sourceLevel)
	src.Keys.MaxResponse = p.value(maxResponseKey).from
	if l.needERP && src.BaseURL == "" && !p.unsure(baseURLKey, failed) {
		l.report(p.missing(p.value(baseURLKey).from, errors.New("not set")))
	}
	src.Logins = l.logins(p, fs)
	names := enabled
	if len(names) == 0 {
		names = fs.streamNames()
	}
	if len(names) == 0 {
		for _, sp := range l.specs {
			if sp.Core {
				names = append(names, sp.Name)
			}
		}
	}
	for _, n := range names {
		src.Streams = append(src.Streams, l.stream(p, n, fs.streams[n]))
	}
	if err := BudgetHoldsFollows(src); err != nil {
		l.report(p.fail(set[requestsKey.name], err))
	}
	return src
}

// BudgetHoldsFollows refuses a budget of requests an hour that the
// follow runs alone would spend: the daemon stretches window runs and
// complete sweeps to fit a budget, never follow runs, so such a budget
// could never be kept.
func BudgetHoldsFollows(src Source) error {
	budget := float64(src.RequestsPerHour)
	need, parts := src.FollowRequestsPerHour()
	if budget == 0 || budget > need {
		return nil
	}
	return fmt.Errorf("%d requests an hour cannot hold even the follow runs, which ask %.0f (%s), and window runs and complete sweeps need some more: it would take more than %.0f, or follow runs less often",
		src.RequestsPerHour, need, strings.Join(parts, "; "), need)
}

// logins builds a source's logins: its list, or its one login from the
// single-login keys and variables, never both.
func (l *loader) logins(p place, fs fileSource) []Login {
	single := fs.written(fileKeys(loginLevel))
	vars := []string(nil)
	if p.vars {
		vars = l.env.setAt(loginLevel)
	}
	switch {
	case fs.logins != nil && len(single) > 0:
		l.report(problem{line: fs.keys[single[0]].line, msg: fmt.Sprintf("%s: logins and %s.%s: a source lists its logins, or has one login from the single-login keys, not both",
			p.at, p.at, strings.Join(single, ", "+p.at+"."))})
	case fs.logins != nil && len(vars) > 0:
		l.report(problem{msg: fmt.Sprintf("%s.logins and %s: a source lists its logins, or has one login from the single-login settings, not both; "+
			"a login listed under logins takes its password from its own password_file or password_env", p.at, strings.Join(vars, ", "))})
	case fs.logins == nil:
		return []Login{l.login(p)}
	}
	var out []Login
	for _, fl := range fs.logins {
		lg := l.login(place{at: fl.at, line: fl.line, file: fl.keys, env: l.env, inFile: true, source: p.source, meant: l.file.meant[fl.at]})
		if slices.ContainsFunc(out, func(o Login) bool { return o.Name() == lg.Name() && lg.Name() != "" }) {
			l.report(problem{line: fl.line, msg: fmt.Sprintf("source %q: login %q is listed twice (%s)", p.source, lg.Name(), lg.Keys.Username)})
			continue
		}
		out = append(out, lg)
	}
	return out
}

// login builds one login at p.
func (l *loader) login(p place) Login {
	var lg Login
	_, failed := l.applyAll(p, dest{login: &lg}, loginLevel)
	lg.Keys.Username = p.value(usernameKey).from
	lg.Keys.ClientID = p.value(clientIDKey).from
	var ok bool
	if lg.Password, lg.Keys.Password, ok = l.secret(p, passwordKey); !ok {
		failed[passwordKey.name] = true
	}
	if lg.ClientSecret, lg.Keys.ClientSecret, ok = l.secret(p, clientSecretKey); !ok {
		failed[clientSecretKey.name] = true
	}
	if l.needERP {
		if err := checkLogin(p, lg, func(k key) bool { return p.unsure(k, failed) }); err != nil {
			l.report(*err)
		}
	}
	return lg
}

// stream builds one enabled stream of the source at src; fs is what the
// file writes under its name (nil: nothing).
func (l *loader) stream(src place, name string, fs map[string]scalar) StreamConfig {
	p := place{file: fs, env: l.env, vars: true, top: l.file.top, inFile: src.inFile, source: src.source, stream: name}
	if src.inFile {
		p.at = src.path("streams." + name)
	}
	sp := specOf(l.specs, name)
	sc := StreamConfig{Name: name, Settings: map[string]string{}}
	set, failed := l.applyAll(p, dest{stream: &sc}, streamLevel)
	for _, s := range sp.Settings {
		v, ok := fs[s.Key]
		if !ok {
			sc.Settings[s.Key] = s.Default
			continue
		}
		if s.Check != nil {
			if err := s.Check(v.text); err != nil {
				l.report(p.fail(value{from: p.path(s.Key), line: v.line}, fmt.Errorf("%q: %v", v.text, err)))
			}
		}
		sc.Settings[s.Key] = v.text
	}
	if h := set[historyKey.name]; sc.History != nil && *sc.History && l.specs != nil && !sp.History {
		l.report(p.fail(h, fmt.Errorf("%s keeps no history; streams that can: %s",
			name, strings.Join(specNames(l.specs, func(s StreamSpec) bool { return s.History }), ", "))))
	}
	if failed[scheduleKey.name] || failed[sweepScheduleKey.name] || failed[windowKey.name] {
		return sc // the schedules that follow from them would repeat the mistake
	}
	warnings, err := schedules(p, &sc, sp, l.specs, set[scheduleKey.name], set[sweepScheduleKey.name], set[windowKey.name], set[windowPagesKey.name])
	if err != nil {
		l.report(*err)
	}
	for _, w := range warnings {
		l.warn(w)
	}
	return sc
}
