package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

// cmdSimulate serves the ERP simulator (docker-compose, manual tests, and
// trying a multi-branch set-up).
func cmdSimulate(e *command) error {
	sm, err := e.simulationFlags()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", sm.addr)
	if err != nil {
		return fmt.Errorf("simulator: %w", err)
	}
	ctx, cancel := signalContext()
	defer cancel()
	return sm.serve(ctx, ln, e.stderr)
}

// simulation is what `erpsync simulate` serves, from its flags.
type simulation struct {
	addr                 string
	opts                 erpsim.Options
	preEncode            int
	newInvoiceEvery      time.Duration
	newJournalEntryEvery time.Duration
}

// The names of the choices of the simulate flags, as the flags take them.
var (
	simulateEnvelopes = []string{"data", "array", "results", "datatables"}
	simulateLists     = map[string]erpsim.ListScope{"company": erpsim.ScopeCompany, "branch": erpsim.ScopeBranch}
	simulateLabels    = map[string]erpsim.RecordLabels{"none": erpsim.LabelsNone, "ids": erpsim.LabelsIDs, "objects": erpsim.LabelsObjects}
	simulateOrders    = map[string]erpsim.ListOrder{"asc": erpsim.OrderOldestFirst, "desc": erpsim.OrderNewestFirst, "unordered": erpsim.OrderUnordered}
	simulateCursors   = map[string]erpsim.CursorKind{"position": erpsim.CursorPosition, "key": erpsim.CursorLastKey}
)

// simulationFlags reads the flags of `erpsync simulate`; a bad value is a
// usage error that names its flag.
func (e *command) simulationFlags() (simulation, error) {
	fs, _ := e.flags("simulate")
	var sm simulation
	o := &sm.opts
	fs.StringVar(&sm.addr, "addr", "127.0.0.1:8090", "listen `address`")
	invoices := fs.Int("invoices", 1000, "number of invoices")
	fs.IntVar(&o.PageSizeCap, "page-size-cap", 500, "largest page_size honoured")
	fs.DurationVar(&o.TokenTTL, "token-ttl", time.Hour, "token lifetime")
	fs.DurationVar(&o.Latency, "latency", 0, "latency added to every answer")
	fs.BoolVar(&o.MoneyAsString, "money-as-string", false, "send money as JSON strings")
	envelope := fs.String("envelope", "data", "envelope of the simple lists: "+strings.Join(simulateEnvelopes, ", "))
	fs.IntVar(&sm.preEncode, "pre-encode", 0, "encode the invoice pages of this page size once up front (serving fast for measurements)")
	fs.IntVar(&o.Faults.RateLimitEvery, "rate-limit-every", 0, "answer every Nth data request with 429")
	fs.IntVar(&o.Faults.ServerErrorEvery, "server-error-every", 0, "answer every Nth data request with 503")
	fs.IntVar(&o.Faults.DropEvery, "drop-every", 0, "drop the connection of every Nth data request")
	branches := fs.String("branches", "", "serve a user per branch of company 1, e.g. `1,2` (default: the one user erpsync, branch 1)")
	lists := fs.String("lists", "company", "what a user's lists hold: company (the whole company's records) or branch (its branch's)")
	labels := fs.String("labels", "none", "how records name their company and branch: none, ids or objects")
	order := fs.String("order", "asc", "order of the invoice and journal-entry lists: asc (oldest first), desc (newest first) or unordered")
	cursor := fs.String("cursor", "position", "what an invoice cursor encodes: position (in the list) or key (the last id served)")
	fs.DurationVar(&sm.newInvoiceEvery, "new-invoice-every", 0, "issue an invoice at this interval while serving, e.g. 10s (0: never)")
	fs.DurationVar(&sm.newJournalEntryEvery, "new-journal-entry-every", 0, "post a journal entry at this interval while serving (0: never)")
	if err := e.parse(fs); err != nil {
		return sm, err
	}
	if len(e.positional()) > 0 {
		return sm, usageErrorf("unexpected argument %q", e.positional()[0])
	}
	var err error
	check := func(ok bool, format string, a ...any) {
		if !ok && err == nil {
			err = usageErrorf(format, a...)
		}
	}
	check(*invoices >= 0, "--invoices: %d is negative", *invoices)
	check(o.PageSizeCap >= 1, "--page-size-cap: %d is not a page size (1 or more)", o.PageSizeCap)
	check(o.TokenTTL > 0, "--token-ttl: %s is not a lifetime (more than 0)", o.TokenTTL)
	check(o.Latency >= 0, "--latency: %s is negative", o.Latency)
	check(sm.preEncode >= 0, "--pre-encode: %d is negative", sm.preEncode)
	check(o.Faults.RateLimitEvery >= 0, "--rate-limit-every: %d is negative", o.Faults.RateLimitEvery)
	check(o.Faults.ServerErrorEvery >= 0, "--server-error-every: %d is negative", o.Faults.ServerErrorEvery)
	check(o.Faults.DropEvery >= 0, "--drop-every: %d is negative", o.Faults.DropEvery)
	check(sm.newInvoiceEvery >= 0, "--new-invoice-every: %s is negative", sm.newInvoiceEvery)
	check(sm.newJournalEntryEvery >= 0, "--new-journal-entry-every: %s is negative", sm.newJournalEntryEvery)
	check(slices.Contains(simulateEnvelopes, *envelope), "--envelope: %q is not one of %s", *envelope, strings.Join(simulateEnvelopes, ", "))
	o.ListEnvelope = erpsim.Envelope(*envelope)
	o.ListScope = choice(check, "--lists", *lists, simulateLists)
	o.RecordLabels = choice(check, "--labels", *labels, simulateLabels)
	o.ListOrder = choice(check, "--order", *order, simulateOrders)
	o.CursorKind = choice(check, "--cursor", *cursor, simulateCursors)
	if err != nil {
		return sm, err
	}
	o.Invoices = *invoices
	if o.Invoices == 0 {
		o.Invoices = -1 // none; the simulator's 0 is its default
	}
	if *branches != "" {
		bs, err := parseBranches(*branches)
		if err != nil {
			return sm, err
		}
		o.BranchID = bs[0]
		for _, b := range bs {
			o.Users = append(o.Users, branchUser(b))
		}
	}
	return sm, nil
}

