package erp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

func FuzzDecodePage(f *testing.F) {
	for _, seed := range []string{
		`[]`,
		`[{"id":1},{"id":2}]`,
		"[" + exactRecord + "]",
		`{"ok":true,"data":[{"id":1,"total_bc":123456789012345678.123456}]}`,
		`{"ok":true,"data":[],"pagination":{"has_next":true,"next_cursor":"ab+/c=="}}`,
		`{"data":[],"pagination":{"has_next":true}}`,
		`{"ok":true,"data":[{"id":1}],"pagination":{"has_next":true,"next_cursor":42}}`,
		`{"ok":true,"data":[{"id":1}],"pagination":{"has_next":false,"next_cursor":null}}`,
		`{"count":3,"next":"https://erp.example.com/x/?page=2","previous":null,"results":[{"id":1}]}`,
		`{"draw":1,"recordsTotal":57,"recordsFiltered":57,"data":[{"id":"JE-1"}]}`,
		`{"draw":"1","recordsTotal":"57","data":[]}`,
		`{"ok":false,"error":"invalid cursor"}`,
		`{"zeta":1,"items":[]}`,
		`{"ok":true,"data":{"id":1}}`,
		`[{"id":1},`,
		`{"ok":true,"data":[{"id":1}]`,
		`{"data":[{"total": 12,50}]}`,
		`[1] x`,
		`<html>502</html>`,
		``,
		"\xff\xfe[",
		`{"pagination":{"has_next":"yes"},"data":[]}`,
		`{"recordsTotal":1e3,"data":[]}`,
		`{"ok":true,"data":[{"a":"\u0000"},{"b":"\ud800\udc00","c":-0.0012e2},{"d":"\udc00"},"\ud800x",[1E+3]]}`,
		"[{\"\xff\":1,\"a\":[[0e-7]]},{\"a\":1,\"\\u0061\":2}]",
		"[" + string(manyKeys(300)) + "]",
	} {
		f.Add([]byte(seed))
	}
	lister, err := New(Options{BaseURL: "https://erp.example.com"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodePage("/fuzz/", body)
		if err != nil {
			if p != nil {
				t.Fatalf("page %+v returned with error %v", p, err)
			}
			if !strings.Contains(err.Error(), "/fuzz/") {
				t.Fatalf("error %q does not name the route", err)
			}
			return
		}
		switch p.Envelope {
		case "array", "data", "results", "datatables":
		default:
			t.Fatalf("unknown envelope %q", p.Envelope)
		}
		if !json.Valid(body) {
			t.Fatalf("decoded a page from invalid JSON %q", body)
		}
		for i, r := range p.Records {
			if !json.Valid(r) {
				t.Fatalf("record %d %q is not valid JSON", i, r)
			}
			// Records are the bytes received, not a re-encoding.
			if !bytes.Contains(body, r) {
				t.Fatalf("record %d %q is not part of the body", i, r)
			}
			// The fields split during the page pass are those a separate
			// ParseRecord finds.
			want, err := ParseRecord(r)
			if got := p.Parsed[i]; got.IsObject() != (err == nil) {
				t.Fatalf("record %d: parsed as object %v, ParseRecord error %v", i, got.IsObject(), err)
			} else if err == nil && fieldsOf(got) != fieldsOf(want) {
				t.Fatalf("record %d: page fields %q, ParseRecord fields %q", i, fieldsOf(got), fieldsOf(want))
			} else if err == nil && got.Stats() != want.Stats() {
				t.Fatalf("record %d: page stats %+v, ParseRecord stats %+v", i, got.Stats(), want.Stats())
			}
			checkStats(t, r, p.Parsed[i].Stats())
		}
		// What comes after the page is the lister's one rule (follow): it
		// refuses a page it cannot follow, saying why, and follows one
		// that says more exist with the cursor it gave.
		l := lister.List(ListRequest{Path: "/fuzz/", Paging: CursorPaged, PageSize: 50})
		var pe *PagingError
		switch err := l.follow(p); {
		case err != nil:
			if !errors.As(err, &pe) && !strings.Contains(err.Error(), "next link") {
				t.Fatalf("follow: %v, want a *PagingError or a refused next link", err)
			}
		case p.HasNext && (l.Done() || l.Cursor() != p.NextCursor):
			t.Fatalf("has_next with cursor %q followed as done=%v, cursor %q", p.NextCursor, l.Done(), l.Cursor())
		}
		if p.Envelope != "datatables" && p.RecordsTotal != -1 {
			t.Fatalf("RecordsTotal %d outside DataTables", p.RecordsTotal)
		}
	})
}

