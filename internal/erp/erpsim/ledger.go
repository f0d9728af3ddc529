package erpsim

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/shopspring/decimal"
)

// The balance-sheet tree. Static by default: one tree drawn with the
// fixtures, whoever asks and whatever the date. With BalanceSheetHistory,
// each branch has a ledger: base balances plus postings over the 30 months
// before the simulator was made, so a tree depends on date_to, on the branch
// (ScopeBranch) and on late entries posted into past months.

// The leaves of the tree, in the order they are drawn.
const (
	leafCash = iota
	leafReceivable
	leafEquipment
	leafPayable
	leafLoans
	leafCapital
	leafRetained
	numLeaves
)

// leafBalances holds a balance per leaf.
type leafBalances [numLeaves]decimal.Decimal

// leafCodes are the account codes of the leaves.
var leafCodes = [numLeaves]string{"1000", "1100", "1200", "2000", "2200", "3100", "3200"}

// drawBalanceBase draws leaf balances such that assets = liabilities +
// equity: retained earnings is what makes them agree.
func drawBalanceBase(amount func(lo, hi int64) decimal.Decimal) leafBalances {
	var b leafBalances
	b[leafCash], b[leafReceivable], b[leafEquipment] = amount(100000, 9000000), amount(100000, 9000000), amount(100000, 9000000)
	b[leafPayable], b[leafLoans], b[leafCapital] = amount(10000, 3000000), amount(10000, 3000000), amount(10000, 3000000)
	b[leafRetained] = retainedPlug(b)
	return b
}

// retainedPlug is the retained earnings that balance b's other leaves.
func retainedPlug(b leafBalances) decimal.Decimal {
	assets := b[leafCash].Add(b[leafReceivable]).Add(b[leafEquipment])
	return assets.Sub(b[leafPayable]).Sub(b[leafLoans]).Sub(b[leafCapital])
}

// balanceTree is the tree of those leaf balances; a parent is the exact sum
// of its children.
func balanceTree(b leafBalances, moneyAsString bool) []balanceNode {
	m := func(d decimal.Decimal) money { return money{d: d, asString: moneyAsString} }
	leaf := func(id, i int, name string) balanceNode {
		return balanceNode{ID: id, Code: leafCodes[i], Name: name, Balance: m(b[i]), Children: []balanceNode{}}
	}
	node := func(id int, code, name string, children ...balanceNode) balanceNode {
		sum := cents(0)
		for _, c := range children {
			sum = sum.Add(c.Balance.d)
		}
		return balanceNode{ID: id, Code: code, Name: name, Balance: m(sum), Children: children}
	}
	return []balanceNode{
		node(1, "1", "Assets",
			node(2, "11", "Current assets", leaf(3, leafCash, "Cash"), leaf(4, leafReceivable, "Accounts receivable")),
			node(5, "12", "Fixed assets", leaf(6, leafEquipment, "Equipment"))),
		node(7, "2", "Liabilities", leaf(8, leafPayable, "Accounts payable"), leaf(9, leafLoans, "Loans")),
		node(10, "3", "Equity", leaf(11, leafCapital, "Capital"), leaf(12, leafRetained, "Retained earnings")),
	}
}

// ---- ledgers ---------------------------------------------------------------------

// posting moves one leaf's balance on a date (YYYY-MM-DD).
type posting struct {
	date   string
	leaf   int
	amount decimal.Decimal
}

// branchLedger is one branch's base balances and postings.
type branchLedger struct {
	base     leafBalances
	postings []posting
}

// historyMonths is how many months of postings a ledger starts with.
const historyMonths = 30

// newBranchLedger draws a branch's ledger from seed: base balances as the
// static tree's, then for each of the 30 months before born's month one or
// two days of postings, each moving every leaf, retained earnings keeping
// assets = liabilities + equity. Each branch draws from its own stream.
func newBranchLedger(seed int64, branch int, born time.Time) *branchLedger {
	r := newRand(seed, 0x1ed9e5<<32|uint64(uint32(branch)))
	amount := func(lo, hi int64) decimal.Decimal { return cents(lo + r.Int64N(hi-lo+1)) }
	l := &branchLedger{base: drawBalanceBase(amount)}
	first := time.Date(born.Year(), born.Month()-historyMonths, 1, 0, 0, 0, 0, time.UTC)
	for mo := range historyMonths {
		month := first.AddDate(0, mo, 0)
		for range 1 + r.IntN(2) {
			date := month.AddDate(0, 0, r.IntN(28)).Format(time.DateOnly)
			var delta leafBalances
			for i := range leafRetained {
				delta[i] = amount(-200000, 500000)
			}
			delta[leafRetained] = retainedPlug(delta)
			for i, d := range delta {
				l.postings = append(l.postings, posting{date: date, leaf: i, amount: d})
			}
		}
	}
	return l
}

// balancesAt is the leaf balances of the ledger on date: base plus the
// postings dated on or before it.
func (l *branchLedger) balancesAt(date string) leafBalances {
	b := l.base
	for _, p := range l.postings {
		if p.date <= date {
			b[p.leaf] = b[p.leaf].Add(p.amount)
		}
	}
	return b
}

