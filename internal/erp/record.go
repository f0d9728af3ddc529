package erp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// Record is one JSON object split into its top-level fields. Values stay
// raw bytes of the input, so no number is ever parsed as a float. Fields
// are kept as offsets, not slices: a page's worth of them is one
// pointer-free array the garbage collector never has to scan.
type Record struct {
	src    []byte
	fields []fieldPos
	object bool
	stats  ValueStats
}

// fieldPos locates a member in src: the key between its quotes and the
// value.
type fieldPos struct {
	k0, k1, v0, v1 int32
	// escaped: the key's value is not its bytes (rare: an escape, or
	// bytes that are not UTF-8), so it is compared decoded.
	escaped bool
}

// IsObject reports whether the record came from a JSON object (the zero
// Record did not).
func (r Record) IsObject() bool { return r.object }

// Len is the number of fields.
func (r Record) Len() int { return len(r.fields) }

// Field returns the i-th field in the order received. The key is not a
// copy (unless it had escapes): look it up with string(key), which does
// not allocate.
func (r Record) Field(i int) (key []byte, value json.RawMessage) {
	f := r.fields[i]
	return r.key(f), r.src[f.v0:f.v1:f.v1]
}

func (r Record) key(f fieldPos) []byte {
	if f.escaped {
		return unescapeKey(r.src[f.k0-1 : f.k1+1])
	}
	return r.src[f.k0:f.k1:f.k1]
}

// Get returns a field's raw value.
func (r Record) Get(name string) (json.RawMessage, bool) {
	for _, f := range r.fields {
		if f.escaped {
			if string(r.key(f)) == name {
				return r.src[f.v0:f.v1:f.v1], true
			}
		} else if string(r.src[f.k0:f.k1]) == name {
			return r.src[f.v0:f.v1:f.v1], true
		}
	}
	return nil, false
}

// ParseRecord splits a JSON object into its fields, validating it. A key
// given twice keeps its last value, as encoding/json does.
func ParseRecord(raw json.RawMessage) (Record, error) {
	return parseRecord(raw, make([]fieldPos, 0, 12))
}

// ParseRecordReusing is ParseRecord keeping its fields in prev's list, for
// a caller that parses a small object of every record (a customer inside
// an invoice) and is done with prev: it allocates nothing once the list
// is long enough.
func ParseRecordReusing(raw json.RawMessage, prev Record) (Record, error) {
	return parseRecord(raw, prev.fields[:0])
}

func parseRecord(raw json.RawMessage, dst []fieldPos) (Record, error) {
	if len(raw) > maxBody {
		return Record{}, errTooLarge
	}
	s := scanner{b: raw}
	s.ws()
	if s.i >= len(raw) || raw[s.i] != '{' {
		return Record{}, fmt.Errorf("record is a JSON %s, not an object", Kind(raw))
	}
	r := Record{src: raw, object: true}
	s.mark()
	fields, err := s.fields(dst)
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return Record{}, fmt.Errorf("record: %w", err)
	}
	r.fields = fields
	r.stats = s.stats()
	return r, nil
}

// Text returns a string or number field as text. ok is false when the
// field is absent or null.
func (r Record) Text(field string) (string, bool, error) {
	raw, present := r.Get(field)
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
	raw, present := r.Get(field)
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

// MaxMoneyLiteral bounds the length of a literal ParseMoney reads: the
// parse costs the square of the length (a million digits took 3 s, four
// million a minute), so a broken answer could stall a run for hours.
// It is above the widest value Postgres numeric holds (131072 digits
// before the point, 16383 after), which decides what may be stored.
const MaxMoneyLiteral = 1 << 18

// ParseMoney parses a plain decimal literal exactly. It refuses what
// shopspring would also accept but is not money (exponents, NaN, spaces),
// and a literal longer than MaxMoneyLiteral.
func ParseMoney(s string) (decimal.Decimal, error) {
	if len(s) > MaxMoneyLiteral {
		return decimal.Decimal{}, fmt.Errorf("%q is a number of %d characters, more than the %d money may have", truncate(s, 40), len(s), MaxMoneyLiteral)
	}
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
	raw, present := r.Get(field)
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
	// A loop, not bytes.TrimLeft with a cutset: Kind runs for every typed
	// column of every record, and TrimLeft builds its set on each call.
	i := 0
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\r' || raw[i] == '\n') {
		i++
	}
	if i == len(raw) {
		return "absent"
	}
	switch raw[i] {
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
		raw = bytes.TrimSpace(raw)
		if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 {
			return string(inner), true
		}
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

// ScalarText is scalarText for other packages: a JSON string's value or
// a JSON number's literal.
func ScalarText(raw json.RawMessage) (string, bool) { return scalarText(raw) }

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