func FuzzParseMoney(f *testing.F) {
	for _, seed := range []string{
		"12", "-0.5", "123456789012345678.123456", "+1.10", "0", "007", "1.", ".5",
		"", "1e5", "NaN", "12,50", " 1", "1.2.3", ".", "-", "+", "Inf", "0x1p3", "١٢",
		"99999999999999999999999999999999999999.000000000000000000000000000001",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseMoney(s)
		if err != nil {
			return
		}
		// Only plain decimal literals are money: optional sign, digits, at
		// most one dot, at least one digit.
		body := strings.TrimLeft(s, "+-")
		if len(s)-len(body) > 1 || strings.Count(body, ".") > 1 || strings.Trim(body, "0123456789.") != "" || strings.Trim(body, ".") == "" {
			t.Fatalf("ParseMoney(%q) accepted a non-literal", s)
		}
		// Exact: the same value and scale as shopspring's exact parser ...
		want := decimal.RequireFromString(s)
		if !d.Equal(want) || d.Exponent() != want.Exponent() {
			t.Fatalf("ParseMoney(%q) = %s (exp %d), want %s (exp %d)", s, d, d.Exponent(), want, want.Exponent())
		}
		// ... and the digits of the literal, with no float anywhere: the
		// coefficient is the literal without its dot, the exponent minus the
		// number of fractional digits.
		intPart, frac, _ := strings.Cut(body, ".")
		coef, ok := new(big.Int).SetString("0"+intPart+frac, 10)
		if !ok {
			t.Fatalf("test bug: %q", s)
		}
		if strings.HasPrefix(s, "-") {
			coef.Neg(coef)
		}
		if d.Coefficient().Cmp(coef) != 0 || int(d.Exponent()) != -len(frac) {
			t.Fatalf("ParseMoney(%q) = %s×10^%d, want %s×10^%d", s, d.Coefficient(), d.Exponent(), coef, -len(frac))
		}
		// String() re-parses to an equal value.
		back, err := ParseMoney(d.String())
		if err != nil {
			t.Fatalf("ParseMoney(%q).String() = %q does not re-parse: %v", s, d.String(), err)
		}
		if !back.Equal(d) {
			t.Fatalf("ParseMoney(%q) = %s, re-parsed %s", s, d, back)
		}
		if !decimal.RequireFromString(d.String()).Equal(d) {
			t.Fatalf("ParseMoney(%q).String() = %q is not the same value", s, d.String())
		}
	})
}

// FuzzScanMatchesEncodingJSON holds the scanner to encoding/json's idea
// of valid JSON: the page decoder must refuse exactly what it refuses.
func FuzzScanMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,2,{"b":null}]}`, `"\u00e9"`, `1e5`, `-0.5`, `01`, `[1,]`, `{"a":1,}`,
		`"\x"`, "\"\x01\"", `tru`, `1.`, `-`, ` [ 1 , "x" ] `, `{"a":1}x`, "\"\xff\"",
		`"\ud800\udc00"`, `"\ud800\u"`, `"\ud800\udc0"`, `"\ud800\`, `"\u0000"`, `1E+3`, `-0.0012e2`, `1e999999999999`, `0e-7`,
		`{"a":1,"\u0061":2}`, string(manyKeys(200)), "{\"\xc3\":[\"\xed\xa0\x80\"]}", "\"\xe6\x97\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := scanValid(b) == nil
		if want := json.Valid(b); got != want {
			t.Fatalf("scanValid(%q) = %v, json.Valid = %v", b, got, want)
		}
	})
}

// FuzzValueStats holds the facts the scanner gathers about a valid value
// to a slow reference built on encoding/json (see refStats).
func FuzzValueStats(f *testing.F) {
	for _, s := range []string{`{"a":"\u0000"}`, `["\ud800\udc00","\udc00","\ud800x","\ud800\ud800\udc00","\ud800\\udc00"]`,
		`{"\udfff":[[[]]]}`, "{\"\xff\":\"\xc0\xaf\"}", "\"\xf0\x9f\x98\x80 \xf4\x90\x80\x80\"", `"\uFFFD\ud800"`,
		`[-0.0012e2,1E+3,0e-7,1.50,0.05e3,1e131072,0e-999999,1e999999999999,-0.0]`, `{"a":[{"b":[{"c":0.001}]}]}`,
		string(manyKeys(200))} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := scanStats(b)
		if err != nil {
			return
		}
		checkStats(t, b, got)
	})
}

// FuzzParseRecordMatchesEncodingJSON: a record's fields are those of
// encoding/json's map of it, keys decoded and the last of a repeated key
// winning, each key once.
func FuzzParseRecordMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":[2]}`, `{"a":1,"\u0061":2}`, `{"\u0061":1,"a":2,"\u0061":3}`,
		"{\"\xff\":1,\"\xfe\":2,\"\\ufffd\":3}", `{"\ud800":1,"\udc00":2}`, `{"a" : 1 , "a" : { "b" : 2 } }`,
		string(manyKeys(100)), string(manyKeys(100)[:len(manyKeys(100))-1]) + `,"k7":"x","\u006b9":"y"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRecord(b)
		var want map[string]json.RawMessage
		isObject := bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{"))
		if wantErr := json.Unmarshal(b, &want); (err == nil) != (wantErr == nil && isObject) {
			t.Fatalf("ParseRecord(%q) error %v, encoding/json error %v", b, err, wantErr)
		}
		if err != nil {
			return
		}
		if r.Len() != len(want) {
			t.Fatalf("ParseRecord(%q): %d fields, encoding/json %d", b, r.Len(), len(want))
		}
		for i := range r.Len() {
			k, v := r.Field(i)
			if w, ok := want[string(k)]; !ok || !bytes.Equal(v, w) {
				t.Fatalf("ParseRecord(%q): field %q = %s, encoding/json %s (present %v)", b, k, v, w, ok)
			}
			if g, _ := r.Get(string(k)); !bytes.Equal(g, v) {
				t.Fatalf("ParseRecord(%q): Get(%q) = %s, Field = %s", b, k, g, v)
			}
		}
	})
}

func fieldsOf(r Record) string {
	var b strings.Builder
	for i := 0; i < r.Len(); i++ {
		k, v := r.Field(i)
		fmt.Fprintf(&b, "%q=%s;", k, v)
	}
	return b.String()
}

// scanValid reports whether b is one valid JSON value.
func scanValid(b []byte) error {
	s := scanner{b: b}
	s.ws()
	if err := s.value(); err != nil {
		return err
	}
	return s.end()
}