// ledgerOf returns the branch's ledger, drawing the ledgers on first use;
// nil for a branch the installation does not have. Caller holds s.mu.
func (s *Sim) ledgerOf(branch int) *branchLedger {
	if s.ledger == nil {
		s.ledger = map[int]*branchLedger{}
		for _, b := range s.branches {
			s.ledger[b] = newBranchLedger(s.opts.Seed, b, s.born.UTC())
		}
	}
	return s.ledger[branch]
}

// historyBalances is the leaf balances a view sees on date: its branch's,
// or the sum over the company's branches; zero for anything else. Caller
// holds s.mu.
func (s *Sim) historyBalances(v listView, date string) leafBalances {
	var sum leafBalances
	for i := range sum {
		sum[i] = cents(0)
	}
	if v.company != s.opts.CompanyID {
		return sum
	}
	for _, b := range s.branches {
		if v.branch != 0 && b != v.branch {
			continue
		}
		bal := s.ledgerOf(b).balancesAt(date)
		for i := range sum {
			sum[i] = sum[i].Add(bal[i])
		}
	}
	return sum
}

// today is the date by the simulator's clock.
func (s *Sim) today() string {
	return s.now().UTC().Format(time.DateOnly)
}

// PostLateEntry adds a posting of amount to the leaf account accountCode
// ("1000", "1100", "1200", "2000", "2200", "3100" or "3200") of branch,
// dated date (YYYY-MM-DD), as a late closing entry into a past month does:
// with BalanceSheetHistory, the trees of every date_to on or after date
// change and the others do not. It panics on a branch the installation does
// not have, an account that is not a leaf or a malformed date, as those are
// bugs in the test that asks.
func (s *Sim) PostLateEntry(branch int, date string, accountCode string, amount decimal.Decimal) {
	leaf := slices.Index(leafCodes[:], accountCode)
	if _, err := time.Parse(time.DateOnly, date); err != nil || leaf < 0 {
		panic(fmt.Sprintf("erpsim: PostLateEntry: bad date %q or account %q", date, accountCode))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.ledgerOf(branch)
	if l == nil {
		panic(fmt.Sprintf("erpsim: PostLateEntry: no branch %d", branch))
	}
	l.postings = append(l.postings, posting{date: date, leaf: leaf, amount: amount})
}

// SetBalanceSheetIgnoresDate makes the balance-sheet route answer the tree
// as of today whatever date_to says (even a malformed one), as an
// installation whose report does not read the parameter does.
func (s *Sim) SetBalanceSheetIgnoresDate(on bool) { set(s, &s.ignoresDate, on) }

// BalanceSheetTotals is what a balance-sheet tree holds.
type BalanceSheetTotals struct {
	Balances map[string]decimal.Decimal // by account code, every node: leaves and the sums above them
	Total    decimal.Decimal            // the sum of the leaves
}

// BalanceSheet returns the balances the balance-sheet route answers a
// token of that branch under ScopeBranch (branch 0: of the installation's
// company, under ScopeCompany) with that date_to ("" for today), as things
// stand: static without BalanceSheetHistory, as of today when the date is
// ignored. The hostile overflow node of SetHostileDetails is not reflected.
func (s *Sim) BalanceSheet(branch int, dateTo string) BalanceSheetTotals {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.balancesFor(listView{company: s.opts.CompanyID, branch: branch}, dateTo)
	out := BalanceSheetTotals{Balances: map[string]decimal.Decimal{}, Total: cents(0)}
	for _, leaf := range b {
		out.Total = out.Total.Add(leaf)
	}
	var walk func([]balanceNode)
	walk = func(nodes []balanceNode) {
		for _, n := range nodes {
			out.Balances[n.Code] = n.Balance.d
			walk(n.Children)
		}
	}
	walk(balanceTree(b, false))
	return out
}

// balancesFor is the leaf balances the route answers view for date_to
// dateTo (already validated). Caller holds s.mu.
func (s *Sim) balancesFor(v listView, dateTo string) leafBalances {
	if !s.opts.BalanceSheetHistory {
		return s.fixturesOf(fixtureKind{}).balanceBase
	}
	if dateTo == "" || s.ignoresDate {
		dateTo = s.today()
	}
	return s.historyBalances(v, dateTo)
}

func (s *Sim) serveBalanceSheet(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	history, ignores := s.opts.BalanceSheetHistory, s.ignoresDate
	s.mu.Unlock()
	d := r.URL.Query().Get("date_to")
	if d != "" && !ignores {
		if _, err := time.Parse(time.DateOnly, d); err != nil {
			writeJSON(w, http.StatusBadRequest, `{"ok":false,"error":"invalid date_to"}`)
			return
		}
	}
	if !history {
		s.serveItems(w, r, s.fixtures().balanceSheet, layoutTree)
		return
	}
	ln := s.lensOf(r)
	s.mu.Lock()
	tree := balanceTree(s.balancesFor(ln.view, d), s.money)
	if s.hostileDetails { // the overflow node stays, as in the static tree
		overflowNode(tree, hostileDetailIDs(s.opts.SlashIDs).OverflowBalanceNode, money{literal: overflowLiteral, asString: s.money})
	}
	s.mu.Unlock()
	s.serveItems(w, r, tree, layoutTree)
}