// choice is the value named name among choices, as flag says; an unknown
// name is reported through check.
func choice[T any](check func(bool, string, ...any), flag, name string, choices map[string]T) T {
	v, ok := choices[name]
	check(ok, "%s: %q is not one of %s", flag, name, strings.Join(slices.Sorted(maps.Keys(choices)), ", "))
	return v
}

// parseBranches reads --branches: distinct positive branch ids separated
// by commas.
func parseBranches(list string) ([]int, error) {
	var bs []int
	for part := range strings.SplitSeq(list, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || b < 1 {
			return nil, usageErrorf("--branches: %q is not a branch id (a whole number from 1) in %q", part, list)
		}
		if slices.Contains(bs, b) {
			return nil, usageErrorf("--branches: branch %d is named twice in %q", b, list)
		}
		bs = append(bs, b)
	}
	return bs, nil
}

// branchUser is the user `erpsync simulate --branches` serves for branch b.
func branchUser(b int) erpsim.User {
	return erpsim.User{
		Username:  fmt.Sprintf("erpsync-branch-%d", b),
		Password:  fmt.Sprintf("erpsync-demo-password-%d", b),
		CompanyID: 1,
		BranchID:  b,
	}
}

// serve serves the simulation on ln until ctx is done, saying on out what
// it serves and what it issues.
func (sm simulation) serve(ctx context.Context, ln net.Listener, out io.Writer) error {
	sim := erpsim.New(sm.opts)
	if sm.preEncode > 0 {
		sim.PreEncodeInvoicePages(sm.preEncode)
	}
	sm.describe(out, "http://"+ln.Addr().String(), sim)
	issued := make(chan struct{})
	go func() {
		defer close(issued)
		sm.issue(ctx, sim, out)
	}()
	err := sim.Serve(ctx, ln)
	<-issued
	return err
}

// describe says where the simulator is, what its lists hold and who may
// log in, in one write.
func (sm simulation) describe(out io.Writer, url string, sim *erpsim.Sim) {
	o := sm.opts
	scope := map[erpsim.ListScope]string{erpsim.ScopeCompany: "company-wide", erpsim.ScopeBranch: "branch-scoped"}[o.ListScope]
	order := map[erpsim.ListOrder]string{erpsim.OrderOldestFirst: "oldest first", erpsim.OrderNewestFirst: "newest first", erpsim.OrderUnordered: "unordered"}[o.ListOrder]
	cursor := map[erpsim.CursorKind]string{erpsim.CursorPosition: "position", erpsim.CursorLastKey: "last-key"}[o.CursorKind]
	var b strings.Builder
	fmt.Fprintf(&b, "erpsync simulator on %s: %d invoices, %d journal entries; lists %s, %s, %s cursors\n",
		url, max(o.Invoices, 0), len(sim.JournalEntries()), scope, order, cursor)
	for _, u := range sim.Users() {
		fmt.Fprintf(&b, "  user %s  password %s  (company %d, branch %d)\n", u.Username, u.Password, u.CompanyID, u.BranchID)
	}
	if sm.newInvoiceEvery > 0 {
		fmt.Fprintf(&b, "issuing an invoice every %s\n", sm.newInvoiceEvery)
	}
	if sm.newJournalEntryEvery > 0 {
		fmt.Fprintf(&b, "posting a journal entry every %s\n", sm.newJournalEntryEvery)
	}
	_, _ = io.WriteString(out, b.String())
}

// issue issues invoices and posts journal entries at their intervals until
// ctx is done, a line on out for each.
func (sm simulation) issue(ctx context.Context, sim *erpsim.Sim, out io.Writer) {
	invoices, stopInvoices := every(sm.newInvoiceEvery)
	defer stopInvoices()
	entries, stopEntries := every(sm.newJournalEntryEvery)
	defer stopEntries()
	for {
		select {
		case <-ctx.Done():
			return
		case <-invoices:
			v := sim.AddInvoices(1)[0]
			fmt.Fprintf(out, "issued invoice %d (%s, branch %d, %s)\n", v.ID, v.Number, v.BranchID, v.TotalBC)
		case <-entries:
			j := sim.AddJournalEntries(1)[0]
			fmt.Fprintf(out, "posted journal entry %s (branch %d, %s)\n", j.ID, j.BranchID, j.Total)
		}
	}
}

// every ticks at interval d, never when d is 0 (a nil channel).
func every(d time.Duration) (<-chan time.Time, func()) {
	if d <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}
