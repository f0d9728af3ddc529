package sync

// Accounting documents: one-list streams, not enabled unless named in
// ERPSYNC_STREAMS or the config file.
func init() {
	Register(&Stream{
		Name:   "journal_entries",
		Path:   "/accounts/api/journal-entries/",
		Paging: DataTablesList,
		Columns: []Column{
			{Name: "status", Field: "status", Type: Text},
			{Name: "total_debit", Field: "total_debit", Type: Money},
			{Name: "total_credit", Field: "total_credit", Type: Money},
		},
		Expect: map[string]string{
			"id": "string|number", "date": "string", "reference": "string", "status": "string",
			"total_debit": "number|string", "total_credit": "number|string",
		},
	})
	vouchers := map[string]string{
		"payment_vouchers": "/accounts/api/payment-vouchers/",
		"receipt_vouchers": "/accounts/api/receipt-vouchers/",
	}
	for name, path := range vouchers {
		Register(&Stream{
			Name:   name,
			Path:   path,
			Paging: OneList,
			Columns: []Column{
				{Name: "status", Field: "status", Type: Text},
				{Name: "amount", Field: "amount", Type: Money},
			},
			Expect: map[string]string{
				"id": "string|number", "number": "string", "date": "string", "party": "string",
				"amount": "number|string", "currency_code": "string", "status": "string",
			},
		})
	}
}
