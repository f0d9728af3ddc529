package erp

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"unicode/utf8"
)

// A single-pass JSON scanner. It validates exactly what encoding/json
// accepts (FuzzScanMatchesEncodingJSON holds it to that) and returns
// sub-slices of the input instead of copies, so a page of records is
// split, checked and kept as the bytes received with no per-record
// allocation. Numbers are never converted: they stay text. While it
// validates, it also gathers the ValueStats of each record, so that what
// a store would refuse is known without a second pass over the bytes.

// maxDepth bounds nesting, so hostile input cannot exhaust the stack.
const maxDepth = 10000

var errDepth = errors.New("JSON nested too deeply")

type scanner struct {
	b     []byte
	i     int
	depth int

	// The facts gathered since the last mark; see mark and stats.
	st   ValueStats
	base int // depth at the mark
	peak int // deepest depth reached since the mark
}

type syntaxError struct {
	msg string
	off int
}

func (e *syntaxError) Error() string { return fmt.Sprintf("%s at offset %d", e.msg, e.off) }

func (s *scanner) fail(msg string) error { return &syntaxError{msg: msg, off: s.i} }

// mark starts gathering the facts of a new value at the current depth.
func (s *scanner) mark() {
	s.st = ValueStats{}
	s.base, s.peak = s.depth, s.depth
}

// stats returns the facts gathered since the mark.
func (s *scanner) stats() ValueStats {
	st := s.st
	st.Depth = s.peak - s.base
	return st
}

// enter counts one more level of nesting.
func (s *scanner) enter() error {
	if s.depth++; s.depth > maxDepth {
		return errDepth
	}
	s.peak = max(s.peak, s.depth)
	return nil
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value skips one JSON value, validating it.
func (s *scanner) value() error {
	if s.i >= len(s.b) {
		return s.fail("unexpected end of JSON input")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object()
	case c == '[':
		return s.array(nil)
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		return s.fail(fmt.Sprintf("invalid character %q looking for beginning of value", c))
	}
}

// object skips an object, validating it.
func (s *scanner) object() error {
	if err := s.enter(); err != nil {
		return err
	}
	defer func() { s.depth-- }()
	s.i++ // {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		if err := s.key(); err != nil {
			return err
		}
		if err := s.value(); err != nil {
			return err
		}
		if done, err := s.next('}'); done || err != nil {
			return err
		}
	}
}

// key scans an object key and its colon, leaving s.i at the value.
func (s *scanner) key() error {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return s.fail("expected a string key in object")
	}
	if _, err := s.str(); err != nil {
		return err
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return s.fail("expected ':' after object key")
	}
	s.i++
	s.ws()
	return nil
}

// next scans what follows a member or element: a comma (done false) or
// the closing byte (done true).
func (s *scanner) next(closing byte) (done bool, err error) {
	s.ws()
	if s.i >= len(s.b) {
		if closing == '}' {
			return false, s.fail("unexpected end of JSON input in object")
		}
		return false, s.fail("unexpected end of JSON input in array")
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return false, nil
	case closing:
		s.i++
		return true, nil
	}
	if closing == '}' {
		return false, s.fail("expected ',' or '}' in object")
	}
	return false, s.fail("expected ',' or ']' in array")
}

// array scans an array; scanElem, if not nil, scans each element (at
// s.i) instead of value().
func (s *scanner) array(scanElem func() error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer func() { s.depth-- }()
	s.i++ // [
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	if scanElem == nil {
		scanElem = s.value
	}
	for {
		s.ws()
		if s.i >= len(s.b) {
			return s.fail("unexpected end of JSON input in array")
		}
		if err := scanElem(); err != nil {
			return err
		}
		if done, err := s.next(']'); done || err != nil {
			return err
		}
	}
}

