package erpsim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
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

// customerNames and invoiceDates never change, so every simulator (and every
// tenant of a fleet) shares one copy.
var (
	customerNames = sync.OnceValue(func() []string {
		c := make([]string, numCustomers+1)
		for i := 1; i <= numCustomers; i++ {
			c[i] = "Customer " + strconv.Itoa(i)
		}
		return c
	})
	invoiceDates = sync.OnceValue(func() []string {
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		d := make([]string, 365)
		for i := range d {
			d[i] = base.AddDate(0, 0, i).Format(time.DateOnly)
		}
		return d
	})
)

// invoiceNumbers hands out the strings "INV-2026-000001"... so that several
// simulators built from one table (the tenants of a fleet) share them instead
// of holding one copy each.
type invoiceNumbers struct {
	mu   sync.Mutex
	nums []string
}

// first returns the first n invoice numbers.
func (t *invoiceNumbers) first(n int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := len(t.nums); i < n; i++ {
		t.nums = append(t.nums, fmt.Sprintf("INV-2026-%06d", i+1))
	}
	return t.nums[:n:n]
}

// generateInvoices builds n invoices of the company deterministically from
// seed, spread over the branches round robin. Strings that repeat (numbers,
// dates, customer names, currencies, statuses) are shared to keep large sets
// (a million invoices, or many tenants) compact.
func generateInvoices(n int, seed int64, numbers *invoiceNumbers, company int, branches []int) []Invoice {
	r := newRand(seed, 1)
	customers, dates, nums := customerNames(), invoiceDates(), numbers.first(n)
	out := make([]Invoice, n)
	for i := range out {
		v := drawInvoice(r, customers)
		v.ID = int64(firstInvoice + i)
		v.Number = nums[i]
		v.Date = dates[int(int64(i)*int64(len(dates))/int64(max(n, 1)))]
		v.CompanyID = company
		v.BranchID = branchOf(branches, i)
		out[i] = v
	}
	return out
}

// invoiceCurrencies are the currencies invoices are drawn in, as often as
// they appear.
var invoiceCurrencies = [...]string{"USD", "USD", "USD", "USD", "USD", "USD", "USD", "EUR", "EUR", "GBP"}

// drawInvoice draws an invoice's customer, status, currency and total from
// r, in that order.
func drawInvoice(r *rand.Rand, customers []string) Invoice {
	cust := 1 + r.IntN(numCustomers)
	st := "posted"
	switch r.IntN(20) {
	case 0:
		st = "draft"
	case 1:
		st = "cancelled"
	}
	return Invoice{
		Customer:   customers[cust],
		CustomerID: int64(cust),
		Status:     st,
		Currency:   invoiceCurrencies[r.IntN(len(invoiceCurrencies))],
		TotalBC:    decimal.New(100+r.Int64N(9999999-100+1), -2),
	}
}

// ---- fixtures of the accounting and messaging routes -------------------------
//
// Field order in these structs is the order on the wire; tests and stored
// payload hashes depend on it.

type cashbox struct {
	ID           int    `json:"id"`
	Name         string `json:"name"`
	Type         string `json:"type"`
	CurrencyCode string `json:"currency_code"`
	Balance      money  `json:"balance"`
	IsActive     bool   `json:"is_active"`
	BranchID     int    `json:"branch_id"`
}

// cashboxChoice is one entry of the cashbox lookup: what a form's picker
// shows of a cashbox.
type cashboxChoice struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
	Type string `json:"type"`
}

func cashboxLookup(boxes []cashbox) []cashboxChoice {
	out := make([]cashboxChoice, len(boxes))
	for i, b := range boxes {
		out[i] = cashboxChoice{ID: b.ID, Name: b.Name, Type: b.Type}
	}
	return out
}

// accessGrant is one user's rights on a cashbox. The user fields are omitted
// when zero, which only the hostile grant without a user is.
type accessGrant struct {
	UserID   int    `json:"user_id,omitzero"`
	Username string `json:"username,omitzero"`
	CanView  bool   `json:"can_view"`
	CanPost  bool   `json:"can_post"`
}

