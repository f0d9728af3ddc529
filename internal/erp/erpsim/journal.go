package erpsim

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/shopspring/decimal"
)

// The journal-entry list as it changes: entries posted, deleted and
// edited while it is read. It starts as the fixtures' entries; an entry
// the fixtures drew, with its total unchanged, keeps the fixtures' preview
// lines (hostile ones included), any other previews as two lines that
// balance its total.

// JournalEntry is one entry of the journal-entry list.
type JournalEntry struct {
	ID        string
	Date      string // YYYY-MM-DD
	Reference string
	Total     decimal.Decimal // written as total_debit and total_credit: an entry balances
	Status    string
	BranchID  int // a branch of the installation's company
}

func (e JournalEntry) wire(moneyAsString bool) journalEntry {
	m := money{d: e.Total, asString: moneyAsString}
	return journalEntry{ID: e.ID, Date: e.Date, Reference: e.Reference, TotalDebit: m, TotalCredit: m, Status: e.Status, branch: e.BranchID}
}

// JournalEntries returns a copy of the journal entries of every branch,
// in list order.
func (s *Sim) JournalEntries() []JournalEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.journalInOrder())
}

// MutateJournalEntries replaces the journal entries with f's result, held
// oldest first, under the lock, as MutateInvoices does for invoices.
func (s *Sim) MutateJournalEntries(f func([]JournalEntry) []JournalEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.journal = f(s.journalEntries())
	if s.journal == nil {
		s.journal = []JournalEntry{}
	}
	s.journalIndex = nil
}

// AddJournalEntries posts n journal entries and returns them: numbered
// after every entry held, dated today by the simulator's clock, their
// branches round robin, their totals drawn from the seed and the number.
// They are held last.
func (s *Sim) AddJournalEntries(n int) []JournalEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := s.journalEntries()
	next := 0
	for _, e := range held {
		next = max(next, documentNumber(e.ID))
	}
	added := make([]JournalEntry, max(n, 0))
	for i := range added {
		k := next + i // the k-th entry, from 0, is number k+1
		r := newRand(s.opts.Seed, 0x4a45<<48^uint64(k))
		added[i] = JournalEntry{
			ID: documentID("JE", k, s.opts.SlashIDs), Date: s.today(), Reference: fmt.Sprintf("REF-%04d", k+1),
			Total: cents(1000 + r.Int64N(10000000-1000+1)), Status: "posted", BranchID: branchOf(s.branches, k),
		}
	}
	s.journal = append(held, added...)
	s.journalIndex = nil
	return slices.Clone(added)
}

// documentNumber is the number a document id ends in ("JE-000031" and
// "JE/2026/000031" are 31); 0 for none.
func documentNumber(id string) int {
	i := len(id)
	for i > 0 && id[i-1] >= '0' && id[i-1] <= '9' {
		i--
	}
	n, _ := strconv.Atoi(id[i:])
	return n
}

// journalEntries is the entries held, oldest first, taken from the
// fixtures on first use. Caller holds s.mu.
func (s *Sim) journalEntries() []JournalEntry {
	if s.journal == nil {
		fx := s.fixturesOf(fixtureKind{})
		s.journal = make([]JournalEntry, len(fx.journals))
		for i, j := range fx.journals {
			s.journal[i] = JournalEntry{ID: j.ID, Date: j.Date, Reference: j.Reference, Total: j.TotalDebit.d, Status: j.Status, BranchID: j.branch}
		}
	}
	return s.journal
}

// journalInOrder is the entries held in list order. Caller holds s.mu.
func (s *Sim) journalInOrder() []JournalEntry {
	return inListOrder(s.journalEntries(), s.order, func(e JournalEntry) uint64 { return scrambleText(e.ID) })
}

// journalEntry is the entry of that id, if it is held. Caller holds s.mu.
func (s *Sim) journalEntry(id string) (JournalEntry, bool) {
	held := s.journalEntries()
	if s.journalIndex == nil {
		s.journalIndex = make(map[string]int, len(held))
		for i, e := range held {
			s.journalIndex[e.ID] = i
		}
	}
	i, ok := s.journalIndex[id]
	if !ok {
		return JournalEntry{}, false
	}
	return held[i], true
}

// serveJournalEntries serves the journal-entry list in list order, as
// DataTables pages.
func (s *Sim) serveJournalEntries(w http.ResponseWriter, r *http.Request) {
	ln := s.lensOf(r)
	s.mu.Lock()
	held := s.journalInOrder()
	items := make([]journalEntry, len(held))
	for i, e := range held {
		items[i] = e.wire(s.money)
	}
	s.mu.Unlock()
	serveVisible(s, w, r, visible(s, items, ln.view), ln.labels, layoutDataTables, false)
}

// journalPreview finds the preview lines and branch of the journal entry
// pk: the fixtures' lines while the entry is one they drew with its total,
// else two lines that balance its total. False for an entry not held.
func (s *Sim) journalPreview(fx *fixtures, pk string) ([]journalLine, int, bool) {
	s.mu.Lock()
	e, ok := s.journalEntry(pk)
	asString := s.money
	s.mu.Unlock()
	if !ok {
		return nil, 0, false
	}
	for _, j := range fx.journals {
		if j.ID == pk && j.TotalDebit.d.Equal(e.Total) {
			return fx.journalLines[pk], e.BranchID, true
		}
	}
	total, zero := money{d: e.Total, asString: asString}, money{d: cents(0), asString: asString}
	return []journalLine{
		{Line: 1, AccountCode: "5000", AccountName: "Operating expenses", Debit: total, Credit: zero},
		{Line: 2, AccountCode: "1000", AccountName: "Cash", Debit: zero, Credit: total},
	}, e.BranchID, true
}
