package erp

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"testing"
	"time"
)

// TestScanner documents the exact JSON scanner: it reads what encoding/json
// reads, and names where an answer is malformed.
func TestScanner(t *testing.T) {
	// Keys are compared as decoded: "a" and "\u0061" are one key, and the
	// last value wins, as with encoding/json.
	t.Run("ComparesKeysAsDecoded", func(t *testing.T) {
		big := string(manyKeys(100))
		big = big[:len(big)-1]
		for _, tt := range []struct {
			name, rec string
			fields    string // fieldsOf the record
		}{
			{"Plain", `{"a":1,"b":2,"a":3}`, `"a"=3;"b"=2;`},
			{"EscapedAfter", `{"a":1,"\u0061":2}`, `"a"=2;`},
			{"EscapedBefore", `{"\u0061":1,"b":0,"a":2}`, `"a"=2;"b"=0;`},
			{"BothEscaped", `{"\u0061":1,"\u0061":2,"\u0041":3}`, `"a"=2;"A"=3;`},
			{"EscapesOfOtherKinds", `{"a/b":1,"a\/b":2,"\"":3,"\u0022":4}`, `"a/b"=2;"\""=4;`},
			{"BytesNotUTF8DecodeToUFFFD", "{\"\xff\":1,\"\xfe\":2,\"\\ufffd\":3}", "\"\ufffd\"=3;"},
			{"LoneSurrogatesDecodeToUFFFD", `{"\ud800":1,"\udc00":2}`, "\"\ufffd\"=2;"},
			{"ManyKeys", big + `,"k5":"x","\u006b7":"y","k99":"z"}`, ""},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r, err := ParseRecord(json.RawMessage(tt.rec))
				if err != nil {
					t.Fatal(err)
				}
				p, err := DecodePage("/r/", []byte("["+tt.rec+"]"))
				if err != nil {
					t.Fatal(err)
				}
				if got := fieldsOf(p.Parsed[0]); got != fieldsOf(r) {
					t.Errorf("page fields %s, ParseRecord fields %s", got, fieldsOf(r))
				}
				var want map[string]json.RawMessage
				if err := json.Unmarshal([]byte(tt.rec), &want); err != nil {
					t.Fatal(err)
				}
				if r.Len() != len(want) {
					t.Errorf("%d fields, encoding/json has %d", r.Len(), len(want))
				}
				for k, v := range want {
					if got, ok := r.Get(k); !ok || string(got) != string(v) {
						t.Errorf("Get(%q) = %s, %v; encoding/json %s", k, got, ok, v)
					}
				}
				if tt.fields != "" && fieldsOf(r) != tt.fields {
					t.Errorf("fields %s, want %s", fieldsOf(r), tt.fields)
				}
			})
		}
	})

	// 40,000 keys took seconds when each key was compared with every earlier
	// one.
	t.Run("FindsRepeatedKeysInLinearTime", func(t *testing.T) {
		raw := manyKeys(200_000)
		start := time.Now()
		r, err := ParseRecord(raw)
		if err != nil || r.Len() != 200_000 {
			t.Fatalf("%d fields, %v", r.Len(), err)
		}
		// Linear detection takes about a second here under -race on an idle
		// machine; the quadratic one took seconds for 40,000 keys, so minutes
		// for 200,000. 30 s tells them apart with room for a loaded 2-core CI.
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("200,000 keys took %s", d)
		}
		// A page of such records, escaped keys among them.
		var b strings.Builder
		b.WriteString("[")
		for i := range 3 {
			if i > 0 {
				b.WriteString(",")
			}
			b.Write(raw[:len(raw)-1])
			b.WriteString(`,"\u006b1":"again"}`)
		}
		b.WriteString("]")
		p, err := DecodePage("/r/", []byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		for i, rec := range p.Parsed {
			if v, _ := rec.Get("k1"); rec.Len() != 200_000 || string(v) != `"again"` {
				t.Errorf("record %d: %d fields, k1 = %s", i, rec.Len(), v)
			}
		}
	})

	t.Run("ReadsEveryHexDigitOfAUnicodeEscape", func(t *testing.T) {
		// Both cases of each letter, and both ends of each range of digits.
		r, err := ParseRecord([]byte(`{"k":"\u0123\u4567\u89ab\ucdef\u89AB\uCDEF\u0aAf\u0F0f"}`))
		if err != nil {
			t.Fatal(err)
		}
		if v, ok, err := r.Text("k"); err != nil || !ok || v != "\u0123\u4567\u89ab\ucdef\u89ab\ucdef\u0aaf\u0f0f" {
			t.Errorf("k = %+q, %v, %v", v, ok, err)
		}
	})

	// A key first met after the object outgrew smallObject is indexed as
	// it comes, at its place among the record's own fields: a page's
	// later records start further into the fields, and a repeat of such
	// a key must still overwrite its own record's field.
	t.Run("KeepsTheLastOfAKeyIndexedAsItCameInEveryRecordOfAPage", func(t *testing.T) {
		raw := manyKeys(smallObject + 4)
		last := fmt.Sprintf("k%d", smallObject+3)
		var b strings.Builder
		b.WriteString("[")
		for i := range 3 {
			if i > 0 {
				b.WriteString(",")
			}
			b.Write(raw[:len(raw)-1])
			fmt.Fprintf(&b, `,%q:"again %d"}`, last, i)
		}
		b.WriteString("]")
		p, err := DecodePage("/r/", []byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		for i, rec := range p.Parsed {
			if v, _ := rec.Get(last); rec.Len() != smallObject+4 || string(v) != fmt.Sprintf(`"again %d"`, i) {
				t.Errorf("record %d: %d fields, %s = %s", i, rec.Len(), last, v)
			}
		}
	})

	// Two keys of one hash (too rare to meet by chance) are still told apart.
	t.Run("TellsApartTwoKeysOfOneHash", func(t *testing.T) {
		s := scanner{b: []byte(`"a" "b" "b" "a"`)}
		field := func(k0 int) fieldPos {
			return fieldPos{k0: int32(k0 + 1), k1: int32(k0 + 2), v0: int32(k0), v1: int32(k0 + 3)}
		}
		dst := []fieldPos{field(0)}
		// The index says "b" hashes like the field of "a".
		index := map[uint64]int32{maphash.Bytes(keySeed, []byte("b")): 0}
		dst = s.addIndexed(dst, 0, field(4), index)
		dst = s.addIndexed(dst, 0, field(8), index)
		if len(dst) != 2 || dst[0] != field(0) || dst[1] != field(8) {
			t.Fatalf("fields %+v, want a at 0 and the second b", dst)
		}
		index[maphash.Bytes(keySeed, []byte("a"))] = 1 // now "a" collides with "b"
		dst = s.addIndexed(dst, 0, field(12), index)
		if len(dst) != 2 || dst[0] != field(12) {
			t.Fatalf("fields %+v, want the second a at 0", dst)
		}
	})

	// An answer cut anywhere (a dropped connection, a proxy's limit) is
	// malformed JSON at the offset where it ends, an error naming the route;
	// the scanner never reads past the end of the bytes.
	t.Run("FindsATruncatedAnswerMalformed", func(t *testing.T) {
		// No literal and no \u escape: every cut of these is reported at the
		// offset where the bytes end.
		for name, body := range map[string]string{
			"OfADRFPage":   `{"count":2,"next":"/r/?page=2","results":[{"id":1,"name":"a \"b\"\n","lines":[{"q":-1.5e3,"r":[]},[],{}],"tags":{}},{},[{"a":{}},[[]]]],"x":[[],{}],"y":{}}`,
			"OfABareArray": `[{"id":1,"a":[1,{"b":"c"},{}],"e":{}},[],{},[{},[]],"s",-0.5]`,
		} {
			t.Run(name+"WhereItEndsAtEveryCut", func(t *testing.T) {
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
		t.Run("WithLiteralsAndEscapesWithinTheBytesAtEveryCut", func(t *testing.T) {
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
		t.Run("SayingWhetherAnObjectOrAnArrayWasCut", func(t *testing.T) {
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
		t.Run("OfARecordCutAfterItsOpeningBraceAlone", func(t *testing.T) {
			for _, cut := range []string{`{`, `[`, `[{`, `[[`, `{"data":[`, `{"data":[{`, `{"data":[{"a":{`, `{"data":[{"a":[`, `{"a":{`, `{"a":[`} {
				_, err := DecodePage("/r/", []byte(cut))
				if err == nil || !strings.HasSuffix(err.Error(), fmt.Sprintf("at offset %d", len(cut))) {
					t.Errorf("DecodePage(%q) = %v; want malformed JSON at offset %d", cut, err, len(cut))
				}
			}
		})
	})

	// The scanner bounds nesting at 10,000 levels, as encoding/json does, and
	// a level counts while it is open only: a page of any number of records,
	// each nested, decodes.
	t.Run("BoundsNestingAt10000Levels", func(t *testing.T) {
		nested := func(n int) string { return strings.Repeat(`[`, n-1) + `{"a":1}` + strings.Repeat(`]`, n-1) }
		t.Run("APageNested10000DeepDecodes", func(t *testing.T) {
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
		t.Run("OneLevelDeeperIsRefusedAsNestedTooDeeply", func(t *testing.T) {
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
			"InData":       `{"ok":true,"data":[` + strings.Repeat(rec+",", many-1) + rec + `]}`,
			"InResults":    `{"count":10001,"next":null,"results":[` + strings.Repeat(rec+",", many-1) + rec + `]}`,
			"AsBareArrays": `[` + strings.Repeat(`[[{"a":{}}]],`, many-1) + `[[{"a":{}}]]]`,
		} {
			t.Run("APageOf10001NestedRecords"+name+"Decodes", func(t *testing.T) {
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
	})

	// Values that sit on a boundary of a rule of the scanner (a surrogate
	// range's first and last code, a literal that ends the input, an empty
	// key, an escape cut short) are read as encoding/json reads them.
	t.Run("ReadsTheEdgesOfItsRulesAsEncodingJSONDoes", func(t *testing.T) {
		t.Run("ASurrogateIsLoneUnlessAHighOneIsFollowedByALowOne", func(t *testing.T) {
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
		t.Run("ALiteralThatEndsTheInputIsReadAndAUEscapeTakesHexDigitsOnly", func(t *testing.T) {
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
		t.Run("AFractionsFirstDigit1Or9CountsTowardTheIntegerDigits", func(t *testing.T) {
			for num, want := range map[string]int{`0.1e5`: 5, `0.9e5`: 5, `0.01e5`: 4, `0.05e3`: 2} {
				st, err := scanStats([]byte(num))
				if err != nil || st.IntDigits != want {
					t.Errorf("%s: IntDigits %d (%v), want %d", num, st.IntDigits, err, want)
				}
			}
		})
		t.Run("AnEmptyKeyIsAKey", func(t *testing.T) {
			r, err := ParseRecord([]byte(`{"":1,"a":2,"":3}`))
			if err != nil {
				t.Fatal(err)
			}
			if got := fieldsOf(r); got != `""=3;"a"=2;` {
				t.Errorf("fields %s, want the empty key once, last value", got)
			}
		})
		t.Run("AnEscapeCutShortIsTheEndOfTheString", func(t *testing.T) {
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
	})
}