// strPlain marks the bytes a string may hold that need no attention:
// printable ASCII but the quote and the backslash.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str scans a string. escaped reports whether its value differs from its
// bytes, through an escape or through bytes that are not UTF-8 (which
// decoding replaces with U+FFFD), so that keys are compared as decoded.
func (s *scanner) str() (escaped bool, err error) {
	b := s.b
	i := s.i + 1 // opening quote
	for {
		for i < len(b) && strPlain[b[i]] {
			i++
		}
		if i >= len(b) {
			s.i = i
			return false, s.fail("unexpected end of JSON input in string")
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return escaped, nil
		case c == '\\':
			escaped = true
			i++
			if i >= len(b) {
				s.i = i
				return false, s.fail("unexpected end of JSON input in string escape")
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+5 > len(b) {
					s.i = i
					return false, s.fail("unexpected end of JSON input in \\u escape")
				}
				r, ok := hex4(b[i+1 : i+5])
				if !ok {
					s.i = i
					return false, s.fail("invalid character in \\u escape")
				}
				i += 5
				switch {
				case r == 0:
					s.st.NULEscape = true
				case r >= 0xd800 && r < 0xdc00:
					// A high surrogate is whole only with a low one
					// escaped right after it.
					if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
						if lo, ok := hex4(b[i+2 : i+6]); ok && lo >= 0xdc00 && lo < 0xe000 {
							i += 6
							continue
						}
					}
					s.st.LoneSurrogate = true
				case r >= 0xdc00 && r < 0xe000:
					s.st.LoneSurrogate = true
				}
			default:
				s.i = i
				return false, s.fail("invalid escape in string")
			}
		case c < 0x20:
			s.i = i
			return false, s.fail("invalid control character in string")
		default:
			// Not ASCII: one UTF-8 sequence, or a byte that starts none.
			// The quote that ends the string is ASCII, so no sequence
			// runs past it.
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				s.st.InvalidUTF8 = true
				escaped = true
			}
			i += size
		}
	}
}

// hexVal is the value of a hexadecimal digit, or -1.
var hexVal = func() (t [256]int8) {
	for c := range t {
		switch {
		case c >= '0' && c <= '9':
			t[c] = int8(c - '0')
		case c >= 'a' && c <= 'f':
			t[c] = int8(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			t[c] = int8(c - 'A' + 10)
		default:
			t[c] = -1
		}
	}
	return t
}()

// hex4 decodes the four hex digits of a \u escape.
func hex4(h []byte) (rune, bool) {
	a, b, c, d := hexVal[h[0]], hexVal[h[1]], hexVal[h[2]], hexVal[h[3]]
	if a|b|c|d < 0 {
		return 0, false
	}
	return rune(a)<<12 | rune(b)<<8 | rune(c)<<4 | rune(d), true
}

const (
	// expCeiling bounds the exponent kept from a number's literal: far
	// beyond any size of body, so a larger one changes no verdict, and
	// small enough that nothing computed from it overflows.
	expCeiling = 1 << 40
	// statCeiling bounds IntDigits and FracDigits, so they fit an int on
	// every platform.
	statCeiling = 1<<31 - 1
)

// number scans a number and counts its digits into the stats.
func (s *scanner) number() error {
	b := s.b
	i := s.i
	if b[i] == '-' {
		i++
	}
	if i >= len(b) {
		s.i = i
		return s.fail("unexpected end of JSON input in number")
	}
	// lead counts the zeros before the first nonzero digit, in the
	// integer and fraction parts taken as one run of digits.
	var intLen, fracLen, lead int
	nonzero := false
	switch c := b[i]; {
	case c == '0':
		i++
		intLen, lead = 1, 1
	case c >= '1' && c <= '9':
		i0 := i
		for i++; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		}
		intLen, nonzero = i-i0, true
	default:
		s.i = i
		return s.fail("invalid character in numeric literal")
	}
	if i < len(b) && b[i] == '.' {
		i++
		f0 := i
		if !nonzero {
			for i < len(b) && b[i] == '0' {
				i++
			}
			lead += i - f0
			nonzero = i < len(b) && b[i] >= '1' && b[i] <= '9'
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if fracLen = i - f0; fracLen == 0 {
			s.i = i
			return s.fail("expected digit after decimal point")
		}
	}
	var exp int64
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		neg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			neg = b[i] == '-'
			i++
		}
		e0 := i
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if exp < expCeiling {
				exp = exp*10 + int64(b[i]-'0')
			}
		}
		if i == e0 {
			s.i = i
			return s.fail("expected digit in exponent")
		}
		exp = min(exp, expCeiling)
		if neg {
			exp = -exp
		}
	}
	s.i = i
	if nonzero {
		if d := int(min(int64(intLen-lead)+exp, statCeiling)); d > s.st.IntDigits {
			s.st.IntDigits = d
		}
	}
	if d := int(min(int64(fracLen)-exp, statCeiling)); d > s.st.FracDigits {
		s.st.FracDigits = d
	}
	return nil
}

