package erp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// TestValueStats documents ValueStats: the facts the scanner gathers about
// each record. Not parallel: AreGatheredWithoutAllocating counts the process's
// allocations.
func TestValueStats(t *testing.T) {
	t.Run("AreTheSameFromParseRecordAndDecodePage", func(t *testing.T) {
		const ceiling = statCeiling
		for _, tt := range []struct {
			name, rec string
			want      ValueStats
		}{
			{"Plain", `{"a":"x","b":true,"c":null}`, ValueStats{Depth: 1}},
			{"Empty", `{}`, ValueStats{Depth: 1}},

			// \u0000, in values and keys, but not an escaped backslash.
			{"NULValue", `{"a":"x\u0000y"}`, ValueStats{NULEscape: true, Depth: 1}},
			{"NULKey", `{"a\u0000":1}`, ValueStats{NULEscape: true, Depth: 1, IntDigits: 1}},
			{"NULNested", `{"a":[{"b":["\u0000"]}]}`, ValueStats{NULEscape: true, Depth: 4}},
			{"EscapedBackslash", `{"a":"\\u0000"}`, ValueStats{Depth: 1}},
			{"OtherEscapes", `{"a":"\u0001\n\t\"\/\u00e9"}`, ValueStats{Depth: 1}},

			// Surrogates: only a high one escaped right before a low one is whole.
			{"Pair", `{"a":"\ud800\udc00 \uD83D\uDE00 \udbff\udfff"}`, ValueStats{Depth: 1}},
			{"LoneLow", `{"a":"\udc00"}`, ValueStats{LoneSurrogate: true, Depth: 1}},
			{"HighThenText", `{"a":"\ud800x"}`, ValueStats{LoneSurrogate: true, Depth: 1}},
			{"HighAtEnd", `{"a":"\ud800"}`, ValueStats{LoneSurrogate: true, Depth: 1}},
			{"HighThenNonSurrogate", `{"a":"\ud800\u0041"}`, ValueStats{LoneSurrogate: true, Depth: 1}},
			{"HighThenHighThenLow", `{"a":"\ud800\ud800\udc00"}`, ValueStats{LoneSurrogate: true, Depth: 1}},
			{"LowThenHigh", `{"a":"\udc00\ud800"}`, ValueStats{LoneSurrogate: true, Depth: 1}},
			{"HighThenEscapedBackslash", `{"a":"\ud800\\udc00"}`, ValueStats{LoneSurrogate: true, Depth: 1}},
			{"LoneInKey", `{"\udfff":1}`, ValueStats{LoneSurrogate: true, Depth: 1, IntDigits: 1}},
			{"PairInKey", `{"\ud83d\ude00":1}`, ValueStats{Depth: 1, IntDigits: 1}},

			// Bytes that are not UTF-8, in values and keys; valid sequences pass.
			{"ValidUTF8", "{\"é\":\"日本 \U0001F600 \u00a0\"}", ValueStats{Depth: 1}},
			{"BadByte", "{\"a\":\"x\xffy\"}", ValueStats{InvalidUTF8: true, Depth: 1}},
			{"BadKey", "{\"\xc3\":1}", ValueStats{InvalidUTF8: true, Depth: 1, IntDigits: 1}},
			{"SurrogateAsUTF8", "{\"a\":\"\xed\xa0\x80\"}", ValueStats{InvalidUTF8: true, Depth: 1}},
			{"Overlong", "{\"a\":\"\xc0\xaf\"}", ValueStats{InvalidUTF8: true, Depth: 1}},
			{"BeyondU10FFFF", "{\"a\":\"\xf4\x90\x80\x80\"}", ValueStats{InvalidUTF8: true, Depth: 1}},
			{"CutAtTheQuote", "{\"a\":\"\xe6\x97\"}", ValueStats{InvalidUTF8: true, Depth: 1}},
			{"NestedBad", "{\"a\":[[\"\x80\"]]}", ValueStats{InvalidUTF8: true, Depth: 3}},

			// Depth: the record is 1.
			{"Array", `{"a":[]}`, ValueStats{Depth: 2}},
			{"NestedArrays", `{"a":[[],[[{}]]],"b":1}`, ValueStats{Depth: 5, IntDigits: 1}},
			{"NestedObjects", `{"a":{"b":{"c":{}}}}`, ValueStats{Depth: 4}},

			// Numbers; strings that look like numbers do not count.
			{"Integer", `{"a":123}`, ValueStats{Depth: 1, IntDigits: 3}},
			{"Negative", `{"a":-98765}`, ValueStats{Depth: 1, IntDigits: 5}},
			{"Zero", `{"a":0}`, ValueStats{Depth: 1}},
			{"NegativeZeroFraction", `{"a":-0.0}`, ValueStats{Depth: 1, FracDigits: 1}},
			{"TrailingZeros", `{"a":1.50}`, ValueStats{Depth: 1, IntDigits: 1, FracDigits: 2}},
			{"Exponent", `{"a":1e5}`, ValueStats{Depth: 1, IntDigits: 6}},
			{"EAndPlus", `{"a":1E+3}`, ValueStats{Depth: 1, IntDigits: 4}},
			{"FractionRaised", `{"a":0.05e3}`, ValueStats{Depth: 1, IntDigits: 2}},
			{"FractionRaisedLess", `{"a":-0.0012e2}`, ValueStats{Depth: 1, FracDigits: 2}},
			{"LeadingFractionZeros", `{"a":0.001}`, ValueStats{Depth: 1, FracDigits: 3}},
			{"Mixed", `{"a":123.456e1}`, ValueStats{Depth: 1, IntDigits: 4, FracDigits: 2}},
			{"Lowered", `{"a":10.5e-1}`, ValueStats{Depth: 1, IntDigits: 1, FracDigits: 2}},
			{"NegativeExponent", `{"a":1e-5}`, ValueStats{Depth: 1, FracDigits: 5}},
			{"ZeroWithScale", `{"a":0e-7}`, ValueStats{Depth: 1, FracDigits: 7}},
			{"ZeroRaised", `{"a":0.00e5}`, ValueStats{Depth: 1}},
			{"Money", `{"a":123456789012345678.123456}`, ValueStats{Depth: 1, IntDigits: 18, FracDigits: 6}},
			{"PostgresIntegerLimit", `{"a":1e131071}`, ValueStats{Depth: 1, IntDigits: 131072}},
			{"OverPostgresIntegerLimit", `{"a":1e131072}`, ValueStats{Depth: 1, IntDigits: 131073}},
			{"OverPostgresScale", `{"a":0e-999999}`, ValueStats{Depth: 1, FracDigits: 999999}},
			{"HugeExponent", `{"a":1e999999999999}`, ValueStats{Depth: 1, IntDigits: ceiling}},
			{"HugeExponentDigits", `{"a":1e` + strings.Repeat("9", 100) + `}`, ValueStats{Depth: 1, IntDigits: ceiling}},
			{"HugeNegativeExponent", `{"a":1e-999999999999}`, ValueStats{Depth: 1, FracDigits: ceiling}},
			{"HugeExponentOfZero", `{"a":0e999999999999}`, ValueStats{Depth: 1}},
			{"MaxOverTheRecord", `{"a":1.5,"b":12345,"c":[0.001,{"d":7e2}]}`, ValueStats{Depth: 3, IntDigits: 5, FracDigits: 3}},
			{"NumbersInStrings", `{"a":"1e999999","b":"0.0000001"}`, ValueStats{Depth: 1}},

			{"Everything", "{\"\\u0000\":[\"\\udc00\",\"\xff\",[1e3,0.25]]}",
				ValueStats{InvalidUTF8: true, NULEscape: true, LoneSurrogate: true, Depth: 3, IntDigits: 4, FracDigits: 2}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r, err := ParseRecord(json.RawMessage(tt.rec))
				if err != nil {
					t.Fatalf("ParseRecord(%q): %v", tt.rec, err)
				}
				if got := r.Stats(); got != tt.want {
					t.Errorf("ParseRecord(%q).Stats() = %+v\nwant %+v", tt.rec, got, tt.want)
				}
				// The page pass measures the same, in every envelope.
				for _, body := range []string{"[" + tt.rec + "]", `{"ok":true,"data":[{},` + tt.rec + `]}`, `{"count":1,"results":[` + tt.rec + `]}`} {
					p, err := DecodePage("/r/", []byte(body))
					if err != nil {
						t.Fatalf("DecodePage(%q): %v", body, err)
					}
					if got := p.Parsed[len(p.Parsed)-1].Stats(); got != tt.want {
						t.Errorf("DecodePage(%q) record stats = %+v\nwant %+v", body, got, tt.want)
					}
				}
			})
		}
	})

	// Each record of a page has its own facts: nothing carries over from the
	// record before, or from the envelope around the list.
	t.Run("AreEachRecordsOwn", func(t *testing.T) {
		body := `{"note":"\u0000\udc00 1e99","x":1e99,"y":[[[[]]]],"data":[` +
			`{"a":"\u0000","n":1.25},` +
			`{"b":1},` +
			`{"c":[1e3]},` +
			"\"\xff\\ud800\"," +
			`7.5,` +
			`{"d":{"e":["\udc00"]}}` +
			`],"z":"\u0000"}`
		p, err := DecodePage("/r/", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		want := []ValueStats{
			{NULEscape: true, Depth: 1, IntDigits: 1, FracDigits: 2},
			{Depth: 1, IntDigits: 1},
			{Depth: 2, IntDigits: 4},
			{InvalidUTF8: true, LoneSurrogate: true}, // not an object: depth 0
			{IntDigits: 1, FracDigits: 1},
			{LoneSurrogate: true, Depth: 3},
		}
		if len(p.Parsed) != len(want) {
			t.Fatalf("%d records, want %d", len(p.Parsed), len(want))
		}
		for i, w := range want {
			if got := p.Parsed[i].Stats(); got != w {
				t.Errorf("record %d %s: stats %+v, want %+v", i, p.Records[i], got, w)
			}
		}
	})

	// Gathering the facts of a page costs no allocation.
	t.Run("AreGatheredWithoutAllocating", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("[")
		for i := range 100 {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`{"id":` + strconv.Itoa(i) + `,"n":"é\u00e9\ud83d\ude00","total":123.45e-1,"lines":[{"q":1},{"q":2}],"note":"\u0000\udc00"}`)
		}
		b.WriteString("]")
		body := []byte(b.String())
		// One page reused, not the pool, which the race detector makes drop
		// pages at random.
		p := &Page{}
		allocs := testing.AllocsPerRun(20, func() {
			p.reset()
			if err := decodePage("/r/", body, p); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 0 {
			t.Errorf("%v allocations per page of 100 records, want 0", allocs)
		}
	})

	t.Run("AgreeWithTheSlowReference", func(t *testing.T) {
		// The reference agrees with the table above, so the fuzz targets
		// hold the scanner to the same definitions.
		for _, rec := range []string{
			`{"a":-0.0012e2,"b":1E+3,"c":0e-7,"d":1.50,"e":[[0.05e3]]}`,
			`{"a\u0000":"\ud800\udc00","b":"\ud800x"}`,
			"{\"\xff\":[\"\\u0061\"]}",
		} {
			got, err := scanStats([]byte(rec))
			if err != nil {
				t.Fatal(err)
			}
			checkStats(t, []byte(rec), got)
		}
	})
}

