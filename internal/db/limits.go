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
	// maxNumericIntDigits and maxNumericScale are the limits of numeric
	// (and of numbers inside jsonb): 131072 digits before the point,
	// 16383 after.
	maxNumericIntDigits = 131072
	maxNumericScale     = 16383
	// maxKeyBytes bounds an id or another key value: a btree index row
	// holds at most about 2.7 kB, and a key shares it with the source.
	maxKeyBytes = 2000
	// maxJSONDepth bounds nesting in a payload: Postgres parses jsonb
	// recursively, and deep nesting can exceed the server's stack depth.
	maxJSONDepth = 1000
)

// CheckNumeric refuses a decimal that numeric cannot hold.
func CheckNumeric(d decimal.Decimal) error {
	if d.IsZero() {
		if scale := -d.Exponent(); scale > maxNumericScale {
			return fmt.Errorf("a scale of %d digits is beyond Postgres numeric's %d", scale, maxNumericScale)
		}
		return nil
	}
	if scale := -int64(d.Exponent()); scale > maxNumericScale {
		return fmt.Errorf("a scale of %d digits is beyond Postgres numeric's %d", scale, maxNumericScale)
	}
	if digits := int64(d.NumDigits()) + int64(d.Exponent()); digits > maxNumericIntDigits {
		return fmt.Errorf("%d integer digits are beyond Postgres numeric's %d", digits, maxNumericIntDigits)
	}
	return nil
}

// CheckJSON refuses a record whose numbers (the most digits one has
// before and after the point) or nesting jsonb cannot store.
func CheckJSON(intDigits, fracDigits, depth int) error {
	switch {
	case intDigits > maxNumericIntDigits:
		return fmt.Errorf("record holds a number of %d integer digits, beyond the %d Postgres numeric holds", intDigits, maxNumericIntDigits)
	case fracDigits > maxNumericScale:
		return fmt.Errorf("record holds a number of %d fractional digits, beyond the %d Postgres numeric holds", fracDigits, maxNumericScale)
	case depth > maxJSONDepth:
		return fmt.Errorf("record is nested %d levels deep, beyond the %d erpsync stores", depth, maxJSONDepth)
	}
	return nil
}

// CheckKey refuses a key value Postgres cannot index or store as text.
func CheckKey(what, v string) error {
	switch {
	case len(v) > maxKeyBytes:
		return fmt.Errorf("%s is %d bytes long, beyond the %d a key may have", what, len(v), maxKeyBytes)
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%s holds a NUL character, which Postgres text cannot store", what)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	return nil
}

// safeText makes s storable as Postgres text and at most max bytes long:
// invalid UTF-8 and NUL become U+FFFD, and a cut is marked. It is for
// text erpsync composes from outside input (reasons, excerpts), never for
// values a record carries.
func safeText(s string, max int) string {
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
