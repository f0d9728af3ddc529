package config

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// configVariable names the config file, as --config does.
const configVariable = "ERPSYNC_CONFIG"

// Load reads the configuration from environ (os.Environ() form) and the
// optional YAML file. Tests pass their own environ.
func Load(environ []string, opts Options) (Config, error) {
	l := &loader{env: envMap(environ), specs: opts.Streams, needERP: opts.NeedERP}
	if path := cmp.Or(opts.ConfigFile, l.env[configVariable]); path != "" {
		var err error
		if l.file, err = readFile(path, opts.Streams); err != nil {
			return Config{}, err
		}
	}
	return l.load()
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
}

// value is a setting's text and where it came from.
type value struct {
	text string
	// from is the setting as the user wrote it, a variable or a path in
	// the file; for a default, where the user would write it.
	from string
	set  bool // written by the user; else the default
	here bool // written in the file at the place itself
}

// place is where keys are read: the top of the file, a source, a login or
// a stream. It decides, for every key, which of the variable, the file
// and the default gives the value, and so what an error names.
type place struct {
	at   string            // its path in the file ("sources[0]"); "" at the top
	file map[string]scalar // the keys the file writes there
	env  environment
	// vars: the variables of the place's level apply to it. At a source
	// or a login, only the source the variables describe has them.
	vars   bool
	top    map[string]scalar // a stream: the keys at the top of the file
	inFile bool              // the place is in the file, not only in variables
	source string            // its source's name, for messages
	stream string            // its stream's name, for messages
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
		return value{text: strconv.FormatBool(on), from: env.from, set: true}
	case inFile && k.level == streamLevel:
		return own
	case inEnv:
		return env
	case inFile:
		return own
	}
	if top, ok := fromFile(k, p.top, k.name); ok && k.top {
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
	v := strings.TrimSpace(m[k.name].text)
	if v == "" {
		return value{}, false
	}
	return value{text: v, from: from, set: true}, true
}

// apply resolves a key and stores its value.
func (p place) apply(d dest, k key) (value, error) {
	v := p.value(k)
	if !v.set && v.text == "" {
		return v, nil
	}
	if err := k.set(d, v.text); err != nil {
		return v, p.fail(v.from, err)
	}
	return v, nil
}

// applyAll applies the keys of a level (but its secrets, which
// secret reads), returning what each resolved to by name.
func (p place) applyAll(d dest, l level) (map[string]value, error) {
	set := map[string]value{}
	for _, k := range keys {
		if k.level != l || k.set == nil || k.secret {
			continue
		}
		v, err := p.apply(d, k)
		if err != nil {
			return nil, err
		}
		set[k.name] = v
	}
	return set, nil
}

// where says where a setting is for a message: the setting as the user
// wrote it, after the source (and the stream, when the setting does not
// name it) it applies to.
func (p place) where(from string) string {
	var at []string
	if p.source != "" {
		at = append(at, fmt.Sprintf("source %q", p.source))
	}
	if p.stream != "" && !(p.inFile && strings.HasPrefix(from, p.at+".")) {
		at = append(at, "stream "+p.stream)
	}
	if len(at) == 0 {
		return from
	}
	return strings.Join(at, ", ") + ": " + from
}

// fail is a configuration error in the setting from.
func (p place) fail(from string, err error) error {
	return errf("%s: %v", p.where(from), err)
}

func (l *loader) load() (Config, error) {
	var cfg Config
	top := place{file: l.file.top, env: l.env, vars: true, inFile: true}
	set, err := top.applyAll(dest{cfg: &cfg}, topLevel)
	if err != nil {
		return Config{}, err
	}
	if err := shutdown(&cfg, set["shutdown_timeout"], set["shutdown_grace"]); err != nil {
		return Config{}, err
	}
	enabled, err := l.enabledStreams()
	if err != nil {
		return Config{}, err
	}
	if cfg.Sources, err = l.sources(enabled); err != nil {
		return Config{}, err
	}
	if l.needERP && len(cfg.Sources) == 0 {
		return Config{}, errf("no ERP source: set %s or list sources in the config file", baseURLKey.env)
	}
	cfg.Warnings = l.warnings
	return cfg, nil
}

// enabledStreams are the streams every source enables, when
// ERPSYNC_STREAMS or the top of the file names them.
func (l *loader) enabledStreams() ([]string, error) {
	if v := l.env.get(streamsEnv); v != "" {
		names := splitList(v)
		if err := checkStreamList(names, l.specs); err != nil {
			return nil, errf("%s: %v", streamsEnv, err)
		}
		return names, nil
	}
	return l.file.streams, nil
}

// sources builds the file's sources, and the one the variables describe
// when it is not one of them.
func (l *loader) sources(enabled []string) ([]Source, error) {
	var names []string
	for i, fs := range l.file.sources {
		name := cmp.Or(strings.TrimSpace(fs.keys[nameKey.name].text), nameKey.def)
		if slices.Contains(names, name) {
			return nil, errf("sources[%d]: source name %q is used twice", i, name)
		}
		names = append(names, name)
	}
	envSource, extra, err := l.env.describes(names)
	if err != nil {
		return nil, err
	}
	var out []Source
	for i, fs := range l.file.sources {
		src, err := l.source(place{at: fs.at, file: fs.keys, env: l.env, vars: names[i] == envSource, inFile: true}, fs, enabled)
		if err != nil {
			return nil, err
		}
		out = append(out, src)
	}
	if extra {
		src, err := l.source(place{env: l.env, vars: true}, fileSource{}, enabled)
		if err != nil {
			return nil, err
		}
		out = append(out, src)
	}
	return out, nil
}

