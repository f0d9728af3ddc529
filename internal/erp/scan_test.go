package erp

import (
	"encoding/json"
	"hash/maphash"
	"strings"
	"testing"
	"time"
)

// Keys are compared as decoded: "a" and "\u0061" are one key, and the
// last value wins, as with encoding/json.
func TestRepeatedKeysCompareDecoded(t *testing.T) {
	big := string(manyKeys(100))
	big = big[:len(big)-1]
	for _, tt := range []struct {
		name, rec string
		fields    string // fieldsOf the record
	}{
		{"plain", `{"a":1,"b":2,"a":3}`, `"a"=3;"b"=2;`},
		{"escaped after", `{"a":1,"\u0061":2}`, `"a"=2;`},
		{"escaped before", `{"\u0061":1,"b":0,"a":2}`, `"a"=2;"b"=0;`},
		{"both escaped", `{"\u0061":1,"\u0061":2,"\u0041":3}`, `"a"=2;"A"=3;`},
		{"escapes of other kinds", `{"a/b":1,"a\/b":2,"\"":3,"\u0022":4}`, `"a/b"=2;"\""=4;`},
		{"bytes not UTF-8 decode to U+FFFD", "{\"\xff\":1,\"\xfe\":2,\"\\ufffd\":3}", "\"\ufffd\"=3;"},
		{"lone surrogates decode to U+FFFD", `{"\ud800":1,"\udc00":2}`, "\"\ufffd\"=2;"},
		{"many keys", big + `,"k5":"x","\u006b7":"y","k99":"z"}`, ""},
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
}

// TestRepeatedKeysLinear: 40,000 keys took seconds when each key was
// compared with every earlier one.
func TestRepeatedKeysLinear(t *testing.T) {
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
}

// Two keys of one hash (too rare to meet by chance) are still told apart.
func TestRepeatedKeysHashCollision(t *testing.T) {
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
}
