package erp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// Record is one list element split into its top-level fields; values stay
// raw bytes, so no number is ever parsed as a float.
type Record map[string]json.RawMessage

// ParseRecord splits a JSON object into its fields.
func ParseRecord(raw json.RawMessage) (Record, error) {
	if Kind(raw) != "object" {
		return nil, fmt.Errorf("record is a JSON %s, not an object", Kind(raw))
	}
	var r Record
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	return r, nil
}

// Text returns a string or number field as text. ok is false when the
// field is absent or null.
func (r Record) Text(field string) (string, bool, error) {
	raw, present := r[field]
	if !present || Kind(raw) == "null" {
		return "", false, nil
	}
	s, ok := scalarText(raw)
	if !ok {
		return "", false, fmt.Errorf("field %s is a JSON %s, not a string or number", field, Kind(raw))
	}
	return s, true, nil
}

// Money returns a decimal field given as a JSON number or a string. ok is
// false when the field is absent or null; anything else that is not a
// decimal is an error.
func (r Record) Money(field string) (decimal.Decimal, bool, error) {
	raw, present := r[field]
	if !present || Kind(raw) == "null" {
		return decimal.Decimal{}, false, nil
	}
	s, ok := scalarText(raw)
	if !ok {
		return decimal.Decimal{}, false, fmt.Errorf("money field %s is a JSON %s", field, Kind(raw))
	}
	d, err := ParseMoney(s)
	if err != nil {
		return decimal.Decimal{}, false, fmt.Errorf("money field %s: %w", field, err)
	}
	return d, true, nil
}

// ParseMoney parses a plain decimal literal exactly. It refuses what
// shopspring would also accept but is not money (exponents, NaN, spaces).
func ParseMoney(s string) (decimal.Decimal, error) {
	if !isDecimalLiteral(s) {
		return decimal.Decimal{}, fmt.Errorf("%q is not a decimal number", truncate(s, 40))
	}
	d, err := decimal.NewFromString(s)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("%q is not a decimal number", truncate(s, 40))
	}
	return d, nil
}

func isDecimalLiteral(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	digits, dot := 0, false
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot:
			dot = true
		default:
			return false
		}
	}
	return digits > 0
}

// Bool returns a boolean field; ok is false when absent or null.
func (r Record) Bool(field string) (bool, bool, error) {
	raw, present := r[field]
	if !present {
		return false, false, nil
	}
	switch string(raw) {
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	case "null":
		return false, false, nil
	}
	return false, false, fmt.Errorf("field %s is a JSON %s, not a boolean", field, Kind(raw))
}

// Kind names the JSON type of a raw value.
func Kind(raw json.RawMessage) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "absent"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// scalarText returns a JSON string's value or a JSON number's literal.
func scalarText(raw json.RawMessage) (string, bool) {
	switch Kind(raw) {
	case "string":
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false
		}
		return s, true
	case "number":
		// The decoder that produced raw already checked the number's syntax.
		return string(bytes.TrimSpace(raw)), true
	}
	return "", false
}

// truncate shortens s to at most n bytes without splitting a UTF-8
// character, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// Truncate is truncate for other packages' messages.
func Truncate(s string, n int) string { return truncate(s, n) }