// ---- a slow reference, for the fuzz targets -------------------------------------

// refStats computes what ValueStats should say of one valid JSON value
// in another way: strings, numbers and nesting as encoding/json decodes
// them, and the raw strings walked separately. ok is false when the
// numbers are out of the reference's reach (exponents beyond what
// shopspring/decimal parses); the other facts are then still set.
func refStats(t *testing.T, b []byte) (want ValueStats, numbersOK bool) {
	t.Helper()
	want.InvalidUTF8 = !utf8.Valid(b)
	numbersOK = true
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	depth := 0
	var decoded []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("test bug: %q: %v", b, err)
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				depth++
				want.Depth = max(want.Depth, depth)
			} else {
				depth--
			}
		case string:
			decoded = append(decoded, v)
		case json.Number:
			intDigits, fracDigits, ok := refDigits(string(v))
			if !ok {
				numbersOK = false
				continue
			}
			want.IntDigits = max(want.IntDigits, intDigits)
			want.FracDigits = max(want.FracDigits, fracDigits)
		}
	}
	// A decoded string holds NUL only through \u0000: a raw control
	// character is not valid JSON.
	for _, s := range decoded {
		want.NULEscape = want.NULEscape || strings.ContainsRune(s, 0)
	}
	want.LoneSurrogate = refLoneSurrogate(b)
	// Where nothing else can make one, encoding/json's U+FFFD marks a
	// lone surrogate: check the walk above against it.
	if utf8.Valid(b) && !bytes.ContainsRune(b, utf8.RuneError) && !bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`)) {
		replaced := false
		for _, s := range decoded {
			replaced = replaced || strings.ContainsRune(s, utf8.RuneError)
		}
		if replaced != want.LoneSurrogate {
			t.Fatalf("test bug: %q: encoding/json replaced a surrogate: %v, the walk found one: %v", b, replaced, want.LoneSurrogate)
		}
	}
	return want, numbersOK
}

// refDigits counts a number's digits through shopspring/decimal: a
// coefficient of n digits at exponent e has n+e integer digits and a scale
// of -e.
func refDigits(lit string) (intDigits, fracDigits int, ok bool) {
	mant, exp, _ := strings.Cut(strings.ToLower(lit), "e")
	if e, err := strconv.Atoi(exp); exp != "" && (err != nil || e > 1e6 || e < -1e6) {
		return 0, 0, false
	}
	if len(mant) > 1e5 {
		return 0, 0, false
	}
	d, err := decimal.NewFromString(lit)
	if err != nil {
		return 0, 0, false
	}
	coef := d.Coefficient()
	if coef.Sign() != 0 {
		intDigits = max(0, len(coef.Text(10))-boolInt(coef.Sign() < 0)+int(d.Exponent()))
	}
	return intDigits, max(0, -int(d.Exponent())), true
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// refLoneSurrogate walks the raw strings of valid JSON and decodes their
// \u escapes as UTF-16, the way encoding/json pairs them.
func refLoneSurrogate(b []byte) bool {
	in := false
	var units []uint16 // the \u escapes of one run, in order
	lone := func() bool {
		for i := 0; i < len(units); i++ {
			if !utf16.IsSurrogate(rune(units[i])) {
				continue
			}
			if i+1 < len(units) && utf16.DecodeRune(rune(units[i]), rune(units[i+1])) != utf8.RuneError {
				i++
				continue
			}
			return true
		}
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
			if lone() {
				return true
			}
			units = units[:0]
		case c == '\\' && b[i+1] == 'u':
			u, _ := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
			units = append(units, uint16(u))
			i += 5
		case c == '\\':
			// Any other escape ends a run of \u escapes.
			if lone() {
				return true
			}
			units = units[:0]
			i++
		default:
			if lone() {
				return true
			}
			units = units[:0]
		}
	}
	return false
}

// scanStats scans one JSON value and returns its facts.
func scanStats(b []byte) (ValueStats, error) {
	s := scanner{b: b}
	s.ws()
	s.mark()
	if err := s.value(); err != nil {
		return ValueStats{}, err
	}
	if err := s.end(); err != nil {
		return ValueStats{}, err
	}
	return s.stats(), nil
}

// checkStats compares the scanner's facts of valid JSON b with the
// reference.
func checkStats(t *testing.T, b []byte, got ValueStats) {
	t.Helper()
	want, numbersOK := refStats(t, b)
	if !numbersOK {
		got.IntDigits, got.FracDigits = 0, 0
		want.IntDigits, want.FracDigits = 0, 0
	}
	if got != want {
		t.Fatalf("stats of %q = %+v\nreference %+v", b, got, want)
	}
}
