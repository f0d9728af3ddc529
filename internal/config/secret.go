package config

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"
)

// Secret holds a password or client secret. Its String and GoString never
// show the value, so a secret that slips into a log line or an error
// prints as a mask.
type Secret string

func (Secret) String() string   { return "[redacted]" }
func (Secret) GoString() string { return "[redacted]" }

// Format covers every verb, %d and %x included: fmt's bad-verb path
// would otherwise print the value.
func (Secret) Format(f fmt.State, _ rune) { io.WriteString(f, "[redacted]") }

// MarshalJSON and MarshalText keep the value out of JSON logs and dumps.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }
func (Secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

// LogValue keeps the value out of every slog handler.
func (Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// Value is the one way to read the secret; grep for it to audit use.
func (s Secret) Value() string { return string(s) }

// secret reads a secret key at p, and says which setting gives it (or
// would: the messages about a missing password name it); false when what
// was written cannot be read, which is reported. Where the variables
// apply they win over the file: <VAR> or <VAR>_FILE. In the file,
// <name>_file names a file holding it, <name>_env a variable. Two forms at
// one place are refused as ambiguous. The value is never part of an error
// or a warning.
func (l *loader) secret(p place, k key) (Secret, string, bool) {
	envFile := k.env + "_FILE"
	if p.vars {
		v, path := p.env[k.env], p.env.get(envFile)
		switch {
		case v != "" && path != "":
			l.report(p.fail(value{from: k.env + " and " + envFile}, errors.New("set either the variable or the file, not both")))
			return "", k.env, false
		case path != "":
			s, ok := l.secretFile(p, value{from: envFile}, path)
			return s, envFile, ok
		case v != "":
			return Secret(v), k.env, true
		}
	}
	fileKey, envKey := p.path(k.name+"_file"), p.path(k.name+"_env")
	file, variable := p.file[k.name+"_file"], p.file[k.name+"_env"]
	path, name := strings.TrimSpace(file.text), strings.TrimSpace(variable.text)
	switch {
	case path != "" && name != "":
		l.report(p.fail(value{from: envKey + " and " + fileKey, line: file.line}, errors.New("set either the variable or the file, not both")))
		return "", fileKey, false
	case path != "":
		s, ok := l.secretFile(p, value{from: fileKey, line: file.line}, path)
		return s, fileKey, ok
	case name != "":
		return Secret(p.env[name]), name + " (" + envKey + ")", true
	case p.inFile:
		return "", fileKey, true
	}
	return "", k.env, true
}

// secretFile reads a secret from the file at path, which the setting from
// names. Its trailing newline goes; an empty file is refused.
func (l *loader) secretFile(p place, from value, path string) (Secret, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		l.report(p.fail(from, fmt.Errorf("cannot read %s: %v", path, errors.Unwrap(err))))
		return "", false
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		l.report(p.fail(from, fmt.Errorf("%s is empty", path)))
		return "", false
	}
	l.warnReadableByAll(p.where(from), path, "", "")
	return Secret(v), true
}

// warnReadableByAll is the rule for every file that holds a secret, a
// secret's own file or the config file with a password in it: one every
// user of the host may read is used, with a warning naming the setting
// (where) and the file, and what secret it holds when that is not the
// whole of it (holds), and what else may be done (more). A Kubernetes Secret volume is mode 0644 unless told
// otherwise, and refusing it would stop a deployment that is only
// careless.
func (l *loader) warnReadableByAll(where, path, holds, more string) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o004 == 0 {
		return
	}
	l.warn(fmt.Sprintf("%s: %s can be read by every user of the host (mode %04o)%s; make it 0600, or 0640 with the group erpsync runs as%s",
		where, path, fi.Mode().Perm(), holds, more))
}

// warnExposed warns of a config file every user of the host may read
// that writes a secret in one of its keys.
func (l *loader) warnExposed() {
	if len(l.file.secrets) == 0 {
		return
	}
	var at []string
	for _, w := range l.file.secrets {
		at = append(at, fmt.Sprintf("%s on line %d", w.path, w.line))
	}
	l.warnReadableByAll("config file", l.file.path, " and writes a secret in it ("+strings.Join(at, ", ")+")",
		", or give the secret in a variable or a file of its own; change it if others may have read it")
}

// hasPassword says whether a Postgres connection string, a URL or
// key=value pairs, carries a password.
func hasPassword(conn string) bool {
	if u, err := url.Parse(conn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		_, has := u.User.Password()
		return has || u.Query().Has("password")
	}
	return passwordPair.MatchString(conn)
}

// passwordPair is a password in a connection string of key=value pairs.
var passwordPair = regexp.MustCompile(`(^|\s)password\s*=`)
