package streams

import (
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/sync"
)

// document is a kind of accounting document: a list stream of its own,
// and, through each document's journal preview, a source of journal
// lines. This table is the one place their routes are written.
type document struct {
	kind       string // document_kind in erp.journal_lines
	stream     string // the list stream; its table is erp.<stream>
	path       string // the list route; a document's routes are below it
	paging     erp.Paging
	permission string // what listing needs
	preview    string // what reading a journal preview needs
	columns    []sync.Column
}

var voucherColumns = []sync.Column{
	{Name: "status", Field: "status", Type: sync.Text},
	{Name: "amount", Field: "amount", Type: sync.Money},
	{Name: "voucher_date", Field: "date", Type: sync.Date, Lenient: true},
	{Name: "number", Field: "number", Type: sync.Text, Lenient: true},
	{Name: "party", Field: "party", Type: sync.Text, Lenient: true},
	{Name: "currency_code", Field: "currency_code", Type: sync.Text, Lenient: true},
}

// documents: their fields are not shown by the reference; the typed
// columns are what installations send in practice, and everything is in
// payload either way. Their ids are strings at the ERP.
var documents = []document{
	{
		kind: "journal_entry", stream: "journal_entries", path: "/accounts/api/journal-entries/",
		paging: erp.OffsetPaged, permission: "accounts.journal.view", preview: "accounts.journal.view",
		columns: []sync.Column{
			{Name: "status", Field: "status", Type: sync.Text},
			{Name: "total_debit", Field: "total_debit", Type: sync.Money},
			{Name: "total_credit", Field: "total_credit", Type: sync.Money},
			{Name: "entry_date", Field: "date", Type: sync.Date, Lenient: true},
			{Name: "reference", Field: "reference", Type: sync.Text, Lenient: true},
		},
	},
	{
		kind: "payment_voucher", stream: "payment_vouchers", path: "/accounts/api/payment-vouchers/",
		permission: "accounts.payment.list", preview: "accounts.payment.view",
		columns: voucherColumns,
	},
	{
		kind: "receipt_voucher", stream: "receipt_vouchers", path: "/accounts/api/receipt-vouchers/",
		permission: "accounts.receipt.list", preview: "accounts.receipt.view",
		columns: voucherColumns,
	},
}

// list is the document kind's list stream.
func (d document) list() *sync.List {
	l := &sync.List{Info: sync.Info{Name: d.stream, Permission: d.permission, Contract: sync.ContractUnreviewed,
		History: sync.HistoryOn, Month: "date", Table: &sync.Table{Columns: d.columns}},
		Path: d.path, Paging: d.paging}
	// A list it can follow (paged by start/length) has the schedules of
	// a list that is followed; the others are read whole every 30 minutes.
	if l.Declared().Follows {
		l.Schedule, l.WindowSchedule, l.SweepSchedule = followEvery, windowEvery, sweepEvery
	}
	return l
}
