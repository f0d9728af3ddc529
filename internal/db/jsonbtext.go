package db

import (
	"bytes"
	"crypto/sha256"
	"slices"
	"sync"
	"unicode/utf8"
)

// ContentDigest is the sha256 of the text Postgres gives the jsonb it
// parses from raw (jsonb_out, as payload::text prints it), computed
// without Postgres: a sweep compares it with the same digest of the
// payload stored, which Postgres computes from the row itself, so that a
// page of unchanged rows is compared by content without shipping their
// payloads. ok is false when raw is not JSON read as Postgres reads it
// (the row is then shipped and compared whole): the digest is only ever
// a shortcut to "unchanged", never to "changed" being missed, as long as
// two different jsonb values never print alike, which Postgres's output
// holds and TestContentDigest holds this to against Postgres itself.
func ContentDigest(raw []byte) (digest [sha256.Size]byte, ok bool) {
	w := writers.Get().(*jsonbWriter)
	defer writers.Put(w)
	w.in, w.i, w.out = raw, 0, w.out[:0]
	w.skipSpace()
	if !w.value(0) {
		return digest, false
	}
	w.skipSpace()
	if w.i != len(w.in) {
		return digest, false
	}
	return sha256.Sum256(w.out), true
}

// writers keep their buffers from one record to the next: a page's
// records are digested one after the other.
var writers = sync.Pool{New: func() any { return new(jsonbWriter) }}

// jsonbWriter reads JSON from in and writes it to out as jsonb_out
// prints it: objects with their keys once each (the last value of a key
// repeated), ordered by length then bytes, "key": value, separated by
// ", "; arrays separated by ", "; strings unescaped and escaped again as
// escape_json does; numbers as numeric_out prints them.
type jsonbWriter struct {
	in  []byte
	i   int
	out []byte
	// members holds an object's members by depth, scratch an object's
	// printed values while they are put in order, and str a string's
	// bytes unescaped.
	members [][]member
	scratch []byte
	str     []byte
}

// maxDepth is as deep as a document may nest (the sync rejects deeper
// records).
const maxDepth = 1000

