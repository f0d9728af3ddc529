package erpsim

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/shopspring/decimal"
)

const (
	numCustomers = 500
	firstInvoice = 1001
)

func newRand(seed int64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15^stream))
}

// generateInvoices builds n invoices deterministically from seed. Strings that
// repeat (dates, customer names, currencies, statuses) are shared to keep
// large sets (a million invoices) compact.
func generateInvoices(n int, seed int64) []Invoice {
	r := newRand(seed, 1)
	customers := make([]string, numCustomers+1)
	for i := 1; i <= numCustomers; i++ {
		customers[i] = "Customer " + strconv.Itoa(i)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dates := make([]string, 365)
	for i := range dates {
		dates[i] = base.AddDate(0, 0, i).Format(time.DateOnly)
	}
	currencies := [...]string{"USD", "USD", "USD", "USD", "USD", "USD", "USD", "EUR", "EUR", "GBP"}
	out := make([]Invoice, n)
	for i := range out {
		cust := 1 + r.IntN(numCustomers)
		st := "posted"
		switch r.IntN(20) {
		case 0:
			st = "draft"
		case 1:
			st = "cancelled"
		}
		out[i] = Invoice{
			ID:         int64(firstInvoice + i),
			Number:     fmt.Sprintf("INV-2026-%06d", i+1),
			Date:       dates[int(int64(i)*int64(len(dates))/int64(max(n, 1)))],
			Customer:   customers[cust],
			CustomerID: int64(cust),
			Currency:   currencies[r.IntN(len(currencies))],
			TotalBC:    decimal.New(100+r.Int64N(9999999-100+1), -2),
			Status:     st,
		}
	}
	return out
}

type fixtures struct {
	cashboxes     []obj
	access        map[int][]obj
	recons        []obj
	journals      []obj
	journalLines  map[string][]obj
	payments      []obj
	paymentLines  map[string][]obj
	receipts      []obj
	receiptLines  map[string][]obj
	balanceSheet  []obj
	conversations []obj
	messages      []obj
	templates     []obj
	queue         []obj
	stats         obj
	settings      obj
}

func cents(c int64) decimal.Decimal { return decimal.New(c, -2) }

func buildFixtures(seed int64, branch int) fixtures {
	r := newRand(seed, 2)
	amount := func(lo, hi int64) decimal.Decimal { return cents(lo + r.Int64N(hi-lo+1)) }
	day := func(i int) string {
		return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i).Format(time.DateOnly)
	}
	var fx fixtures

	boxes := []struct{ name, typ, cur string }{
		{"Main till", "cash", "USD"},
		{"Operating account", "bank", "USD"},
		{"Euro account", "bank", "EUR"},
		{"Petty cash", "cash", "USD"},
	}
	fx.access = map[int][]obj{}
	users := []struct {
		id   int
		name string
	}{{3, "alice"}, {4, "bob"}, {5, "carol"}}
	for i, b := range boxes {
		id := i + 1
		fx.cashboxes = append(fx.cashboxes, obj{
			{"id", id}, {"name", b.name}, {"type", b.typ}, {"currency_code", b.cur},
			{"balance", amount(10000, 50000000)}, {"is_active", true}, {"branch_id", branch},
		})
		var acc []obj
		for j, u := range users[:len(users)-i%2] {
			acc = append(acc, obj{{"user_id", u.id}, {"username", u.name}, {"can_view", true}, {"can_post", (i+j)%2 == 0}})
		}
		fx.access[id] = acc
	}

	for i := range 6 {
		expected := amount(10000, 5000000)
		counted := expected
		if i%3 == 1 {
			counted = expected.Sub(cents(int64(100 + 50*i)))
		}
		st, at := "completed", any(day(i*7)+"T18:00:00Z")
		if i >= 4 {
			st, at = "draft", nil
		}
		fx.recons = append(fx.recons, obj{
			{"id", i + 1}, {"cashbox_id", i%len(boxes) + 1}, {"status", st},
			{"expected_balance", expected}, {"counted_balance", counted},
			{"difference", counted.Sub(expected)}, {"reconciled_at", at},
		})
	}

	fx.journalLines = map[string][]obj{}
	for i := range 30 {
		id := fmt.Sprintf("JE-%06d", i+1)
		total := amount(1000, 10000000)
		part := total.Mul(decimal.New(int64(20+r.IntN(60)), -2)).Round(2)
		zero := cents(0)
		fx.journals = append(fx.journals, obj{
			{"id", id}, {"date", day(i)}, {"reference", fmt.Sprintf("REF-%04d", i+1)},
			{"total_debit", total}, {"total_credit", total}, {"status", "posted"},
		})
		fx.journalLines[id] = []obj{
			line(1, "5000", "Operating expenses", part, zero),
			line(2, "5100", "Rent", total.Sub(part), zero),
			line(3, "1000", "Cash", zero, total),
		}
	}

	parties := []string{"Acme Supplies", "Globex", "Initech", "Umbrella Corp", "Stark Industries", "Wayne Enterprises"}
	fx.paymentLines = map[string][]obj{}
	fx.receiptLines = map[string][]obj{}
	for i := range 12 {
		zero := cents(0)
		pid := fmt.Sprintf("PV-%06d", i+1)
		pa := amount(500, 2000000)
		fx.payments = append(fx.payments, obj{
			{"id", pid}, {"number", fmt.Sprintf("PV-2026-%04d", i+1)}, {"date", day(2 * i)},
			{"party", parties[i%len(parties)]}, {"amount", pa}, {"currency_code", "USD"}, {"status", "posted"},
		})
		fx.paymentLines[pid] = []obj{
			line(1, "2000", "Accounts payable", pa, zero),
			line(2, "1000", "Cash", zero, pa),
		}
		rid := fmt.Sprintf("RV-%06d", i+1)
		ra := amount(500, 2000000)
		fx.receipts = append(fx.receipts, obj{
			{"id", rid}, {"number", fmt.Sprintf("RV-2026-%04d", i+1)}, {"date", day(2*i + 1)},
			{"party", "Customer " + strconv.Itoa(i+1)}, {"amount", ra}, {"currency_code", "USD"}, {"status", "posted"},
		})
		fx.receiptLines[rid] = []obj{
			line(1, "1000", "Cash", ra, zero),
			line(2, "1100", "Accounts receivable", zero, ra),
		}
	}

	// Balance sheet: assets = liabilities + equity.
	cash, recv, equip := amount(100000, 9000000), amount(100000, 9000000), amount(100000, 9000000)
	pay, loans, capital := amount(10000, 3000000), amount(10000, 3000000), amount(10000, 3000000)
	assets := cash.Add(recv).Add(equip)
	retained := assets.Sub(pay).Sub(loans).Sub(capital)
	leaf := func(id int, code, name string, bal decimal.Decimal) obj {
		return obj{{"id", id}, {"code", code}, {"name", name}, {"balance", bal}, {"children", []obj{}}}
	}
	node := func(id int, code, name string, children ...obj) obj {
		sum := cents(0)
		for _, c := range children {
			sum = sum.Add(c[3].v.(decimal.Decimal))
		}
		return obj{{"id", id}, {"code", code}, {"name", name}, {"balance", sum}, {"children", children}}
	}
	fx.balanceSheet = []obj{
		node(1, "1", "Assets",
			node(2, "11", "Current assets", leaf(3, "1000", "Cash", cash), leaf(4, "1100", "Accounts receivable", recv)),
			node(5, "12", "Fixed assets", leaf(6, "1200", "Equipment", equip))),
		node(7, "2", "Liabilities", leaf(8, "2000", "Accounts payable", pay), leaf(9, "2200", "Loans", loans)),
		node(10, "3", "Equity", leaf(11, "3100", "Capital", capital), leaf(12, "3200", "Retained earnings", retained)),
	}

	for i := range 3 {
		fx.conversations = append(fx.conversations, obj{
			{"id", i + 1}, {"contact", fmt.Sprintf("+1555010%d", i)}, {"status", []string{"open", "open", "closed"}[i]},
			{"last_message_at", day(i) + "T09:30:00Z"},
		})
	}
	for i := range 5 {
		fx.messages = append(fx.messages, obj{
			{"id", i + 1}, {"conversation_id", i%3 + 1}, {"direction", []string{"in", "out"}[i%2]},
			{"body", fmt.Sprintf("Message %d", i+1)}, {"sent_at", day(i) + "T09:31:00Z"},
		})
	}
	fx.templates = []obj{
		{{"id", 1}, {"name", "invoice_ready"}, {"language", "en"}, {"body", "Your invoice {{1}} is ready."}},
		{{"id", 2}, {"name", "payment_received"}, {"language", "en"}, {"body", "We received {{1}}. Thank you."}},
	}
	fx.queue = []obj{
		{{"id", 1}, {"status", "pending"}, {"attempts", 0}, {"message_id", 4}},
		{{"id", 2}, {"status", "failed"}, {"attempts", 3}, {"message_id", 5}},
	}
	fx.stats = obj{{"sent", 42}, {"failed", 3}, {"queued", 2}}
	fx.settings = obj{
		{"api_key", "sim-secret-do-not-sync"},
		{"webhook_url", "https://example.invalid/messaging/webhook"},
		{"enabled", true},
	}
	return fx
}

func line(n int, code, name string, debit, credit decimal.Decimal) obj {
	return obj{{"line", n}, {"account_code", code}, {"account_name", name}, {"debit", debit}, {"credit", credit}}
}
