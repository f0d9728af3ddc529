package config

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Readers of one value, each the parser of one or more keys of the table.
// An error says what is wrong with the value, quoting it; the caller says
// which setting it was.

// oneOf reads one of a few words.
func oneOf(v string, choices ...string) (string, error) {
	for _, c := range choices {
		if v == c {
			return v, nil
		}
	}
	last := len(choices) - 1
	return "", fmt.Errorf("%q is not %s or %s", v, strings.Join(choices[:last], ", "), choices[last])
}

// intBetween reads a whole number from min to max.
func intBetween(v string, min, max int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", v)
	}
	if n < min || n > max {
		return 0, fmt.Errorf("%d is not between %d and %d", n, min, max)
	}
	return n, nil
}

// floatBetween reads a number from min to max.
func floatBetween(v string, min, max float64) (float64, error) {
	n, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", v)
	}
	if n < min || n > max {
		return 0, fmt.Errorf("%g is not between %g and %g", n, min, max)
	}
	return n, nil
}

// boolean reads true or false, as YAML and shells write them.
func boolean(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "true", "t", "1", "yes":
		return true, nil
	case "false", "f", "0", "no":
		return false, nil
	}
	return false, fmt.Errorf("%q is not true or false", v)
}

// duration reads a Go duration (20s, 5m, 2h30m) or a number of days
// (90d), at least min (minText says it in words).
func duration(v string, min time.Duration, minText string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, derr := strconv.Atoi(days)
		if derr == nil && n >= 0 && n < 100000 {
			d, err = time.Duration(n)*24*time.Hour, nil
		}
	}
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration such as 20s, 5m or 90d", v)
	}
	if d < min {
		return 0, fmt.Errorf("%s is less than %s", d, minText)
	}
	return d, nil
}

// sizeUnits are the units of a byte size, longest suffix first.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}, {"", 1}}

// minSize is the smallest answer bound accepted: below it, ordinary pages
// would fail.
const minSize = 64 << 10

// size reads a byte size: a plain number of bytes, or one with a unit
// (KiB, MiB, GiB, or KB, MB, GB in powers of 1000).
func size(v string) (int64, error) {
	for _, u := range sizeUnits {
		num, ok := strings.CutSuffix(v, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err != nil || n < 1 || n > (1<<40)/u.mult {
			break
		}
		if n*u.mult < minSize {
			return 0, fmt.Errorf("%q is too small (at least 64KiB)", v)
		}
		return n * u.mult, nil
	}
	return 0, fmt.Errorf("%q is not a size such as 64MiB", v)
}

// sizeText writes a size of whole mebibytes as size reads it.
func sizeText(n int64) string { return strconv.FormatInt(n>>20, 10) + "MiB" }

// hostPort reads a listening address.
func hostPort(v string) (string, error) {
	if _, _, err := net.SplitHostPort(v); err != nil {
		return "", fmt.Errorf("%q is not host:port", v)
	}
	return v, nil
}

// urlPath reads the path an installation serves a route family under.
func urlPath(v string) (string, error) {
	if !strings.HasPrefix(v, "/") || strings.HasSuffix(v, "/") && v != "/" || strings.ContainsAny(v, "?#") {
		return "", fmt.Errorf("%q must be a path such as /messaging", v)
	}
	return v, nil
}

// word reads a single word.
func word(v string) (string, error) {
	if v == "" || strings.ContainsAny(v, " \t\r\n") {
		return "", fmt.Errorf("%q is not a single word", v)
	}
	return v, nil
}

var sourceNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// sourceName reads a source's name, which every row it lands carries.
func sourceName(v string) (string, error) {
	if !sourceNamePattern.MatchString(v) {
		return "", fmt.Errorf("%q is not 1-64 letters, digits, '_', '.' or '-'", v)
	}
	return v, nil
}

// splitList reads a comma-separated list, skipping empty items.
func splitList(v string) []string {
	items := strings.Split(v, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return slices.DeleteFunc(items, func(s string) bool { return s == "" })
}
