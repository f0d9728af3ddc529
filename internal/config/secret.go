package config

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
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
// would: the messages about a missing password name it). Where the
// variables apply they win over the file: <VAR> or <VAR>_FILE. In the
// file, <name>_file names a file holding it, <name>_env a variable. Two
// forms at one place are refused as ambiguous. The value is never part of
// an error or a warning.
func (l *loader) secret(p place, k key) (Secret, string, error) {
	envFile := k.env + "_FILE"
	if p.vars {
		v, path := p.env[k.env], p.env.get(envFile)
		switch {
		case v != "" && path != "":
			return "", "", p.fail(k.env+" and "+envFile, errors.New("set either the variable or the file, not both"))
		case path != "":
			s, err := l.secretFile(p, envFile, path)
			return s, envFile, err
		case v != "":
			return Secret(v), k.env, nil
		}
	}
	fileKey, envKey := p.path(k.name+"_file"), p.path(k.name+"_env")
	path, variable := strings.TrimSpace(p.file[k.name+"_file"].text), strings.TrimSpace(p.file[k.name+"_env"].text)
	switch {
	case path != "" && variable != "":
		return "", "", p.fail(envKey+" and "+fileKey, errors.New("set either the variable or the file, not both"))
	case path != "":
		s, err := l.secretFile(p, fileKey, path)
		return s, fileKey, err
	case variable != "":
		return Secret(p.env[variable]), variable + " (" + envKey + ")", nil
	case p.inFile:
		return "", fileKey, nil
	}
	return "", k.env, nil
}

// secretFile reads a secret from the file at path, which the setting from
// names. Its trailing newline goes; an empty file is refused. A file
// every user of the host may read is accepted with a warning: a
// Kubernetes Secret volume is mode 0644 unless told otherwise, and
// refusing it would stop a deployment that is only careless.
func (l *loader) secretFile(p place, from, path string) (Secret, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", p.fail(from, fmt.Errorf("cannot read %s: %v", path, errors.Unwrap(err)))
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", p.fail(from, fmt.Errorf("%s is empty", path))
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o004 != 0 {
		l.warnings = append(l.warnings, fmt.Sprintf("%s: %s can be read by every user of the host (mode %04o); "+
			"make it 0600, or 0640 with the group erpsync runs as", p.where(from), path, fi.Mode().Perm()))
	}
	return Secret(v), nil
}
