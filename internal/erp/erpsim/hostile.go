package erpsim

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/shopspring/decimal"
)

// Hostile records: what real installations send that a client has not seen.
// Every one of them is valid JSON syntax (except the malformed preview, which
// exists to be malformed), but Postgres cannot store some of them as they
// are, and some cannot be used as an invoice at all.

// HostileCase describes one record of HostileInvoices, for tests that assert
// what the client made of it.
type HostileCase struct {
	Name string // short name of what is odd, e.g. "lone-surrogate"
	ID   string // the record's id as text; "" when it has none
	// Rejected reports that the record cannot become an invoice row as it
	// came: it has no usable id (none, or one too long for a Postgres btree
	// index), its money does not parse or does not fit a Postgres numeric,
	// or Postgres cannot store its bytes as jsonb (\u0000, a lone
	// surrogate, invalid UTF-8, a number beyond numeric's range). A client
	// is expected to set it aside as rejected, raw bytes kept. The others
	// are usable invoices.
	Rejected bool
	TotalBC  decimal.Decimal // the invoice's money; zero when Rejected
}

// hostileDuplicateOf is the id of the normal invoice that the "duplicate"
// case repeats: the first generated invoice.
const hostileDuplicateOf = firstInvoice

type hostileInvoice struct {
	HostileCase
	raw string
}

// hostileInvoices is the table behind HostileInvoices, built once. The
// duplicate comes last here; SetHostileInvoices places it right after its
// twin.
var hostileInvoices = func() []hostileInvoice {
	// rec writes an invoice record; id, name, total and extra are JSON
	// fragments put in as they are.
	n := 0
	rec := func(id, name, total, extra string) string {
		n++
		return `{"id":` + id + `,"number":"INV-H-` + strconv.Itoa(n) + `","date":"2026-03-01",` +
			`"customer":{"id":1,"name":"` + name + `"},"currency_code":"USD","total_bc":` + total +
			`,"status":"posted","updated_at":"2026-03-01T10:00:00Z"` + extra + `}`
	}
	longID := longHostileID()
	cases := []hostileInvoice{
		{HostileCase{"lone-surrogate", "9000000001", true, decimal.Zero},
			rec("9000000001", `Lone \ud800 surrogate`, "10.01", "")},
		{HostileCase{"invalid-utf8", "9000000002", true, decimal.Zero},
			rec("9000000002", "Bad \xff\xfe bytes", "10.02", "")},
		{HostileCase{"money-overflow", "9000000003", true, decimal.Zero},
			rec("9000000003", "Money overflow", "1e999999", "")},
		{HostileCase{"numeric-overflow-field", "9000000004", true, decimal.Zero},
			rec("9000000004", "Score overflow", "10.04", `,"score":1e999999`)},
		{HostileCase{"long-id", longID, true, decimal.Zero},
			rec(`"`+longID+`"`, "Long id", "10.05", "")},
		{HostileCase{"nul-char", "9000000006", true, decimal.Zero},
			rec("9000000006", `Nul \u0000 char`, "10.06", "")},
		{HostileCase{"no-id", "", true, decimal.Zero},
			`{"number":"INV-H-NOID","date":"2026-03-01","customer":{"id":1,"name":"No id"},"currency_code":"USD","total_bc":10.07,"status":"posted","updated_at":"2026-03-01T10:00:00Z"}`},
		{HostileCase{"money-not-a-number", "9000000008", true, decimal.Zero},
			rec("9000000008", "Comma money", `"12,50"`, "")},
		{HostileCase{"duplicate", strconv.Itoa(hostileDuplicateOf), false, cents(432109)},
			rec(strconv.Itoa(hostileDuplicateOf), "Customer 1 (second copy)", "4321.09", "")},
	}
	return cases
}()

// longHostileID is 4000 pseudo-random letters and digits: random, so that
// Postgres cannot compress it under the btree index row limit (2704 bytes).
func longHostileID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	r := newRand(4000, 9)
	b := make([]byte, 4000)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// HostileInvoices returns invoices with Raw set that a client meets on real
