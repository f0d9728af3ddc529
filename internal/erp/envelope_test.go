package erp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// exactRecord holds a number float64 cannot represent and whitespace inside
// the object: both must survive DecodePage byte for byte.
const exactRecord = `{"id": 1,  "total_bc": 123456789012345678.123456, "note":"a\u00e9 b"}`

const recordJSON = `{
	"s": "hello \"world\"",
	"n": 42,
	"big": 123456789012345678.123456,
	"money_s": "-12.50",
	"money_plus": "+1.10",
	"money_bad": "12,50",
	"money_exp": 1e5,
	"money_exp_s": "1e5",
	"money_nan": "NaN",
	"money_empty": "",
	"null": null,
	"t": true,
	"f": false,
	"obj": {"a": 1},
	"arr": [1, 2],
	"bool_s": "true"
}`

func testRecord(t *testing.T) Record {
	t.Helper()
	r, err := ParseRecord(json.RawMessage(recordJSON))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDecodePage documents DecodePage: a list answer's records, kept byte for
// byte, and the paging signals of its envelope; an answer that is not a list
// envelope is an error naming the route.
func TestDecodePage(t *testing.T) {
	t.Run("KeepsTheRecordsOfEveryEnvelopeByteForByte", func(t *testing.T) {
		tests := []struct {
			name      string
			body      string
			envelope  string
			records   []string
			hasNext   bool
			cursor    string
			next      string
			total     int64
			wantTotal bool
		}{
			{
				name:     "BareArray",
				body:     `[{"id":1},{"id":2}]`,
				envelope: "array",
				records:  []string{`{"id":1}`, `{"id":2}`},
			},
			{
				name:     "BareArrayWithSurroundingWhitespace",
				body:     "\n  [ {\"id\":1} ]\n",
				envelope: "array",
				records:  []string{`{"id":1}`},
			},
			{
				name:     "EmptyBareArray",
				body:     `[]`,
				envelope: "array",
			},
			{
				name:     "OKData",
				body:     `{"ok":true,"data":[{"id":1},{"id":2},{"id":3}]}`,
				envelope: "data",
				records:  []string{`{"id":1}`, `{"id":2}`, `{"id":3}`},
			},
			{
				name:     "DataWithoutOK",
				body:     `{"data":[{"id":9}]}`,
				envelope: "data",
				records:  []string{`{"id":9}`},
			},
			{
				name:     "OKDataEmpty",
				body:     `{"ok":true,"data":[]}`,
				envelope: "data",
			},
			{
				name:     "CursorPaginationStringCursor",
				body:     `{"ok":true,"data":[{"id":1}],"pagination":{"has_next":true,"next_cursor":"ab+/c=="}}`,
				envelope: "data",
				records:  []string{`{"id":1}`},
				hasNext:  true,
				cursor:   "ab+/c==",
			},
			{
				name:     "CursorPaginationNumericCursor",
				body:     `{"ok":true,"data":[{"id":1}],"pagination":{"has_next":true,"next_cursor":12345678901234567890}}`,
				envelope: "data",
				records:  []string{`{"id":1}`},
				hasNext:  true,
				cursor:   "12345678901234567890",
			},
			{
				name:     "CursorPaginationLastPageNullCursor",
				body:     `{"ok":true,"data":[{"id":1}],"pagination":{"has_next":false,"next_cursor":null}}`,
				envelope: "data",
				records:  []string{`{"id":1}`},
			},
			{
				name:     "CursorPaginationHasNextNull",
				body:     `{"ok":true,"data":[],"pagination":{"has_next":null}}`,
				envelope: "data",
			},
			{
				name:     "DRFWithNext",
				body:     `{"count":3,"next":"https://erp.example.com/x/?page=2","previous":null,"results":[{"id":1},{"id":2}]}`,
				envelope: "results",
				records:  []string{`{"id":1}`, `{"id":2}`},
				next:     "https://erp.example.com/x/?page=2",
			},
			{
				name:     "DRFLastPage",
				body:     `{"count":3,"next":null,"previous":"https://erp.example.com/x/?page=1","results":[{"id":3}]}`,
				envelope: "results",
				records:  []string{`{"id":3}`},
			},
			{
				name:      "DataTables",
				body:      `{"draw":1,"recordsTotal":57,"recordsFiltered":57,"data":[{"id":1},{"id":2}]}`,
				envelope:  "datatables",
				records:   []string{`{"id":1}`, `{"id":2}`},
				total:     57,
				wantTotal: true,
			},
			{
				name:      "DataTablesTotalAsString",
				body:      `{"draw":"3","recordsTotal":"4","recordsFiltered":"4","data":[]}`,
				envelope:  "datatables",
				total:     4,
				wantTotal: true,
			},
			{
				name:     "DataTablesWithoutRecordsTotal",
				body:     `{"draw":1,"data":[{"id":1}]}`,
				envelope: "datatables",
				records:  []string{`{"id":1}`},
			},
			{
				name:     "ExactBytesInArray",
				body:     "[" + exactRecord + "]",
				envelope: "array",
				records:  []string{exactRecord},
			},
			{
				name:     "ExactBytesInData",
				body:     `{"ok":true,"data":[` + exactRecord + `, 123456789012345678.123456]}`,
				envelope: "data",
				records:  []string{exactRecord, `123456789012345678.123456`},
			},
			{
				name:     "ExactBytesInResults",
				body:     `{"next":null,"results":[` + exactRecord + `]}`,
				envelope: "results",
				records:  []string{exactRecord},
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				p, err := DecodePage("/r/", []byte(tt.body))
				if err != nil {
					t.Fatalf("DecodePage: %v", err)
				}
				if p.Envelope != tt.envelope {
					t.Errorf("Envelope = %q, want %q", p.Envelope, tt.envelope)
				}
				if len(p.Records) != len(tt.records) {
					t.Fatalf("got %d records, want %d", len(p.Records), len(tt.records))
				}
				for i, r := range p.Records {
					if string(r) != tt.records[i] {
						t.Errorf("record %d = %q, want %q (bytes must be kept)", i, r, tt.records[i])
					}
				}
				if p.HasNext != tt.hasNext || p.NextCursor != tt.cursor {
					t.Errorf("HasNext, NextCursor = %v, %q; want %v, %q", p.HasNext, p.NextCursor, tt.hasNext, tt.cursor)
				}
				if p.Next != tt.next {
					t.Errorf("Next = %q, want %q", p.Next, tt.next)
				}
				wantTotal := int64(-1)
				if tt.wantTotal {
					wantTotal = tt.total
				}
				if p.RecordsTotal != wantTotal {
					t.Errorf("RecordsTotal = %d, want %d", p.RecordsTotal, wantTotal)
				}
			})
		}
	})

	t.Run("KeepsMoneyExact", func(t *testing.T) {
		body := `{"ok":true,"data":[{"id":1,"total_bc":123456789012345678.123456,"s":"123456789012345678.123456"}]}`
		p, err := DecodePage("/sales/api/invoices/list/", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := ParseRecord(p.Records[0])
		if err != nil {
			t.Fatal(err)
		}
		want := decimal.RequireFromString("123456789012345678.123456")
		for _, f := range []string{"total_bc", "s"} {
			d, ok, err := rec.Money(f)
			if err != nil || !ok {
				t.Fatalf("Money(%s) = %v, %v, %v", f, d, ok, err)
			}
			if !d.Equal(want) || d.String() != "123456789012345678.123456" {
				t.Errorf("Money(%s) = %s, want %s", f, d, want)
			}
		}
	})

	t.Run("RefusesAnAnswerThatIsNotAListEnvelope", func(t *testing.T) {
		tests := []struct {
			name     string
			body     string
			envErr   bool     // want *EnvelopeError
			contains []string // substrings of the error text
		}{
			{
				name:     "OKFalseWithError",
				body:     `{"ok":false,"error":"invalid cursor"}`,
				envErr:   true,
				contains: []string{"/r/", "ok=false", "invalid cursor"},
			},
			{
				name:     "OKFalseWithMessageAndData",
				body:     `{"ok":false,"message":"permission denied","data":[]}`,
				envErr:   true,
				contains: []string{"permission denied"},
			},
			{
				name:     "OKFalseWithDetail",
				body:     `{"ok":false,"detail":"nope"}`,
				envErr:   true,
				contains: []string{"nope"},
			},
			{
				name:     "OKFalseWithoutMessage",
				body:     `{"ok":false}`,
				envErr:   true,
				contains: []string{"ok=false", "(no message)"},
			},
			{
				name:     "UnknownEnvelope",
				body:     `{"zeta":1,"items":[{"id":1}],"alpha":true,"ok":true}`,
				envErr:   true,
				contains: []string{"/r/", "unknown list envelope", "top-level keys: alpha, items, ok, zeta"},
			},
			{
				// An empty object is an envelope without a list, read to its
				// end: not malformed.
				name:     "EmptyObject",
				body:     ` { } `,
				envErr:   true,
				contains: []string{"/r/", "unknown list envelope"},
			},
			{
				name:     "DataIsAnObject",
				body:     `{"ok":true,"data":{"id":1}}`,
				envErr:   true,
				contains: []string{"/r/", "data, ok"},
			},
			{
				name:     "ScalarBody",
				body:     `"hello"`,
				envErr:   true,
				contains: []string{"/r/", "neither a JSON array nor an object"},
			},
			{
				name:     "HTMLBody",
				body:     `<html><body>Bad gateway</body></html>`,
				envErr:   true,
				contains: []string{"/r/", "Bad gateway"},
			},
			{
				name:     "EmptyBody",
				body:     " \n",
				envErr:   true,
				contains: []string{"/r/", "empty body"},
			},

			{
				name:     "HasNextNotABoolean",
				body:     `{"ok":true,"data":[],"pagination":{"has_next":"yes","next_cursor":"x"}}`,
				envErr:   true,
				contains: []string{"has_next is not a boolean"},
			},
			{
				name:     "RecordsTotalNotAnInteger",
				body:     `{"draw":1,"recordsTotal":1.5,"data":[]}`,
				envErr:   true,
				contains: []string{"recordsTotal is not an integer"},
			},
			{
				name:     "MalformedArray",
				body:     `[{"id":1},`,
				contains: []string{"/r/", "malformed JSON"},
			},
			{
				name:     "MalformedObject",
				body:     `{"ok":true,"data":[{"id":1}]`,
				contains: []string{"/r/", "malformed JSON"},
			},
			{
				name:     "TrailingGarbageAfterArray",
				body:     `[{"id":1}] x`,
				contains: []string{"malformed JSON"},
			},
			{
				name:     "TrailingGarbageAfterObject",
				body:     `{"data":[]}{"data":[]}`,
				contains: []string{"malformed JSON"},
			},
			{
				name:     "InvalidNumberInRecord",
				body:     `{"data":[{"total": 12,50}]}`,
				contains: []string{"malformed JSON"},
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				p, err := DecodePage("/r/", []byte(tt.body))
				if err == nil {
					t.Fatalf("DecodePage succeeded (%+v), want error", p)
				}
				if p != nil {
					t.Errorf("page = %+v alongside error", p)
				}
				var ee *EnvelopeError
				if got := errors.As(err, &ee); got != tt.envErr {
					t.Errorf("errors.As(*EnvelopeError) = %v, want %v (err %v)", got, tt.envErr, err)
				}
				for _, s := range tt.contains {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
			})
		}
	})

	t.Run("NamesAnUnknownEnvelopesKeysSorted", func(t *testing.T) {
		_, err := DecodePage("/accounts/api/cashboxes/", []byte(`{"b":1,"c":2,"a":3}`))
		var ee *EnvelopeError
		if !errors.As(err, &ee) {
			t.Fatalf("err = %v, want *EnvelopeError", err)
		}
		if ee.Route != "/accounts/api/cashboxes/" {
			t.Errorf("Route = %q", ee.Route)
		}
		if strings.Join(ee.Keys, ",") != "a,b,c" {
			t.Errorf("Keys = %v, want sorted a,b,c", ee.Keys)
		}
		want := "GET /accounts/api/cashboxes/: unknown list envelope: no data or results array (top-level keys: a, b, c)"
		if err.Error() != want {
			t.Errorf("Error() = %q\nwant      %q", err, want)
		}
	})

	// An error with no keys to list names the route and the reason only.
	t.Run("NamesOnlyTheRouteAndTheReasonOfAnEmptyBody", func(t *testing.T) {
		_, err := DecodePage("/r/", []byte(" \n"))
		if err == nil || err.Error() != "GET /r/: empty body" {
			t.Errorf("err = %v, want exactly %q", err, "GET /r/: empty body")
		}
	})
}

// TestRecord documents ParseRecord and Record: a record's fields, read as
// text, exact money or a boolean, or an error naming the field.
func TestRecord(t *testing.T) {
	t.Run("IsParsedOnlyFromAnObject", func(t *testing.T) {
		r, err := ParseRecord(json.RawMessage(` {"a":1,"b":"x"}`))
		a, _ := r.Get("a")
		b, _ := r.Get("b")
		if err != nil || r.Len() != 2 || string(a) != "1" || string(b) != `"x"` {
			t.Fatalf("ParseRecord = %v, %v", r, err)
		}
		for _, raw := range []string{`[1]`, `1`, `"s"`, `null`, `true`, ``} {
			if _, err := ParseRecord(json.RawMessage(raw)); err == nil {
				t.Errorf("ParseRecord(%q) succeeded, want error", raw)
			} else if !strings.Contains(err.Error(), "not an object") {
				t.Errorf("ParseRecord(%q) error %q does not say 'not an object'", raw, err)
			}
		}
		if _, err := ParseRecord(json.RawMessage(`{"a":`)); err == nil {
			t.Error("ParseRecord of truncated object succeeded")
		}
	})

	t.Run("ReadsAFieldAsText", func(t *testing.T) {
		r := testRecord(t)
		tests := []struct {
			field   string
			want    string
			ok      bool
			wantErr bool
		}{
			{"s", `hello "world"`, true, false},
			{"n", "42", true, false},
			{"big", "123456789012345678.123456", true, false},
			{"money_s", "-12.50", true, false},
			{"absent", "", false, false},
			{"null", "", false, false},
			{"t", "", false, true},
			{"obj", "", false, true},
			{"arr", "", false, true},
		}
		for _, tt := range tests {
			got, ok, err := r.Text(tt.field)
			if got != tt.want || ok != tt.ok || (err != nil) != tt.wantErr {
				t.Errorf("Text(%q) = %q, %v, %v; want %q, %v, err=%v", tt.field, got, ok, err, tt.want, tt.ok, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.field) {
				t.Errorf("Text(%q) error %q does not name the field", tt.field, err)
			}
		}
	})

	t.Run("ReadsAFieldAsExactMoney", func(t *testing.T) {
		r := testRecord(t)
		tests := []struct {
			field   string
			want    string // decimal String(); "" when !ok
			ok      bool
			wantErr bool
		}{
			{"n", "42", true, false},
			{"big", "123456789012345678.123456", true, false},
			{"money_s", "-12.5", true, false},
			{"money_plus", "1.1", true, false},
			{"absent", "", false, false},
			{"null", "", false, false},
			{"s", "", false, true},
			{"money_bad", "", false, true},
			{"money_exp", "", false, true},
			{"money_exp_s", "", false, true},
			{"money_nan", "", false, true},
			{"money_empty", "", false, true},
			{"t", "", false, true},
			{"obj", "", false, true},
			{"arr", "", false, true},
		}
		for _, tt := range tests {
			got, ok, err := r.Money(tt.field)
			if ok != tt.ok || (err != nil) != tt.wantErr {
				t.Errorf("Money(%q) = %s, %v, %v; want ok=%v err=%v", tt.field, got, ok, err, tt.ok, tt.wantErr)
				continue
			}
			if tt.ok && !got.Equal(decimal.RequireFromString(tt.want)) {
				t.Errorf("Money(%q) = %s, want %s", tt.field, got, tt.want)
			}
			if err != nil && !strings.Contains(err.Error(), tt.field) {
				t.Errorf("Money(%q) error %q does not name the field", tt.field, err)
			}
		}
		// Scale survives: "-12.50" keeps its two fractional digits.
		d, _, _ := r.Money("money_s")
		if d.Exponent() != -2 || d.StringFixed(2) != "-12.50" {
			t.Errorf("Money(money_s) = %s exponent %d, want exponent -2", d, d.Exponent())
		}
	})

	t.Run("ReadsOnlyABooleanAsABool", func(t *testing.T) {
		r := testRecord(t)
		tests := []struct {
			field       string
			want, ok    bool
			wantErr     bool
			errContains string
		}{
			{"t", true, true, false, ""},
			{"f", false, true, false, ""},
			{"absent", false, false, false, ""},
			{"null", false, false, false, ""},
			{"bool_s", false, false, true, "string"},
			{"n", false, false, true, "number"},
			{"obj", false, false, true, "object"},
		}
		for _, tt := range tests {
			got, ok, err := r.Bool(tt.field)
			if got != tt.want || ok != tt.ok || (err != nil) != tt.wantErr {
				t.Errorf("Bool(%q) = %v, %v, %v; want %v, %v, err=%v", tt.field, got, ok, err, tt.want, tt.ok, tt.wantErr)
			}
			if err != nil && (!strings.Contains(err.Error(), tt.field) || !strings.Contains(err.Error(), tt.errContains)) {
				t.Errorf("Bool(%q) error %q should name the field and %q", tt.field, err, tt.errContains)
			}
		}
	})
}

// TestKind documents Kind: the name of a JSON value's kind, as errors give it.
func TestKind(t *testing.T) {
	t.Run("NamesTheKindOfAValue", func(t *testing.T) {
		for raw, want := range map[string]string{
			``: "absent", `  `: "absent", `{}`: "object", ` [1]`: "array", `"x"`: "string",
			`true`: "boolean", `false`: "boolean", `null`: "null", `-1`: "number", `0.5`: "number",
		} {
			if got := Kind(json.RawMessage(raw)); got != want {
				t.Errorf("Kind(%q) = %q, want %q", raw, got, want)
			}
		}
	})
}

// TestParseMoney documents ParseMoney: money is a decimal literal, read
// exactly and with its scale.
func TestParseMoney(t *testing.T) {
	t.Run("ReadsADecimalLiteralKeepingItsScale", func(t *testing.T) {
		tests := []struct {
			in       string
			str      string // decimal String()
			exponent int32
		}{
			{"12", "12", 0},
			{"-0.5", "-0.5", -1},
			{"0", "0", 0},
			{"007", "7", 0},
			{"123456789012345678.123456", "123456789012345678.123456", -6},
			{"+1.10", "1.1", -2},
			{"1.", "1", 0},
			{".5", "0.5", -1},
			{"-12.500000", "-12.5", -6},
			{"99999999999999999999999999999999.000000000000000001", "99999999999999999999999999999999.000000000000000001", -18},
		}
		for _, tt := range tests {
			d, err := ParseMoney(tt.in)
			if err != nil {
				t.Errorf("ParseMoney(%q): %v", tt.in, err)
				continue
			}
			if d.String() != tt.str {
				t.Errorf("ParseMoney(%q).String() = %q, want %q", tt.in, d.String(), tt.str)
			}
			if d.Exponent() != tt.exponent {
				t.Errorf("ParseMoney(%q).Exponent() = %d, want %d (scale must be kept)", tt.in, d.Exponent(), tt.exponent)
			}
			if !d.Equal(decimal.RequireFromString(tt.in)) {
				t.Errorf("ParseMoney(%q) = %s, not equal to decimal.RequireFromString", tt.in, d)
			}
		}
	})

	t.Run("RefusesAnythingButADecimalLiteral", func(t *testing.T) {
		for _, in := range []string{
			"", "1e5", "1E5", "1.5e-3", "NaN", "nan", "Inf", "-Inf", "12,50", " 1", "1 ", "1.2.3", ".", "-", "+",
			"--1", "+-1", "0x10", "1_000", "١٢", "12\n", "\t1", "1/2", "$1",
		} {
			if d, err := ParseMoney(in); err == nil {
				t.Errorf("ParseMoney(%q) = %s, want error", in, d)
			} else if !strings.Contains(err.Error(), "not a decimal number") {
				t.Errorf("ParseMoney(%q) error = %q", in, err)
			}
		}
		// A long bad value is truncated in the message.
		long := strings.Repeat("9", 100) + "x"
		_, err := ParseMoney(long)
		if err == nil || strings.Contains(err.Error(), long) {
			t.Errorf("ParseMoney(long) error %v should truncate the value", err)
		}
	})

	// A literal of MaxMoneyLiteral digits, wider than Postgres numeric
	// holds, is still read (numeric's limits are the warehouse's to apply);
	// a longer one is refused before it is parsed, whatever its length: the
	// parse takes the square of it.
	t.Run("RefusesALiteralLongerThanMaxMoneyLiteralUnparsed", func(t *testing.T) {
		widest := strings.Repeat("9", MaxMoneyLiteral)
		if d, err := ParseMoney(widest); err != nil || d.NumDigits() != MaxMoneyLiteral {
			t.Errorf("ParseMoney of %d characters: %v", len(widest), err)
		}
		start := time.Now()
		for _, n := range []int{MaxMoneyLiteral + 1, 64 << 20} {
			_, err := ParseMoney(strings.Repeat("7", n))
			if want := fmt.Sprintf("is a number of %d characters, more than the %d money may have", n, MaxMoneyLiteral); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ParseMoney of %d digits: %v, want %q", n, err, want)
			}
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("refusing took %s: the literal was parsed", d)
		}
	})
}
