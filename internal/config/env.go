package config

import (
	"cmp"
	"fmt"
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
		return "", false, fmt.Errorf("%s: these variables describe the source named %q (%s), and the config file has none of that name "+
			"(its sources: %s): set %s to the source they are for, or %s to add one more; "+
			"a login listed under logins takes its password from its own password_file or password_env",
			strings.Join(vars, ", "), name, nameKey.env, strings.Join(fileSources, ", "), nameKey.env, baseURLKey.env)
	}
	// Without a file source to go to, a URL or a login makes a source;
	// the source-wide settings alone (a page size) do not.
	return name, e.get(baseURLKey.env) != "" || len(e.setAt(loginLevel)) > 0, nil
}

// variablePrefix begins the name of every variable erpsync reads.
const variablePrefix = "ERPSYNC_"

// DemoAdminURLVariable names the server `erpsync demo` creates its
// database on.
const DemoAdminURLVariable = "ERPSYNC_DEMO_ADMIN_URL"

// readElsewhere are the variables of erpsync's that no key of the table
// holds: the demo's server, and the sizes of the end-to-end tests' fleet,
// which may be set in the environment erpsync runs in.
var readElsewhere = []string{DemoAdminURLVariable, "ERPSYNC_FLEET", "ERPSYNC_FLEET_SOURCES", "ERPSYNC_FLEET_INVOICES",
	"ERPSYNC_FLEET_DURATION", "ERPSYNC_FLEET_LATENCY", "ERPSYNC_FLEET_REPORT"}

// knownVariables are the variables erpsync reads: those of the table (a
// secret's <VAR>_FILE too), the ones read elsewhere, and those more
// names (the variables the config file names).
func knownVariables(more ...string) []string {
	out := append(slices.Clone(readElsewhere), more...)
	for _, k := range keys {
		for _, v := range []string{k.env, k.fallback} {
			if v != "" {
				out = append(out, v)
			}
		}
		if k.secret {
			out = append(out, k.env+"_FILE")
		}
	}
	return out
}

// warnUnread warns of every ERPSYNC_* variable set that erpsync does not
// read, suggesting the nearest it does as a key of the file is: a
// misspelt variable is otherwise ignored without a word.
func (l *loader) warnUnread() {
	known := knownVariables(l.file.variables()...)
	var unread []string
	for name := range l.env {
		if strings.HasPrefix(name, variablePrefix) && l.env.get(name) != "" && !slices.Contains(known, name) {
			unread = append(unread, name)
		}
	}
	slices.Sort(unread)
	for _, name := range unread {
		w := name + " is not read by erpsync"
		if near := nearest(name, known); near != "" {
			w += "; did you mean " + near + "?"
		} else {
			w += " (docs/configuration.md lists the variables it reads)"
		}
		l.warn(w)
	}
}