// installations and Postgres cannot store as they are, or that are odd: a
// customer name with a lone surrogate escape (\ud800); raw invalid UTF-8
// bytes inside a string; total_bc 1e999999; a non-money field ("score") of
// 1e999999; an id of 4000 bytes; \u0000 in a string; no id; total_bc
// "12,50"; and a second copy of invoice 1001 with other content. Ids are
// distinct except for that copy. HostileInvoiceCases describes them, in
// the same order. Besides Raw, only ID (numeric ids) and TotalBC (usable
// records) are filled, for convenience; only Raw is served.
func HostileInvoices() []Invoice {
	out := make([]Invoice, len(hostileInvoices))
	for i, h := range hostileInvoices {
		out[i] = Invoice{TotalBC: h.TotalBC, Raw: json.RawMessage(h.raw)}
		if id, err := strconv.ParseInt(h.ID, 10, 64); err == nil {
			out[i].ID = id
		}
	}
	return out
}

// HostileInvoiceCases describes the records of HostileInvoices, in the same
// order.
func HostileInvoiceCases() []HostileCase {
	out := make([]HostileCase, len(hostileInvoices))
	for i, h := range hostileInvoices {
		out[i] = h.HostileCase
	}
	return out
}

// SetHostileInvoices mixes HostileInvoices into the invoice list, or takes
// them out again. The normal invoices are not changed: InvoiceTotal and
// MutateInvoices still see only them, while Invoices and the list served
// include the hostile records. These are spread evenly over the list, none
// before the first invoice. The duplicate comes directly after its twin
// (invoice 1001, the first generated one), so the two share the first page
// for any page size of 2 or more, and the duplicate is the later copy on
// that page. ExpectedInvoiceTotal gives the total a warehouse should hold.
func (s *Sim) SetHostileInvoices(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hostileInvoices = on
	s.relist()
}

// relist rebuilds the served invoice list after the invoices or the hostile
// switch changed; it shares s.invoices when there is nothing to mix in.
// Caller holds s.mu.
func (s *Sim) relist() {
	s.pre, s.views = nil, nil
	defer func() { s.idsSorted = idsAscend(s.listed) }()
	if !s.hostileInvoices {
		s.listed = s.invoices
		return
	}
	odd := HostileInvoices()
	dup, odd := odd[len(odd)-1], odd[:len(odd)-1]
	n := len(s.invoices)
	// after(j) is the index of the normal invoice that odd[j] follows.
	after := func(j int) int { return max((j+1)*n/(len(odd)+1)-1, 0) }
	out := make([]Invoice, 0, n+len(odd)+1)
	next, dupDone := 0, false
	for i := range s.invoices {
		out = append(out, s.invoices[i])
		if !dupDone && s.invoices[i].Raw == nil && s.invoices[i].ID == hostileDuplicateOf {
			out = append(out, dup)
			dupDone = true
		}
		for next < len(odd) && after(next) <= i {
			out = append(out, odd[next])
			next++
		}
	}
	out = append(out, odd[next:]...)
	if !dupDone {
		out = append(out, dup)
	}
	s.listed = out
}

// ExpectedInvoiceTotal is the exact sum a warehouse should hold after a
// complete sweep of the invoice list: every normal invoice (Raw nil) plus,
// when SetHostileInvoices is on, the usable hostile records (not Rejected),
// counting each id once with the copy that comes last in the list. Records
// with Raw set through MutateInvoices are left out, as in InvoiceTotal.
func (s *Sim) ExpectedInvoiceTotal() decimal.Decimal {
	sum := decimal.Zero
	for _, v := range s.expectedInvoices() {
		sum = sum.Add(v)
	}
	return sum
}

// ExpectedInvoiceCount is the number of distinct invoice ids behind
// ExpectedInvoiceTotal.
func (s *Sim) ExpectedInvoiceCount() int {
	return len(s.expectedInvoices())
}

