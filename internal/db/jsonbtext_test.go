package db_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestContentDigest documents the digest a sweep compares a page's rows
// by: Postgres's own text of the jsonb, computed without Postgres.
func TestContentDigest(t *testing.T) {
	t.Parallel()
	pool, _ := testdb.Pool(t)
	ctx := context.Background()
	// pgDigest is what Postgres makes of doc: its jsonb's text, and the
	// sha256 of it, or ok false when it refuses doc.
	pgDigest := func(doc string) (text, digest string, ok bool) {
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT $1::jsonb::text, encode(sha256(convert_to($1::jsonb::text, 'UTF8')), 'hex')`, doc).Scan(&text, &digest)
		return text, digest, err == nil
	}

	t.Run("IsPostgressOnTheShapesRecordsTake", func(t *testing.T) {
		// Keys repeated, out of order and of every length; strings with every
		// escape; numbers with exponents, trailing zeros, signs and zeros;
		// nesting and white space.
		for _, doc := range []string{
			`{}`, `[]`, `{"a":1}`, ` { "b" : [ 1 , 2 ] , "a" : { } } `, `{"a":1,"a":2}`, `{"b":1,"a":2,"b":3,"aa":{"z":1,"y":[]}}`,
			`{"é":1,"e":2,"ee":3,"\u00e9":4}`, `{"k":"\"\\\/\b\f\n\r\t\u0001\u001f\u007f\u00e9\ud83d\ude00"}`,
			`[1,-1,0,-0,0.0,-0.0,1.50,1e2,1E+2,1.50e1,1.5e-3,-2.500E-2,123456789012345678.123456,1e0,0e5,0.000]`,
			`[true,false,null,"",[[]],[{}]]`, `"scalar"`, `42`, `{"id":1001,"total_bc":15114.6,"customer":{"id":264,"name":"Customer 264"}}`,
			`{"a":"x\ty","b":"\u2028","c":"\\u0000 stays text"}`, "{\"tab\":\t\"v\"\r\n}",
		} {
			want, wantDigest, pgOK := pgDigest(doc)
			got, ok := db.ContentDigest([]byte(doc))
			if ok != pgOK || ok && hex.EncodeToString(got[:]) != wantDigest {
				t.Errorf("%s: digest ok %v, Postgres's ok %v (its text %s)", doc, ok, pgOK, want)
			}
		}
	})

	t.Run("IsNoneWherePostgresRefusesTheText", func(t *testing.T) {
		for _, doc := range []string{
			`{"a":"\u0000"}`, `{"a":"\ud83d"}`, `{"a":"\ude00"}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`,
			`{"a":tru}`, `{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":1} x`, "{\"a\":\"\x01\"}", "{\"a\":\"\xff\"}", `{"a":"\x"}`,
		} {
			if _, _, pgOK := pgDigest(doc); pgOK {
				t.Fatalf("%s: Postgres takes it, so it cannot show a refusal", doc)
			}
			if _, ok := db.ContentDigest([]byte(doc)); ok {
				t.Errorf("%s: a digest of a text Postgres refuses", doc)
			}
		}
	})

	t.Run("IsPostgressOnRandomDocuments", func(t *testing.T) {
		// Thousands of documents of the shapes above, drawn at random, against
		// Postgres in one query.
		r := rand.New(rand.NewPCG(29, 1))
		docs := make([]string, 3000)
		for i := range docs {
			docs[i] = randomJSON(r, 0)
		}
		rows, err := pool.Query(ctx, `SELECT d, d::jsonb::text, encode(sha256(convert_to(d::jsonb::text, 'UTF8')), 'hex') FROM unnest($1::text[]) AS u(d)`, docs)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		n, bad := 0, 0
		for rows.Next() {
			var doc, text, digest string
			if err := rows.Scan(&doc, &text, &digest); err != nil {
				t.Fatal(err)
			}
			n++
			got, ok := db.ContentDigest([]byte(doc))
			if !ok || hex.EncodeToString(got[:]) != digest {
				if bad++; bad <= 5 {
					t.Errorf("%s: digest ok %v differs from Postgres's, whose text is %s", doc, ok, text)
				}
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n != len(docs) || bad > 0 {
			t.Errorf("%d of %d documents compared differ", bad, n)
		}
	})
}

// randomJSON draws a JSON document of the shapes ERP records take, with
// the cases where Postgres's text differs from the bytes: repeated keys,
// escapes, numbers written many ways, white space.
func randomJSON(r *rand.Rand, depth int) string {
	space := func() string { return []string{"", "", " ", "\n  ", "\t"}[r.IntN(5)] }
	switch k := r.IntN(10); {
	case depth < 3 && k < 3:
		n := r.IntN(6)
		parts, keys := make([]string, n), make([]string, n)
		for i := range parts {
			keys[i] = randomString(r)
			if i > 0 && r.IntN(4) == 0 {
				keys[i] = keys[r.IntN(i)] // a key repeated, with a value of its own
			}
			parts[i] = space() + keys[i] + space() + ":" + space() + randomJSON(r, depth+1) + space()
		}
		return "{" + strings.Join(parts, ",") + "}"
	case depth < 3 && k < 5:
		n := r.IntN(5)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = space() + randomJSON(r, depth+1) + space()
		}
		return "[" + strings.Join(parts, ",") + "]"
	case k < 7:
		return randomNumber(r)
	case k < 9:
		return randomString(r)
	}
	return []string{"true", "false", "null"}[r.IntN(3)]
}

func randomNumber(r *rand.Rand) string {
	var b strings.Builder
	if r.IntN(3) == 0 {
		b.WriteByte('-')
	}
	if r.IntN(4) == 0 {
		b.WriteByte('0')
	} else {
		fmt.Fprint(&b, r.IntN(1000000)+1)
	}
	if r.IntN(2) == 0 {
		b.WriteByte('.')
		for n := r.IntN(8) + 1; n > 0; n-- {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
	}
	if r.IntN(3) == 0 {
		b.WriteString([]string{"e", "E", "e+", "E-", "e-"}[r.IntN(5)])
		fmt.Fprint(&b, r.IntN(12))
	}
	return b.String()
}

func randomString(r *rand.Rand) string {
	pieces := []string{"a", "b", "id", "total_bc", "é", "\\u00e9", "\\n", "\\t", "\\\"", "\\\\", "\\/", "\\u0001", "\\u001F", "\\ud83d\\ude00",
		"😀", "\\u2028", " ", "x", "branch_id", "\\b", "\\f", "\\r", "\u007f"}
	var b strings.Builder
	b.WriteByte('"')
	for n := r.IntN(5); n > 0; n-- {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	b.WriteByte('"')
	return b.String()
}