type reconciliation struct {
	ID              int     `json:"id"`
	CashboxID       int     `json:"cashbox_id"`
	Status          string  `json:"status"`
	ExpectedBalance money   `json:"expected_balance"`
	CountedBalance  money   `json:"counted_balance"`
	Difference      money   `json:"difference"`
	ReconciledAt    *string `json:"reconciled_at"` // null while a draft
	branch          int     // its cashbox's; not on the wire
}

type journalEntry struct {
	ID          string `json:"id"`
	Date        string `json:"date"`
	Reference   string `json:"reference"`
	TotalDebit  money  `json:"total_debit"`
	TotalCredit money  `json:"total_credit"`
	Status      string `json:"status"`
	branch      int    // not on the wire
}

// journalLine is one line of a journal preview. Memo is raw JSON so that a
// hostile line can carry a string Go cannot hold (a lone surrogate escape);
// normal lines have none, and then the field is left out.
type journalLine struct {
	Line        int             `json:"line"`
	AccountCode string          `json:"account_code"`
	AccountName string          `json:"account_name"`
	Debit       money           `json:"debit"`
	Credit      money           `json:"credit"`
	Memo        json.RawMessage `json:"memo,omitempty"`
}

type journalPreview struct {
	Lines []journalLine `json:"lines"`
}

type voucher struct {
	ID           string `json:"id"`
	Number       string `json:"number"`
	Date         string `json:"date"`
	Party        string `json:"party"`
	Amount       money  `json:"amount"`
	CurrencyCode string `json:"currency_code"`
	Status       string `json:"status"`
	branch       int    // not on the wire
}

type balanceNode struct {
	ID       int           `json:"id"`
	Code     string        `json:"code"`
	Name     string        `json:"name"`
	Balance  money         `json:"balance"`
	Children []balanceNode `json:"children"` // [] for a leaf, never null
}

type conversation struct {
	ID            int    `json:"id"`
	Contact       string `json:"contact"`
	Status        string `json:"status"`
	LastMessageAt string `json:"last_message_at"`
}

type message struct {
	ID             int    `json:"id"`
	ConversationID int    `json:"conversation_id"`
	Direction      string `json:"direction"`
	Body           string `json:"body"`
	SentAt         string `json:"sent_at"`
}

type messageTemplate struct {
	ID       int    `json:"id"`
	Name     string `json:"name"`
	Language string `json:"language"`
	Body     string `json:"body"`
}

type queueItem struct {
	ID        int    `json:"id"`
	Status    string `json:"status"`
	Attempts  int    `json:"attempts"`
	MessageID int    `json:"message_id"`
}

type messagingStats struct {
	Sent   int `json:"sent"`
	Failed int `json:"failed"`
	Queued int `json:"queued"`
}

type messagingSettings struct {
	APIKey     string `json:"api_key"`
	WebhookURL string `json:"webhook_url"`
	Enabled    bool   `json:"enabled"`
}

// fixtures is the data of every route except invoices and currencies. It is
// immutable once built.
type fixtures struct {
	cashboxes     []cashbox
	access        map[int][]accessGrant
	recons        []reconciliation
	journals      []journalEntry
	journalLines  map[string][]journalLine
	payments      []voucher
	paymentLines  map[string][]journalLine
	receipts      []voucher
	receiptLines  map[string][]journalLine
	balanceSheet  []balanceNode
	balanceBase   leafBalances // the static tree's leaves
	conversations []conversation
	messages      []message
	templates     []messageTemplate
	queue         []queueItem
	stats         messagingStats
	settings      messagingSettings

	// docBranch is the branch of each journal entry and voucher by id, for
	// their previews.
	docBranch map[string]int

	// brokenPreview is the journal entry whose preview answers malformed
	// JSON; set in hostile fixtures only.
	brokenPreview string
}