func (s *scanner) literal(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.fail("invalid literal, expected " + lit)
	}
	s.i += len(lit)
	return nil
}

// end checks that only whitespace follows the value.
func (s *scanner) end() error {
	s.ws()
	if s.i != len(s.b) {
		return s.fail("invalid character after top-level value")
	}
	return nil
}

// envelope scans a top-level object, splitting the first "data" or
// "results" array into p's records as it goes, and returns the members
// (raw) and which key held the list.
func (s *scanner) envelope(p *Page) (map[string]json.RawMessage, string, error) {
	top := map[string]json.RawMessage{}
	listKey := ""
	s.i++ // {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return top, "", nil
	}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return nil, "", s.fail("expected a string key in object")
		}
		k0 := s.i
		if _, err := s.str(); err != nil {
			return nil, "", err
		}
		key := string(unescapeKey(s.b[k0:s.i]))
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return nil, "", s.fail("expected ':' after object key")
		}
		s.i++
		s.ws()
		v0 := s.i
		var err error
		if (key == "data" || key == "results") && listKey == "" && s.i < len(s.b) && s.b[s.i] == '[' {
			listKey = key
			err = s.records(p)
		} else {
			err = s.value()
		}
		if err != nil {
			return nil, "", err
		}
		top[key] = s.b[v0:s.i]
		if done, err := s.next('}'); err != nil {
			return nil, "", err
		} else if done {
			return top, listKey, nil
		}
	}
}

// records scans an array of records into p: each element's bytes, its
// value facts, and each object element's fields, in one pass. The fields
// of all records share one array.
func (s *scanner) records(p *Page) error {
	return s.array(func() error {
		v0 := s.i
		s.mark()
		if s.b[s.i] != '{' {
			if err := s.value(); err != nil {
				return err
			}
			p.Records = append(p.Records, s.b[v0:s.i:s.i])
			p.Parsed = append(p.Parsed, Record{stats: s.stats()})
			return nil
		}
		f0 := len(p.fields)
		var err error
		if p.fields, err = s.fields(p.fields); err != nil {
			return err
		}
		p.Records = append(p.Records, s.b[v0:s.i:s.i])
		n := len(p.fields)
		p.Parsed = append(p.Parsed, Record{src: s.b, fields: p.fields[f0:n:n], object: true, stats: s.stats()})
		return nil
	})
}

// smallObject is how many keys an object may have before a repeated key
// is looked for through an index instead of by comparing with each
// earlier key: below it comparing is faster and allocates nothing, above
// it the index keeps an object of n keys at O(n), not O(n²).
const smallObject = 16