// source builds one source at p (in the file as fs, or of the variables
// alone).
func (l *loader) source(p place, fs fileSource, enabled []string) (Source, error) {
	var src Source
	d := dest{src: &src}
	if _, err := p.apply(d, nameKey); err != nil {
		return Source{}, err
	}
	p.source = src.Name
	if _, err := p.applyAll(d, sourceLevel); err != nil {
		return Source{}, err
	}
	src.Keys.MaxResponse = p.value(maxResponseKey).from
	if err := checkBaseURL(p, src, l.needERP); err != nil {
		return Source{}, err
	}
	var err error
	if src.Logins, err = l.logins(p, fs); err != nil {
		return Source{}, err
	}
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
		sc, err := l.stream(p, n, fs.streams[n])
		if err != nil {
			return Source{}, err
		}
		src.Streams = append(src.Streams, sc)
	}
	return src, nil
}

// logins builds a source's logins: its list, or its one login from the
// single-login keys and variables, never both.
func (l *loader) logins(p place, fs fileSource) ([]Login, error) {
	single := fs.written(fileKeys(loginLevel))
	vars := []string(nil)
	if p.vars {
		vars = l.env.setAt(loginLevel)
	}
	switch {
	case fs.logins != nil && len(single) > 0:
		return nil, errf("%s: logins and %s.%s: a source lists its logins, or has one login from the single-login keys, not both",
			p.at, p.at, strings.Join(single, ", "+p.at+"."))
	case fs.logins != nil && len(vars) > 0:
		return nil, errf("%s.logins and %s: a source lists its logins, or has one login from the single-login settings, not both; "+
			"a login listed under logins takes its password from its own password_file or password_env", p.at, strings.Join(vars, ", "))
	case fs.logins == nil:
		lg, err := l.login(p)
		return []Login{lg}, err
	}
	var out []Login
	for _, fl := range fs.logins {
		lg, err := l.login(place{at: fl.at, file: fl.keys, env: l.env, inFile: true, source: p.source})
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(out, func(o Login) bool { return o.Name() == lg.Name() && lg.Name() != "" }) {
			return nil, errf("source %q: login %q is listed twice (%s)", p.source, lg.Name(), lg.Keys.Username)
		}
		out = append(out, lg)
	}
	return out, nil
}

// login builds one login at p.
func (l *loader) login(p place) (Login, error) {
	var lg Login
	if _, err := p.applyAll(dest{login: &lg}, loginLevel); err != nil {
		return Login{}, err
	}
	lg.Keys.Username = p.value(usernameKey).from
	lg.Keys.ClientID = p.value(clientIDKey).from
	var err error
	if lg.Password, lg.Keys.Password, err = l.secret(p, passwordKey); err != nil {
		return Login{}, err
	}
	if lg.ClientSecret, lg.Keys.ClientSecret, err = l.secret(p, clientSecretKey); err != nil {
		return Login{}, err
	}
	return lg, checkLogin(p, lg, l.needERP)
}

// stream builds one enabled stream of the source at src; fs is what the
// file writes under its name (nil: nothing).
func (l *loader) stream(src place, name string, fs map[string]scalar) (StreamConfig, error) {
	p := place{file: fs, env: l.env, vars: true, top: l.file.top, inFile: src.inFile, source: src.source, stream: name}
	if src.inFile {
		p.at = src.path("streams." + name)
	}
	sp := specOf(l.specs, name)
	sc := StreamConfig{Name: name, Settings: map[string]string{}}
	set, err := p.applyAll(dest{stream: &sc}, streamLevel)
	if err != nil {
		return StreamConfig{}, err
	}
	for _, s := range sp.Settings {
		v, ok := fs[s.Key]
		if !ok {
			sc.Settings[s.Key] = s.Default
			continue
		}
		if s.Check != nil {
			if err := s.Check(v.text); err != nil {
				return StreamConfig{}, p.fail(p.path(s.Key), fmt.Errorf("%q: %v", v.text, err))
			}
		}
		sc.Settings[s.Key] = v.text
	}
	if h := set[historyKey.name]; sc.History != nil && *sc.History && l.specs != nil && !sp.History {
		return StreamConfig{}, p.fail(h.from, fmt.Errorf("%s keeps no history; streams that can: %s",
			name, strings.Join(specNames(l.specs, func(s StreamSpec) bool { return s.History }), ", ")))
	}
	warning, err := schedules(p, &sc, sp, l.specs, set[scheduleKey.name], set[sweepScheduleKey.name])
	if err != nil {
		return StreamConfig{}, err
	}
	if warning != "" {
		l.warnings = append(l.warnings, warning)
	}
	return sc, nil
}