// cashboxBranch is the branch of cashbox id; false if there is none.
func (fx *fixtures) cashboxBranch(id int) (int, bool) {
	for _, c := range fx.cashboxes {
		if c.ID == id {
			return c.BranchID, true
		}
	}
	return 0, false
}

// fixtureKind selects one rendering of the fixtures: the money format, and
// whether the hostile records of SetHostileDetails are in.
type fixtureKind struct {
	moneyAsString bool
	hostile       bool
}

// index numbers the kinds for Sim.fx.
func (k fixtureKind) index() int {
	i := 0
	if k.moneyAsString {
		i |= 1
	}
	if k.hostile {
		i |= 2
	}
	return i
}

func cents(c int64) decimal.Decimal { return decimal.New(c, -2) }

// documentID is the id of the i-th (from 0) journal entry or voucher: with
// slashIDs "JE/2026/000001", else "JE-000001".
func documentID(prefix string, i int, slashIDs bool) string {
	if slashIDs {
		return fmt.Sprintf("%s/2026/%06d", prefix, i+1)
	}
	return fmt.Sprintf("%s-%06d", prefix, i+1)
}

// buildFixtures draws the fixtures from seed. Money carries its wire format,
// so each kind is its own set; all sets hold the same values because they
// come from the same draws. Records are spread over the branches round
// robin (reconciliations follow their cashbox); that draws nothing, so one
// branch or many, the values are the same.
func buildFixtures(seed int64, branches []int, slashIDs bool, kind fixtureKind) *fixtures {
	r := newRand(seed, 2)
	m := func(d decimal.Decimal) money { return money{d: d, asString: kind.moneyAsString} }
	amount := func(lo, hi int64) decimal.Decimal { return cents(lo + r.Int64N(hi-lo+1)) }
	day := func(i int) string {
		return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i).Format(time.DateOnly)
	}
	zero := m(cents(0))
	line := func(n int, code, name string, debit, credit money) journalLine {
		return journalLine{Line: n, AccountCode: code, AccountName: name, Debit: debit, Credit: credit}
	}
	fx := &fixtures{docBranch: map[string]int{}}

	boxes := []struct{ name, typ, cur string }{
		{"Main till", "cash", "USD"},
		{"Operating account", "bank", "USD"},
		{"Euro account", "bank", "EUR"},
		{"Petty cash", "cash", "USD"},
	}
	fx.access = map[int][]accessGrant{}
	users := []struct {
		id   int
		name string
	}{{3, "alice"}, {4, "bob"}, {5, "carol"}}
	for i, b := range boxes {
		id := i + 1
		fx.cashboxes = append(fx.cashboxes, cashbox{
			ID: id, Name: b.name, Type: b.typ, CurrencyCode: b.cur,
			Balance: m(amount(10000, 50000000)), IsActive: true, BranchID: branchOf(branches, i),
		})
		var acc []accessGrant
		for j, u := range users[:len(users)-i%2] {
			acc = append(acc, accessGrant{UserID: u.id, Username: u.name, CanView: true, CanPost: (i+j)%2 == 0})
		}
		fx.access[id] = acc
	}

	for i := range 6 {
		expected := amount(10000, 5000000)
		counted := expected
		if i%3 == 1 {
			counted = expected.Sub(cents(int64(100 + 50*i)))
		}
		rec := reconciliation{
			ID: i + 1, CashboxID: i%len(boxes) + 1, Status: "completed",
			ExpectedBalance: m(expected), CountedBalance: m(counted), Difference: m(counted.Sub(expected)),
			branch: fx.cashboxes[i%len(boxes)].BranchID,
		}
		if i >= 4 {
			rec.Status = "draft"
		} else {
			at := day(i*7) + "T18:00:00Z"
			rec.ReconciledAt = &at
		}
		fx.recons = append(fx.recons, rec)
	}

	fx.journalLines = map[string][]journalLine{}
	for i := range 30 {
		id := documentID("JE", i, slashIDs)
		total := amount(1000, 10000000)
		part := total.Mul(decimal.New(int64(20+r.IntN(60)), -2)).Round(2)
		fx.journals = append(fx.journals, journalEntry{
			ID: id, Date: day(i), Reference: fmt.Sprintf("REF-%04d", i+1),
			TotalDebit: m(total), TotalCredit: m(total), Status: "posted", branch: branchOf(branches, i),
		})
		fx.docBranch[id] = branchOf(branches, i)
		fx.journalLines[id] = []journalLine{
			line(1, "5000", "Operating expenses", m(part), zero),
			line(2, "5100", "Rent", m(total.Sub(part)), zero),
			line(3, "1000", "Cash", zero, m(total)),
		}
	}

	parties := []string{"Acme Supplies", "Globex", "Initech", "Umbrella Corp", "Stark Industries", "Wayne Enterprises"}
	fx.paymentLines = map[string][]journalLine{}
	fx.receiptLines = map[string][]journalLine{}
	for i := range 12 {
		pid := documentID("PV", i, slashIDs)
		pa := m(amount(500, 2000000))
		fx.payments = append(fx.payments, voucher{
			ID: pid, Number: fmt.Sprintf("PV-2026-%04d", i+1), Date: day(2 * i),
			Party: parties[i%len(parties)], Amount: pa, CurrencyCode: "USD", Status: "posted", branch: branchOf(branches, i),
		})
		fx.docBranch[pid] = branchOf(branches, i)
		fx.paymentLines[pid] = []journalLine{
			line(1, "2000", "Accounts payable", pa, zero),
			line(2, "1000", "Cash", zero, pa),
		}
		rid := documentID("RV", i, slashIDs)
		ra := m(amount(500, 2000000))
		fx.receipts = append(fx.receipts, voucher{
			ID: rid, Number: fmt.Sprintf("RV-2026-%04d", i+1), Date: day(2*i + 1),
			Party: "Customer " + strconv.Itoa(i+1), Amount: ra, CurrencyCode: "USD", Status: "posted", branch: branchOf(branches, i),
		})
		fx.docBranch[rid] = branchOf(branches, i)
		fx.receiptLines[rid] = []journalLine{
			line(1, "1000", "Cash", ra, zero),
			line(2, "1100", "Accounts receivable", zero, ra),
		}
	}

	fx.balanceBase = drawBalanceBase(amount)
	fx.balanceSheet = balanceTree(fx.balanceBase, kind.moneyAsString)

	for i := range 3 {
		fx.conversations = append(fx.conversations, conversation{
			ID: i + 1, Contact: fmt.Sprintf("+1555010%d", i), Status: []string{"open", "open", "closed"}[i],
			LastMessageAt: day(i) + "T09:30:00Z",
		})
	}
	for i := range 5 {
		fx.messages = append(fx.messages, message{
			ID: i + 1, ConversationID: i%3 + 1, Direction: []string{"in", "out"}[i%2],
			Body: fmt.Sprintf("Message %d", i+1), SentAt: day(i) + "T09:31:00Z",
		})
	}
	fx.templates = []messageTemplate{
		{ID: 1, Name: "invoice_ready", Language: "en", Body: "Your invoice {{1}} is ready."},
		{ID: 2, Name: "payment_received", Language: "en", Body: "We received {{1}}. Thank you."},
	}
	fx.queue = []queueItem{
		{ID: 1, Status: "pending", Attempts: 0, MessageID: 4},
		{ID: 2, Status: "failed", Attempts: 3, MessageID: 5},
	}
	fx.stats = messagingStats{Sent: 42, Failed: 3, Queued: 2}
	fx.settings = messagingSettings{
		APIKey:     "sim-secret-do-not-sync",
		WebhookURL: "https://example.invalid/messaging/webhook",
		Enabled:    true,
	}
	if kind.hostile {
		addHostileDetails(fx, slashIDs, kind.moneyAsString)
	}
	return fx
}
