package erp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// A single-pass JSON scanner. It validates exactly what encoding/json
// accepts (FuzzScanMatchesEncodingJSON holds it to that) and returns
// sub-slices of the input instead of copies, so a page of records is
// split, checked and kept as the bytes received with no per-record
// allocation. Numbers are never converted: they stay text.

// maxDepth bounds nesting, so hostile input cannot exhaust the stack.
const maxDepth = 10000

var errDepth = errors.New("JSON nested too deeply")

type scanner struct {
	b     []byte
	i     int
	depth int
}

type syntaxError struct {
	msg string
	off int
}

func (e *syntaxError) Error() string { return fmt.Sprintf("%s at offset %d", e.msg, e.off) }

func (s *scanner) fail(msg string) error { return &syntaxError{msg: msg, off: s.i} }

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
		return s.object(nil)
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

// object scans an object; member, if not nil, is called with each key
// (raw, with its quotes) and value span.
func (s *scanner) object(member func(key, val []byte) error) error {
	if s.depth++; s.depth > maxDepth {
		return errDepth
	}
	defer func() { s.depth-- }()
	s.i++ // {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.fail("expected a string key in object")
		}
		k0 := s.i
		if _, err := s.str(); err != nil {
			return err
		}
		key := s.b[k0:s.i]
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return s.fail("expected ':' after object key")
		}
		s.i++
		s.ws()
		v0 := s.i
		if err := s.value(); err != nil {
			return err
		}
		if member != nil {
			if err := member(key, s.b[v0:s.i]); err != nil {
				return err
			}
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.fail("unexpected end of JSON input in object")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.fail("expected ',' or '}' in object")
		}
	}
}

// array scans an array; scanElem, if not nil, scans each element (at
// s.i) instead of value().
func (s *scanner) array(scanElem func() error) error {
	if s.depth++; s.depth > maxDepth {
		return errDepth
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
		s.ws()
		if s.i >= len(s.b) {
			return s.fail("unexpected end of JSON input in array")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.fail("expected ',' or ']' in array")
		}
	}
}

// str scans a string and reports whether it holds escapes.
func (s *scanner) str() (escaped bool, err error) {
	s.i++ // opening quote
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return escaped, nil
		case c == '\\':
			escaped = true
			s.i++
			if s.i >= len(s.b) {
				return false, s.fail("unexpected end of JSON input in string escape")
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if s.i+4 >= len(s.b) {
					return false, s.fail("unexpected end of JSON input in \\u escape")
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return false, s.fail("invalid character in \\u escape")
					}
				}
				s.i += 5
			default:
				return false, s.fail("invalid escape in string")
			}
		case c < 0x20:
			return false, s.fail("invalid control character in string")
		default:
			s.i++
		}
	}
	return false, s.fail("unexpected end of JSON input in string")
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *scanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(s.b) {
		return s.fail("unexpected end of JSON input in number")
	}
	switch c := s.b[s.i]; {
	case c == '0':
		s.i++
	case c >= '1' && c <= '9':
		s.digits()
	default:
		return s.fail("invalid character in numeric literal")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return s.fail("expected digit after decimal point")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return s.fail("expected digit in exponent")
		}
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
		s.ws()
		if s.i >= len(s.b) {
			return nil, "", s.fail("unexpected end of JSON input in object")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return top, listKey, nil
		default:
			return nil, "", s.fail("expected ',' or '}' in object")
		}
	}
}

// records scans an array of records into p: each element's bytes, and
// each object element's fields, in one pass. The fields of all records
// share one array.
func (s *scanner) records(p *Page) error {
	return s.array(func() error {
		v0 := s.i
		if s.b[s.i] != '{' {
			if err := s.value(); err != nil {
				return err
			}
			p.Records = append(p.Records, s.b[v0:s.i:s.i])
			p.Parsed = append(p.Parsed, Record{})
			return nil
		}
		f0 := len(p.fields)
		var err error
		if p.fields, err = s.fields(p.fields); err != nil {
			return err
		}
		p.Records = append(p.Records, s.b[v0:s.i:s.i])
		n := len(p.fields)
		p.Parsed = append(p.Parsed, Record{src: s.b, fields: p.fields[f0:n:n], object: true})
		return nil
	})
}

// fields scans an object (s.b[s.i] is '{') and appends its members to
// dst; a key given twice keeps its last value.
func (s *scanner) fields(dst []fieldPos) ([]fieldPos, error) {
	from := len(dst)
	err := s.object(func(key, val []byte) error {
		// key and val are sub-slices of s.b: turn them into offsets.
		k0 := int32(cap(s.b) - cap(key) + 1)
		k1 := k0 + int32(len(key)) - 2
		v0 := int32(cap(s.b) - cap(val))
		f := fieldPos{k0: k0, k1: k1, v0: v0, v1: v0 + int32(len(val)), escaped: bytes.IndexByte(key, '\\') >= 0}
		for i := from; i < len(dst); i++ {
			if string(s.b[dst[i].k0:dst[i].k1]) == string(s.b[k0:k1]) {
				dst[i] = f
				return nil
			}
		}
		dst = append(dst, f)
		return nil
	})
	return dst, err
}

// maxBody bounds an answer so field offsets fit in int32.
const maxBody = 1<<31 - 1

var errTooLarge = errors.New("answer larger than 2 GiB")

// unescapeKey returns a quoted key without quotes and escapes.
func unescapeKey(raw []byte) []byte {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return raw[1 : len(raw)-1]
	}
	return []byte(s)
}