func (w *jsonbWriter) skipSpace() {
	for w.i < len(w.in) {
		switch w.in[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

func (w *jsonbWriter) value(depth int) bool {
	if w.i >= len(w.in) || depth > maxDepth {
		return false
	}
	switch c := w.in[w.i]; {
	case c == '{':
		return w.object(depth)
	case c == '[':
		return w.array(depth)
	case c == '"':
		s, ok := w.readString()
		if ok {
			w.out = appendJSONString(w.out, s)
		}
		return ok
	case c == '-' || c >= '0' && c <= '9':
		return w.number()
	}
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(w.in[w.i:], []byte(lit)) {
			w.i += len(lit)
			w.out = append(w.out, lit...)
			return true
		}
	}
	return false
}

// member is an object's key with its value as printed, in out.
type member struct {
	key        []byte
	start, end int
}

func (w *jsonbWriter) object(depth int) bool {
	w.i++ // {
	w.skipSpace()
	for len(w.members) <= depth {
		w.members = append(w.members, nil)
	}
	members := w.members[depth][:0]
	defer func() { w.members[depth] = members[:0] }()
	begin := len(w.out)
	if w.i < len(w.in) && w.in[w.i] == '}' {
		w.i++
		w.out = append(w.out, "{}"...)
		return true
	}
	for {
		w.skipSpace()
		if w.i >= len(w.in) || w.in[w.i] != '"' {
			return false
		}
		key, ok := w.readString()
		if !ok {
			return false
		}
		if len(w.str) > 0 {
			key = slices.Clone(key) // an unescaped key: w.str is reused
		}
		w.skipSpace()
		if w.i >= len(w.in) || w.in[w.i] != ':' {
			return false
		}
		w.i++
		w.skipSpace()
		start := len(w.out)
		if !w.value(depth + 1) {
			return false
		}
		members = append(members, member{key: key, start: start, end: len(w.out)})
		w.skipSpace()
		if w.i >= len(w.in) {
			return false
		}
		if w.in[w.i] == '}' {
			w.i++
			break
		}
		if w.in[w.i] != ',' {
			return false
		}
		w.i++
	}
	// A key given twice keeps its last value; keys sort by length, then
	// by their bytes (Postgres's lengthCompareJsonbString).
	slices.SortStableFunc(members, func(a, b member) int {
		if len(a.key) != len(b.key) {
			return len(a.key) - len(b.key)
		}
		return bytes.Compare(a.key, b.key)
	})
	w.scratch = append(w.scratch[:0], w.out[begin:]...)
	values := w.scratch
	w.out = append(w.out[:begin], '{')
	first := true
	for j, m := range members {
		if j+1 < len(members) && bytes.Equal(members[j+1].key, m.key) {
			continue
		}
		if !first {
			w.out = append(w.out, ", "...)
		}
		first = false
		w.out = appendJSONString(w.out, m.key)
		w.out = append(w.out, ": "...)
		w.out = append(w.out, values[m.start-begin:m.end-begin]...)
	}
	w.out = append(w.out, '}')
	return true
}

func (w *jsonbWriter) array(depth int) bool {
	w.i++ // [
	w.out = append(w.out, '[')
	w.skipSpace()
	if w.i < len(w.in) && w.in[w.i] == ']' {
		w.i++
		w.out = append(w.out, ']')
		return true
	}
	for {
		w.skipSpace()
		if !w.value(depth + 1) {
			return false
		}
		w.skipSpace()
		if w.i >= len(w.in) {
			return false
		}
		if w.in[w.i] == ']' {
			w.i++
			w.out = append(w.out, ']')
			return true
		}
		if w.in[w.i] != ',' {
			return false
		}
		w.i++
		w.out = append(w.out, ", "...)
	}
}

// readString reads a string and returns its bytes unescaped (in w.str
// when it had escapes, else in the input: w.str is then empty); Postgres
// refuses \u0000, a lone surrogate and bytes that are not UTF-8.
func (w *jsonbWriter) readString() ([]byte, bool) {
	w.i++ // "
	start := w.i
	for w.i < len(w.in) && w.in[w.i] != '"' && w.in[w.i] != '\\' && w.in[w.i] >= 0x20 {
		w.i++
	}
	if w.i < len(w.in) && w.in[w.i] == '"' {
		w.str = w.str[:0]
		w.i++
		s := w.in[start : w.i-1]
		return s, utf8.Valid(s)
	}
	s := append(w.str[:0], w.in[start:w.i]...)
	defer func() { w.str = s }()
	for w.i < len(w.in) {
		c := w.in[w.i]
		switch {
		case c == '"':
			w.i++
			return s, utf8.Valid(s)
		case c < 0x20:
			return nil, false
		case c != '\\':
			s = append(s, c)
			w.i++
			continue
		}
		if w.i+1 >= len(w.in) {
			return nil, false
		}
		e := w.in[w.i+1]
		w.i += 2
		switch e {
		case '"', '\\', '/':
			s = append(s, e)
		case 'b':
			s = append(s, '\b')
		case 'f':
			s = append(s, '\f')
		case 'n':
			s = append(s, '\n')
		case 'r':
			s = append(s, '\r')
		case 't':
			s = append(s, '\t')
		case 'u':
			r, ok := w.hex4()
			if !ok || r == 0 {
				return nil, false
			}
			if r >= 0xD800 && r < 0xDC00 {
				if w.i+1 >= len(w.in) || w.in[w.i] != '\\' || w.in[w.i+1] != 'u' {
					return nil, false
				}
				w.i += 2
				lo, ok := w.hex4()
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return nil, false
				}
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
			} else if r >= 0xDC00 && r <= 0xDFFF {
				return nil, false
			}
			s = utf8.AppendRune(s, r)
		default:
			return nil, false
		}
	}
	return nil, false
}

func (w *jsonbWriter) hex4() (rune, bool) {
	if w.i+4 > len(w.in) {
		return 0, false
	}
	var r rune
	for _, c := range w.in[w.i : w.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	w.i += 4
	return r, true
}

// appendJSONString appends s quoted as Postgres's escape_json does.
func appendJSONString(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	run := 0 // s[run:i] needs no escape
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[run:i]...)
		run = i + 1
		switch c {
		case '\b':
			dst = append(dst, `\b`...)
		case '\f':
			dst = append(dst, `\f`...)
		case '\n':
			dst = append(dst, `\n`...)
		case '\r':
			dst = append(dst, `\r`...)
		case '\t':
			dst = append(dst, `\t`...)
		case '"':
			dst = append(dst, `\"`...)
		case '\\':
			dst = append(dst, `\\`...)
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	dst = append(dst, s[run:]...)
	return append(dst, '"')
}

// maxExponent bounds the exponents read: numeric holds 131,072 digits
// before the point and 16,383 after, and the sync rejects more.
const maxExponent = 200000

// number reads a JSON number and writes it as numeric_in then
// numeric_out make it: the digits placed by the exponent, as many
// fractional digits as the text had after its point less the exponent
// (none below zero), no leading zeros, no sign on zero.
func (w *jsonbWriter) number() bool {
	neg := false
	if w.in[w.i] == '-' {
		neg = true
		w.i++
	}
	begin := w.i
	intDigits := w.digits()
	if len(intDigits) == 0 || len(intDigits) > 1 && intDigits[0] == '0' {
		return false
	}
	var fracDigits []byte
	if w.i < len(w.in) && w.in[w.i] == '.' {
		w.i++
		if fracDigits = w.digits(); len(fracDigits) == 0 {
			return false
		}
	}
	if w.i >= len(w.in) || w.in[w.i] != 'e' && w.in[w.i] != 'E' {
		// Without an exponent numeric_out writes the text as it came, but
		// for the sign of a zero.
		text := w.in[begin:w.i]
		if neg && len(bytes.Trim(text, "0.")) > 0 {
			w.out = append(w.out, '-')
		}
		w.out = append(w.out, text...)
		return true
	}
	w.i++
	sign := 1
	if w.i < len(w.in) && (w.in[w.i] == '+' || w.in[w.i] == '-') {
		if w.in[w.i] == '-' {
			sign = -1
		}
		w.i++
	}
	expDigits := w.digits()
	if len(expDigits) == 0 {
		return false
	}
	exp := 0
	for _, c := range expDigits {
		if exp = exp*10 + int(c-'0'); exp > maxExponent {
			return false
		}
	}
	exp *= sign
	digits := append(slices.Clone(intDigits), fracDigits...)
	point := len(intDigits) + exp // digits before the point
	scale := max(0, len(fracDigits)-exp)
	var ip, fp []byte
	switch {
	case point <= 0:
		fp = append(bytes.Repeat([]byte{'0'}, -point), digits...)
	case point >= len(digits):
		ip = append(digits, bytes.Repeat([]byte{'0'}, point-len(digits))...)
	default:
		ip, fp = digits[:point], digits[point:]
	}
	ip = bytes.TrimLeft(ip, "0")
	if len(fp) < scale {
		fp = append(fp, bytes.Repeat([]byte{'0'}, scale-len(fp))...)
	}
	fp = fp[:scale]
	zero := len(ip) == 0 && bytes.Count(fp, []byte{'0'}) == len(fp)
	if neg && !zero {
		w.out = append(w.out, '-')
	}
	if len(ip) == 0 {
		w.out = append(w.out, '0')
	}
	w.out = append(w.out, ip...)
	if scale > 0 {
		w.out = append(w.out, '.')
		w.out = append(w.out, fp...)
	}
	return true
}

// digits reads the decimal digits that follow.
func (w *jsonbWriter) digits() []byte {
	start := w.i
	for w.i < len(w.in) && w.in[w.i] >= '0' && w.in[w.i] <= '9' {
		w.i++
	}
	return w.in[start:w.i]
}
