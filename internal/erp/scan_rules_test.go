package erp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestATruncatedAnswer: an answer cut anywhere (a dropped connection, a
// proxy's limit) is malformed JSON at the offset where it ends, an error
// naming the route; the scanner never reads past the end of the bytes.
func TestATruncatedAnswer(t *testing.T) {
	// No literal and no \u escape: every cut of these is reported at the
	// offset where the bytes end.
	for name, body := range map[string]string{
		"of a DRF page":   `{"count":2,"next":"/r/?page=2","results":[{"id":1,"name":"a \"b\"\n","lines":[{"q":-1.5e3,"r":[]},[],{}],"tags":{}},{},[{"a":{}},[[]]]],"x":[[],{}],"y":{}}`,
		"of a bare array": `[{"id":1,"a":[1,{"b":"c"},{}],"e":{}},[],{},[{},[]],"s",-0.5]`,
	} {
		t.Run(name+" is malformed JSON where it ends, at every cut", func(t *testing.T) {
			if _, err := DecodePage("/r/", []byte(body)); err != nil {
				t.Fatalf("the whole answer: %v", err)
			}
			for n := 1; n < len(body); n++ {
				cut := body[:n]
				p, err := DecodePage("/r/", []byte(cut))
				want := fmt.Sprintf("at offset %d", n)
				var ee *EnvelopeError
				if err == nil || p != nil || errors.As(err, &ee) ||
					!strings.HasPrefix(err.Error(), "GET /r/: malformed JSON: ") || !strings.HasSuffix(err.Error(), want) {
					t.Fatalf("DecodePage(%q) = %v, %v; want malformed JSON %s", cut, p, err, want)
				}
			}
		})
	}
	t.Run("with literals and escapes is malformed JSON within the bytes, at every cut", func(t *testing.T) {
		body := `{"ok":true,"data":[{"a":null,"b":false,"u":"\u00e9\ud83d\ude00","c":[true,{"d":null}]}],"pagination":{"has_next":false,"next_cursor":null}}`
		if _, err := DecodePage("/r/", []byte(body)); err != nil {
			t.Fatalf("the whole answer: %v", err)
		}
		for n := 1; n < len(body); n++ {
			cut := body[:n]
			_, err := DecodePage("/r/", []byte(cut))
			var se *syntaxError
			if !errors.As(err, &se) || se.off > n || !strings.HasPrefix(err.Error(), "GET /r/: malformed JSON: ") {
				t.Fatalf("DecodePage(%q): %v; want malformed JSON at an offset up to %d", cut, err, n)
			}
		}
	})
	t.Run("the error says whether an object or an array was cut", func(t *testing.T) {
		for cut, want := range map[string]string{
			`[{"a":1`:               "unexpected end of JSON input in object at offset 7",
			`[{"a":[1`:              "unexpected end of JSON input in array at offset 8",
			`[1`:                    "unexpected end of JSON input in array at offset 2",
			`{"data":[],"a":{"b":1`: "unexpected end of JSON input in object at offset 21",
			`[{"a":1 x`:             "expected ',' or '}' in object at offset 8",
			`[1 x`:                  "expected ',' or ']' in array at offset 3",
		} {
			_, err := DecodePage("/r/", []byte(cut))
			if err == nil || err.Error() != "GET /r/: malformed JSON: "+want {
				t.Errorf("DecodePage(%q) = %v, want %q", cut, err, want)
			}
		}
	})
	t.Run("a record cut after its opening brace, alone", func(t *testing.T) {
		for _, cut := range []string{`{`, `[`, `[{`, `[[`, `{"data":[`, `{"data":[{`, `{"data":[{"a":{`, `{"data":[{"a":[`, `{"a":{`, `{"a":[`} {
			_, err := DecodePage("/r/", []byte(cut))
			if err == nil || !strings.HasSuffix(err.Error(), fmt.Sprintf("at offset %d", len(cut))) {
				t.Errorf("DecodePage(%q) = %v; want malformed JSON at offset %d", cut, err, len(cut))
			}
		}
	})
}

// TestNesting: the scanner bounds nesting at 10,000 levels, as
// encoding/json does, and a level counts while it is open only: a page
// of any number of records, each nested, decodes.
func TestNesting(t *testing.T) {
	nested := func(n int) string { return strings.Repeat(`[`, n-1) + `{"a":1}` + strings.Repeat(`]`, n-1) }
	t.Run("a page nested 10,000 deep decodes", func(t *testing.T) {
		body := `[` + nested(maxDepth-1) + `]`
		p, err := DecodePage("/r/", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if d := p.Parsed[0].Stats().Depth; d != maxDepth-1 {
			t.Errorf("Depth = %d, want %d", d, maxDepth-1)
		}
		if !json.Valid([]byte(body)) {
			t.Error("encoding/json refuses what the scanner accepts")
		}
	})
	t.Run("one level deeper is refused as nested too deeply", func(t *testing.T) {
		body := `[` + nested(maxDepth) + `]`
		_, err := DecodePage("/r/", []byte(body))
		if !errors.Is(err, errDepth) {
			t.Errorf("err = %v, want %v", err, errDepth)
		}
		if json.Valid([]byte(body)) {
			t.Error("encoding/json accepts what the scanner refuses")
		}
		if _, err := DecodePage("/r/", []byte(`{"data":[`+nested(maxDepth)+`]}`)); !errors.Is(err, errDepth) {
			t.Errorf("a record nested %d deep in data: %v, want %v", maxDepth, err, errDepth)
		}
		for _, b := range []string{nested(maxDepth + 1), strings.Repeat(`{"a":`, maxDepth+1) + `1` + strings.Repeat(`}`, maxDepth+1)} {
			if err := scanValid([]byte(b)); !errors.Is(err, errDepth) {
				t.Errorf("a value nested %d deep: %v, want %v", maxDepth+1, err, errDepth)
			}
		}
		if err := scanValid([]byte(nested(maxDepth))); err != nil {
			t.Errorf("a value nested %d deep: %v", maxDepth, err)
		}
	})
	const many = maxDepth + 1
	rec := `{"id":1,"l":[{"a":{}}],"m":[[1]]}`
	for name, body := range map[string]string{
		"in data":     `{"ok":true,"data":[` + strings.Repeat(rec+",", many-1) + rec + `]}`,
		"in results":  `{"count":10001,"next":null,"results":[` + strings.Repeat(rec+",", many-1) + rec + `]}`,
		"bare arrays": `[` + strings.Repeat(`[[{"a":{}}]],`, many-1) + `[[{"a":{}}]]]`,
	} {
		t.Run("a page of 10,001 nested records "+name+" decodes", func(t *testing.T) {
			p, err := DecodePage("/r/", []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Records) != many {
				t.Fatalf("%d records, want %d", len(p.Records), many)
			}
			for _, i := range []int{0, many - 1} {
				if d := p.Parsed[i].Stats().Depth; d != 4 {
					t.Errorf("record %d: Depth = %d, want 4", i, d)
				}
			}
		})
	}
}

// TestTheEdgesOfWhatTheScannerReads: values that sit on a boundary of a
// rule of the scanner (a surrogate range's first and last code, a literal
// that ends the input, an empty key, an escape cut short) are read as
// encoding/json reads them.
func TestTheEdgesOfWhatTheScannerReads(t *testing.T) {
	t.Run("a surrogate is lone unless a high one is followed by a low one", func(t *testing.T) {
		for s, lone := range map[string]bool{
			`"\ud7ff"`:       false,
			`"\ue000"`:       false,
			`"\udbff\udc00"`: false,
			`"\udc00\udc00"`: true,
			`"\udbff\ue000"`: true,
			`"\ud800\udbff"`: true,
			`"\udfff"`:       true,
		} {
			st, err := scanStats([]byte(s))
			if err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			if st.LoneSurrogate != lone {
				t.Errorf("%s: LoneSurrogate = %v, want %v", s, st.LoneSurrogate, lone)
			}
		}
	})
	t.Run("a literal that ends the input is read; a \\u escape takes hex digits only", func(t *testing.T) {
		for _, s := range []string{`true`, `false`, `null`, ` null `, `[true]`} {
			if err := scanValid([]byte(s)); err != nil {
				t.Errorf("%s: %v", s, err)
			}
		}
		for _, s := range []string{`tru`, `nul`, `[fals]`, `truE`, `"\u00g0"`, `"\u/000"`, `"\u:000"`, `"\u@000"`, `"\uG000"`, `"\u` + "`" + `000"`, `"\u000{"`} {
			if scanValid([]byte(s)) == nil {
				t.Errorf("%s is valid", s)
			}
		}
	})
	t.Run("a fraction's first digit 1 or 9 counts toward the integer digits", func(t *testing.T) {
		for num, want := range map[string]int{`0.1e5`: 5, `0.9e5`: 5, `0.01e5`: 4, `0.05e3`: 2} {
			st, err := scanStats([]byte(num))
			if err != nil || st.IntDigits != want {
				t.Errorf("%s: IntDigits %d (%v), want %d", num, st.IntDigits, err, want)
			}
		}
	})
	t.Run("an empty key is a key", func(t *testing.T) {
		r, err := ParseRecord([]byte(`{"":1,"a":2,"":3}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := fieldsOf(r); got != `""=3;"a"=2;` {
			t.Errorf("fields %s, want the empty key once, last value", got)
		}
	})
	t.Run("an escape cut short is the end of the string", func(t *testing.T) {
		for cut, want := range map[string]string{
			`["\u00e9`:       "unexpected end of JSON input in string at offset 8",
			`["\u00e`:        `unexpected end of JSON input in \u escape at offset 3`,
			`["\`:            "unexpected end of JSON input in string escape at offset 3",
			`["\n`:           "unexpected end of JSON input in string at offset 4",
			`["\ud83d\ude00`: "unexpected end of JSON input in string at offset 14",
		} {
			_, err := DecodePage("/r/", []byte(cut))
			if err == nil || err.Error() != "GET /r/: malformed JSON: "+want {
				t.Errorf("DecodePage(%q) = %v, want %q", cut, err, want)
			}
		}
	})
}
