package cli

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
)

// TestProbe documents `erpsync probe`: one small read of each stream's
// route through each login, saying whether it is usable and if not, why.
func TestProbe(t *testing.T) {
	t.Parallel()
	sim, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword})
	streams := "ERPSYNC_STREAMS=invoices,currencies,cashboxes,journal_entries,payment_vouchers,journal_lines,balance_sheet,cashbox_access,messaging_stats"
	env := environ(erpEnv(simURL, "", goodPassword, streams)...)

	if !t.Run("SaysEveryStreamIsUsableOnAPlainInstallation", func(t *testing.T) {
		r := runMain(t, env, "probe")
		if r.code != exitOK || strings.Count(r.stdout, "usable") != 9 {
			t.Fatalf("probe of a plain installation: want exit 0 and 9 usable streams\n%s", r)
		}
		// A list asked for without a page size (currencies: five of them)
		// may be cut only at a usual default, not at the probe's own
		// small page size, which it never sent.
		if strings.Contains(r.stdout, "may cut the list") {
			t.Errorf("probe of a plain installation warns of a cut list\n%s", r)
		}
	}) {
		return
	}

	// A list paged by cursor or start/length whose first page keeps a strict
	// order has a window, and probe says which pages it re-reads; a list read in
	// one answer has none.
	t.Run("SaysWhetherAWindowApplies", func(t *testing.T) {
		r := runMain(t, env, "probe", "--json", "invoices", "currencies")
		var lines []struct {
			Stream string `json:"stream"`
			Order  string `json:"order"`
			Window string `json:"window"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &lines); err != nil || len(lines) != 2 {
			t.Fatalf("probe --json: %v\n%s", err, r)
		}
		for _, l := range lines {
			want := map[string]string{"invoices": "a window applies: window runs re-read its last pages", "currencies": ""}[l.Stream]
			if !strings.HasPrefix(l.Window, want) || want == "" && l.Window != "" {
				t.Errorf("%s (%s): window %q, want %q", l.Stream, l.Order, l.Window, want)
			}
		}
		if r := runMain(t, env, "probe", "invoices"); !strings.Contains(r.stdout, "a window applies") {
			t.Errorf("probe's table does not say whether a window applies:\n%s", r.stdout)
		}
	})

	// Against an installation that refuses one route, lacks another,
	// answers a third in an unknown shape and sends drifted fields on a
	// fourth, probe says so per stream (with the permission a 403 needs)
	// and exits 1. It writes nothing to the ERP.
	t.Run("SaysPerStreamWhyARouteIsUnusableWritingNothing", func(t *testing.T) {
		sim.SetRouteStatus("/accounts/api/journal-entries/", http.StatusForbidden)
		sim.SetRouteStatus("/accounts/api/payment-vouchers/", http.StatusNotFound)
		sim.SetUnknownEnvelope("/accounts/api/cashboxes/", true)
		sim.SetFieldDrift("/sales/api/invoices/list/", map[string]json.RawMessage{"discount_bc": json.RawMessage(`"1.00"`)}, []string{"status"})
		r := runMain(t, env, "probe", "--json")
		if r.code != exitFailed {
			t.Fatalf("probe with broken routes: exit %d, want 1\n%s", r.code, r)
		}
		var lines []struct {
			Stream     string   `json:"stream"`
			Status     int      `json:"status"`
			Problem    string   `json:"problem"`
			Usable     bool     `json:"usable"`
			Envelope   string   `json:"envelope"`
			Paging     []string `json:"paging"`
			Missing    []string `json:"missing"`
			Unexpected []string `json:"unexpected"`
			WithID     int      `json:"with_id"`
			Records    int      `json:"records"`
			Money      []struct {
				Field  string `json:"field"`
				Parsed int    `json:"parsed"`
				Scales []int  `json:"scales"`
			} `json:"money"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &lines); err != nil {
			t.Fatalf("probe --json: %v\n%s", err, r)
		}
		by := map[string]int{}
		for i, l := range lines {
			by[l.Stream] = i
		}
		check := func(stream string, ok bool, status int, problem string) {
			t.Helper()
			i, found := by[stream]
			if !found {
				t.Fatalf("no line for %s", stream)
			}
			if l := lines[i]; l.Usable != ok || l.Status != status || !strings.Contains(l.Problem, problem) {
				t.Errorf("%s: usable %v, status %d, problem %q; want %v, %d, %q", stream, l.Usable, l.Status, l.Problem, ok, status, problem)
			}
		}
		// A 403 names every cause the reference gives.
		check("journal_entries", false, 403, "lacks accounts.journal.view, or the ERP's licence does not cover the route, or the login's company or branch context")
		check("payment_vouchers", false, 404, "route absent")
		check("cashboxes", false, 200, "unknown list envelope")
		check("journal_lines", false, 403, "lacks accounts.journal.view")
		check("invoices", true, 200, "")
		check("currencies", true, 200, "")
		inv := lines[by["invoices"]]
		if inv.Envelope != "data" || !strings.Contains(strings.Join(inv.Paging, " "), "next_cursor") || inv.WithID != inv.Records || inv.Records == 0 {
			t.Errorf("invoices: %+v", inv)
		}
		if strings.Join(inv.Missing, ",") != "status" || strings.Join(inv.Unexpected, ",") != "discount_bc" {
			t.Errorf("invoices drift: missing %v, unexpected %v; want [status], [discount_bc]", inv.Missing, inv.Unexpected)
		}
		if len(inv.Money) != 1 || inv.Money[0].Field != "total_bc" || inv.Money[0].Parsed != inv.Records {
			t.Errorf("invoices money: %+v", inv.Money)
		}
		for _, req := range sim.Requests() {
			if req.Method != http.MethodGet && req.Path != "/api/auth/token/" && req.Path != "/api/auth/revoke/" {
				t.Errorf("probe sent %s %s", req.Method, req.Path)
			}
		}

	})

	t.Run("SaysOnceThatALoginIsRefusedInsteadOfALinePerStream", func(t *testing.T) {
		r := runMain(t, environ(erpEnv(simURL, "", wrongPassword, streams)...), "probe")
		if r.code != exitFailed || !strings.Contains(r.stdout, "credentials were refused") || strings.Contains(r.combined(), wrongPassword) {
			t.Errorf("probe with a wrong password\n%s", r)
		}
	})
}

// TestWindowOf is what probe says of a paged list's window, by the order its
// first page showed: only a strict order has one.
func TestWindowOf(t *testing.T) {
	for order, want := range map[model.Order]string{
		model.OrderAscending:  "a window applies: window runs re-read its last pages",
		model.OrderDescending: "a window applies: window runs re-read its first pages",
		model.OrderUnordered:  "no window",
		model.OrderUnknown:    "a window applies once a complete sweep shows a strict order",
	} {
		if got := windowOf(order); !strings.HasPrefix(got, want) {
			t.Errorf("%q: %q, want %q", order, got, want)
		}
	}
}
