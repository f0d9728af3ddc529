package db

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// What Postgres accepts, checked before a value is written, so that one
// odd value rejects its record instead of failing a whole page.
const (
	// MaxNumericIntDigits and MaxNumericScale are the limits of numeric
	// (and of numbers inside jsonb): 131072 digits before the point,
	// 16383 after.
	MaxNumericIntDigits = 131072
	MaxNumericScale     = 16383
	// MaxKeyBytes bounds an id or another key value: a btree index row
	// holds at most about 2.7 kB, and a key shares it with the source.
	MaxKeyBytes = 2000
	// MaxJSONDepth bounds nesting in a payload: Postgres parses jsonb
	// recursively, and deep nesting can exceed the server's stack depth.
	MaxJSONDepth = 1000
)

// CheckNumeric refuses a decimal that numeric cannot hold.
func CheckNumeric(d decimal.Decimal) error {
	if d.IsZero() {
		if scale := -d.Exponent(); scale > MaxNumericScale {
			return fmt.Errorf("a scale of %d digits is beyond Postgres numeric's %d", scale, MaxNumericScale)
		}
		return nil
	}
	if scale := -int64(d.Exponent()); scale > MaxNumericScale {
		return fmt.Errorf("a scale of %d digits is beyond Postgres numeric's %d", scale, MaxNumericScale)
	}
	if digits := int64(d.NumDigits()) + int64(d.Exponent()); digits > MaxNumericIntDigits {
		return fmt.Errorf("%d integer digits are beyond Postgres numeric's %d", digits, MaxNumericIntDigits)
	}
	return nil
}

// CheckKey refuses a key value Postgres cannot index or store as text.
func CheckKey(what, v string) error {
	switch {
	case len(v) > MaxKeyBytes:
		return fmt.Errorf("%s is %d bytes long, beyond the %d a key may have", what, len(v), MaxKeyBytes)
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%s holds a NUL character, which Postgres text cannot store", what)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	return nil
}

// SafeText makes s storable as Postgres text and at most max bytes long:
// invalid UTF-8 and NUL become U+FFFD, and a cut is marked. It is for
// text erpsync composes from outside input (reasons, excerpts), never for
// values a record carries.
func SafeText(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max] + "..."
}