// expectedInvoices maps id to the money of the copy that wins.
func (s *Sim) expectedInvoices() map[string]decimal.Decimal {
	s.mu.Lock()
	defer s.mu.Unlock()
	totals := make(map[string]decimal.Decimal, len(s.invoices)+len(hostileInvoices))
	for i := range s.invoices {
		if v := &s.invoices[i]; v.Raw == nil {
			totals[strconv.FormatInt(v.ID, 10)] = v.TotalBC
		}
	}
	if s.hostileInvoices {
		// Each hostile record comes after the normal invoice it may repeat.
		for _, h := range hostileInvoices {
			if !h.Rejected {
				totals[h.ID] = h.TotalBC
			}
		}
	}
	return totals
}

// ---- hostile detail records ------------------------------------------------------

// HostileDetails names the odd records that SetHostileDetails switches on.
type HostileDetails struct {
	MalformedPreview     string // journal entry whose journal-preview answers 200 with malformed JSON
	OverflowLinePreview  string // journal entry whose preview has, among good lines, one with debit 1e999999
	SurrogatePreview     string // journal entry whose preview has a line whose memo holds a lone surrogate (\ud800)
	OverflowBalanceNode  int    // balance-sheet node (a leaf) whose balance is 1e999999
	UserlessGrantCashbox int    // cashbox whose access list has a grant with no user field at all
	GoneCashbox          int    // cashbox still in the cashbox list whose access route answers 404
}

// overflowLiteral is a number no Postgres numeric can hold (at most 131072
// digits before the point).
const overflowLiteral = "1e999999"

func hostileDetailIDs(slashIDs bool) HostileDetails {
	return HostileDetails{
		MalformedPreview:     documentID("JE", 1, slashIDs),
		OverflowLinePreview:  documentID("JE", 2, slashIDs),
		SurrogatePreview:     documentID("JE", 3, slashIDs),
		OverflowBalanceNode:  6,
		UserlessGrantCashbox: 3,
		GoneCashbox:          4,
	}
}

// HostileDetailIDs names the odd records that SetHostileDetails serves.
func (s *Sim) HostileDetailIDs() HostileDetails {
	return hostileDetailIDs(s.opts.SlashIDs)
}

// SetHostileDetails switches the odd records of the detail and custom routes
// on or off; HostileDetailIDs names them. The lists themselves (journal
// entries, cashboxes) do not change.
func (s *Sim) SetHostileDetails(on bool) { set(s, &s.hostileDetails, on) }

// malformedPreview is the body of the broken journal preview: cut off in
// the middle of a line.
const malformedPreview = `{"ok":true,"data":{"lines":[{"line":1,"account_code":"5000","debit":`

// addHostileDetails edits freshly built fixtures into their hostile kind.
func addHostileDetails(fx *fixtures, slashIDs, moneyAsString bool) {
	ids := hostileDetailIDs(slashIDs)
	fx.brokenPreview = ids.MalformedPreview

	zero := money{d: cents(0), asString: moneyAsString}
	bad := journalLine{Line: 4, AccountCode: "9999", AccountName: "Suspense",
		Debit: money{literal: overflowLiteral, asString: moneyAsString}, Credit: zero}
	lines := fx.journalLines[ids.OverflowLinePreview]
	fx.journalLines[ids.OverflowLinePreview] = append(slices.Clip(lines), bad)

	lines = slices.Clone(fx.journalLines[ids.SurrogatePreview])
	lines[0].Memo = json.RawMessage(`"Advance \ud800 paid"`)
	fx.journalLines[ids.SurrogatePreview] = lines

	overflowNode(fx.balanceSheet, ids.OverflowBalanceNode, money{literal: overflowLiteral, asString: moneyAsString})

	fx.access[ids.UserlessGrantCashbox] = append(slices.Clip(fx.access[ids.UserlessGrantCashbox]), accessGrant{CanView: true})
	delete(fx.access, ids.GoneCashbox)
}

// overflowNode sets the balance of the node with that id.
func overflowNode(nodes []balanceNode, id int, bal money) {
	for i := range nodes {
		if nodes[i].ID == id {
			nodes[i].Balance = bal
		}
		overflowNode(nodes[i].Children, id, bal)
	}
}
