package erp

import (
	"bytes"
	"context"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

// invoicePage is one page of 1000 invoices as the simulator writes them,
// fetched once through the client.
func invoicePage(b *testing.B) []byte {
	b.Helper()
	sim := erpsim.New(erpsim.Options{Username: testUser, Password: testPassword, Invoices: 1000, PageSizeCap: 1000})
	srv := httptest.NewServer(sim)
	defer srv.Close()
	c, err := New(Options{BaseURL: srv.URL, Username: testUser, Password: testPassword})
	if err != nil {
		b.Fatal(err)
	}
	body, err := c.Get(context.Background(), "/sales/api/invoices/list/", url.Values{"page_size": {"1000"}})
	if err != nil {
		b.Fatal(err)
	}
	p, err := DecodePage("/sales/api/invoices/list/", body)
	if err != nil || len(p.Records) != 1000 {
		b.Fatalf("the simulator's page: %d records, %v", len(p.Records), err)
	}
	return body
}

// BenchmarkDecodeInvoicePage is the hot path of a sweep: validating and
// splitting one page of invoices into pooled memory.
func BenchmarkDecodeInvoicePage(b *testing.B) {
	body := invoicePage(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		p := getPage()
		if err := decodePage("/sales/api/invoices/list/", body, p); err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
}

// manyKeys is an object of n distinct keys.
func manyKeys(n int) []byte {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i := range n {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`"k`)
		buf.WriteString(strconv.Itoa(i))
		buf.WriteString(`":`)
		buf.WriteString(strconv.Itoa(i))
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// BenchmarkParseRecordManyKeys guards against duplicate-key detection
// that grows with the square of the number of keys.
func BenchmarkParseRecordManyKeys(b *testing.B) {
	raw := manyKeys(100_000)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := ParseRecord(raw)
		if err != nil || r.Len() != 100_000 {
			b.Fatalf("%d fields, %v", r.Len(), err)
		}
	}
}
