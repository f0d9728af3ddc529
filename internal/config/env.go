package config

import (
	"cmp"
	"slices"
	"strings"
)

// environment is the variables Load was given, by name.
type environment map[string]string

func envMap(environ []string) environment {
	m := make(environment, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// get is a variable's value, blanks trimmed; an empty variable is unset.
func (e environment) get(name string) string { return strings.TrimSpace(e[name]) }

// setAt lists the variables of the levels' keys that are set, in the
// table's order; a secret's <variable>_FILE counts. ERPSYNC_SOURCE is not
// among them: it picks the source, it does not describe it.
func (e environment) setAt(levels ...level) []string {
	var out []string
	for _, k := range keys {
		if k.env == "" || k.env == nameKey.env || !slices.Contains(levels, k.level) {
			continue
		}
		if e.get(k.env) != "" {
			out = append(out, k.env)
		}
		if k.secret && e.get(k.env+"_FILE") != "" {
			out = append(out, k.env+"_FILE")
		}
	}
	return out
}

// describes says which source the ERPSYNC_ERP_* variables describe: the
// file's source of the name ERPSYNC_SOURCE gives ("default" unless set),
// else one more source of that name (extra). In a file with sources, that
// one more source needs ERPSYNC_ERP_BASE_URL: without it the variables
// were meant for a source of the file (a password for the file's logins,
// say), and making a source of them would only add one with no URL.
func (e environment) describes(fileSources []string) (name string, extra bool, err error) {
	name = cmp.Or(e.get(nameKey.env), nameKey.def)
	if slices.Contains(fileSources, name) {
		return name, false, nil
	}
	vars := e.setAt(sourceLevel, loginLevel)
	if len(vars) == 0 {
		return name, false, nil
	}
	if len(fileSources) > 0 && e.get(baseURLKey.env) == "" {
		return "", false, errf("%s: these variables describe the source named %q (%s), and the config file has none of that name "+
			"(its sources: %s): set %s to the source they are for, or %s to add one more; "+
			"a login listed under logins takes its password from its own password_file or password_env",
			strings.Join(vars, ", "), name, nameKey.env, strings.Join(fileSources, ", "), nameKey.env, baseURLKey.env)
	}
	// Without a file source to go to, a URL or a login makes a source;
	// the source-wide settings alone (a page size) do not.
	return name, e.get(baseURLKey.env) != "" || len(e.setAt(loginLevel)) > 0, nil
}