// fields scans an object (s.b[s.i] is '{') and appends its members to
// dst. Keys are compared as decoded, so "a" and "\u0061" are one key; a
// key given twice keeps its last value (in the place of the first), as
// encoding/json does.
func (s *scanner) fields(dst []fieldPos) ([]fieldPos, error) {
	if err := s.enter(); err != nil {
		return dst, err
	}
	defer func() { s.depth-- }()
	from := len(dst)
	var index map[uint64]int32 // once the object is not small
	var sketch uint64          // of the keys, while it is; see addSmall

	s.i++ // {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return dst, nil
	}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return dst, s.fail("expected a string key in object")
		}
		k0 := s.i
		escaped, err := s.str()
		if err != nil {
			return dst, err
		}
		k1 := s.i
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return dst, s.fail("expected ':' after object key")
		}
		s.i++
		s.ws()
		v0 := s.i
		if err := s.value(); err != nil {
			return dst, err
		}
		// Offsets, not slices: they fit int32 since bodies are bounded
		// by maxBody.
		f := fieldPos{k0: int32(k0 + 1), k1: int32(k1 - 1), v0: int32(v0), v1: int32(s.i), escaped: escaped}
		if index == nil && !escaped && len(dst)-from < smallObject {
			dst = s.addSmall(dst, from, f, &sketch)
		} else {
			if index == nil {
				index = s.indexKeys(dst, from)
			}
			dst = s.addIndexed(dst, from, f, index)
		}
		if done, err := s.next('}'); done || err != nil {
			return dst, err
		}
	}
}

// addSmall appends f to the fields of a small object none of whose keys
// is escaped, or overwrites the field of the same key. sketch has a bit
// set for each key so far, chosen by its length and end bytes: a key
// whose bit is clear is new, which spares most comparisons.
func (s *scanner) addSmall(dst []fieldPos, from int, f fieldPos, sketch *uint64) []fieldPos {
	key := s.b[f.k0:f.k1]
	bit := uint64(1)
	if n := len(key); n > 0 {
		bit <<= (uint(n) + uint(key[0])*7 + uint(key[n-1])*13) & 63
	}
	if *sketch&bit == 0 {
		*sketch |= bit
		return append(dst, f)
	}
	for i := from; i < len(dst); i++ {
		if string(s.b[dst[i].k0:dst[i].k1]) == string(key) {
			dst[i] = f
			return dst
		}
	}
	return append(dst, f)
}

// keySeed seeds the hashes of keys; a seed of the process, unknown to
// the ERP, so no answer can be crafted to make its keys collide.
var keySeed = maphash.MakeSeed()

// indexKeys indexes the fields dst[from:], whose keys are distinct and
// unescaped (addSmall kept them so), by the hash of their key.
func (s *scanner) indexKeys(dst []fieldPos, from int) map[uint64]int32 {
	index := make(map[uint64]int32, 4*smallObject)
	for i := from; i < len(dst); i++ {
		index[maphash.Bytes(keySeed, s.b[dst[i].k0:dst[i].k1])] = int32(i - from)
	}
	return index
}

// addIndexed is addSmall for an object with an index: index maps the
// hash of a decoded key to the field with that key, dst[from+index[h]]
// (int32 is enough: a key takes at least 4 bytes of a body of at most
// maxBody).
func (s *scanner) addIndexed(dst []fieldPos, from int, f fieldPos, index map[uint64]int32) []fieldPos {
	key := s.decodedKey(f)
	h := maphash.Bytes(keySeed, key)
	i, hit := index[h]
	if !hit {
		index[h] = int32(len(dst) - from)
		return append(dst, f)
	}
	if string(s.decodedKey(dst[from+int(i)])) == string(key) {
		dst[from+int(i)] = f
		return dst
	}
	// Two keys with one hash: so rare that a linear search is fine. The
	// index keeps the first, so later keys of this hash come here too.
	for j := from; j < len(dst); j++ {
		if string(s.decodedKey(dst[j])) == string(key) {
			dst[j] = f
			return dst
		}
	}
	return append(dst, f)
}

// decodedKey returns a field's key as decoded.
func (s *scanner) decodedKey(f fieldPos) []byte {
	if f.escaped {
		return unescapeKey(s.b[f.k0-1 : f.k1+1])
	}
	return s.b[f.k0:f.k1]
}

// maxBody bounds an answer so field offsets fit in int32.
const maxBody = 1<<31 - 1

var errTooLarge = errors.New("answer larger than 2 GiB")

// unescapeKey returns a quoted key without quotes and escapes, decoded
// as encoding/json decodes it.
func unescapeKey(raw []byte) []byte {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return raw[1 : len(raw)-1]
	}
	return []byte(s)
}
