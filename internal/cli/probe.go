package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync"
)

// probeLine is one line of `erpsync probe`.
type probeLine struct {
	Source string `json:"source"`
	sync.ProbeReport
	Usable bool `json:"usable"`
	// Window says whether window runs would re-read the list's newest
	// pages ("" for a list that is not paged).
	Window string `json:"window,omitempty"`
}

// windowOf says whether a paged list whose first page showed order has a
// window: only a list in a strict order of ids does, where its newest
// pages are (its last, or its first).
func windowOf(order model.Order) string {
	switch order {
	case model.OrderAscending:
		return "a window applies: window runs re-read its last pages, from an anchor sweeps and follow runs keep"
	case model.OrderDescending:
		return "a window applies: window runs re-read its first pages"
	case model.OrderUnordered:
		return "no window: not in a strict order of ids, every run reads it whole"
	}
	return "a window applies once a complete sweep shows a strict order of ids"
}

// cmdProbe makes one small read of every enabled (or named) stream's
// route and says, per stream, whether erpsync can use it on this
// installation: the operator's first command against a real ERP. It
// needs no database and writes nothing anywhere.
func cmdProbe(e *command) error {
	fs, cfgFile := e.flags("probe")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := e.parse(fs); err != nil {
		return err
	}
	cfg, err := e.loadConfig(*cfgFile, true)
	if err != nil {
		return err
	}
	log := newLogger(cfg, e.term)
	ctx, cancel := e.signalContext()
	defer cancel()
	var lines []probeLine
	for _, src := range cfg.Sources {
		streams, err := e.streamsFor(src, e.positional())
		if err != nil {
			return err
		}
		// Answers fast rather than retrying for minutes.
		t, err := targetOf(src, log, nil, func(o *erp.Options) {
			o.MaxAttempts, o.MaxWaits, o.BackoffMax, o.MaxRetryAfter = 2, 2, time.Second, 30*time.Second
		})
		if err != nil {
			return err
		}
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Minute)
		var reports []sync.ProbeReport
		for _, l := range t.Logins {
			id, err := l.Client.Identity(pctx)
			if err != nil {
				// Without a login no route can be read: one line says why.
				rep := sync.ProbeReport{Stream: "(login)", Login: l.Name, Route: "POST /api/auth/token/"}
				rep.Failed(err)
				reports = append(reports, rep)
				continue
			}
			p := sync.NewProbe(t, l, id)
			for _, s := range streams {
				rep := p.Report(s, "")
				rep.Problem = "this stream cannot be probed"
				if pr, ok := s.(sync.Prober); ok {
					rep = pr.Probe(erp.WithAsker(pctx, erp.Asker{Stream: s.Declared().Name, Kind: erp.KindProbe}), p)
				}
				reports = append(reports, rep)
			}
		}
		sync.ListScopes(reports)
		for _, rep := range reports {
			line := probeLine{Source: src.Name, ProbeReport: rep, Usable: rep.Usable()}
			if rep.Follow != "" {
				line.Window = windowOf(rep.Order)
			}
			lines = append(lines, line)
		}
		pcancel()
		sync.RevokeTokens([]sync.Target{t}, cfg.Shutdown.Revoke, log)
	}
	if *asJSON {
		if err := e.writeJSON(lines); err != nil {
			return err
		}
	} else {
		printProbe(e.stdout, lines)
	}
	bad := 0
	for _, l := range lines {
		if !l.Usable {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d look unusable; see above", bad, len(lines))
	}
	return nil
}

func printProbe(w io.Writer, lines []probeLine) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSTREAM\tLOGIN (COMPANY/BRANCH)\tROUTE\tSTATUS\tCONTRACT\tPAGING\tRECORDS\tWITH ID\tOWN LABELS\tLISTS\tORDER\tMONEY\tFIELDS\tVERDICT")
	for _, l := range lines {
		verdict := "usable"
		if !l.Usable {
			verdict = l.Problem
		} else if l.Rejected > 0 {
			verdict = fmt.Sprintf("usable; %d would be rejected: %s", l.Rejected, l.RejectedReason)
		}
		for _, w := range l.Warnings {
			verdict += "; warning: " + w
		}
		if l.Follow != "" {
			verdict += "; " + l.Follow + "; " + l.Window
		}
		status := "-"
		if l.Status != 0 {
			status = fmt.Sprint(l.Status)
		}
		login := l.Login
		if l.CompanyID != "" || l.BranchID != "" {
			login += " (" + l.CompanyID + "/" + l.BranchID + ")"
		}
		paging := strings.TrimSpace(l.Envelope + " " + strings.Join(l.Paging, " "))
		labels := "-"
		if l.Records > 0 {
			labels = fmt.Sprintf("%d of %d", l.Labelled, l.Records)
		}
		order := l.Order
		if order == "" && l.Follow != "" {
			order = "unknown"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Source, l.Stream, dash(login), l.Route, status,
			l.Contract, dash(paging), l.Records, l.WithID, labels, listScope(l.ListScope), dash(string(order)), dash(moneySummary(l.Money)),
			dash(fieldSummary(l.Missing, l.Unexpected)), oneLine(verdict, 160))
	}
	tw.Flush()
}

// listScope says in words what ListScopes decided.
func listScope(s string) string {
	switch s {
	case "branch":
		return "branch-scoped"
	case "company":
		return "company-wide"
	}
	return "-"
}

func moneySummary(ms []sync.MoneyProbe) string {
	var parts []string
	for _, m := range ms {
		s := fmt.Sprintf("%s %d ok", m.Field, m.Parsed)
		if m.Failed > 0 {
			s += fmt.Sprintf(", %d bad", m.Failed)
		}
		if len(m.Scales) > 0 {
			s += fmt.Sprintf(" (scale %s)", strings.Trim(strings.Join(strings.Fields(fmt.Sprint(m.Scales)), ","), "[]"))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func fieldSummary(missing, unexpected []string) string {
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, "missing: "+strings.Join(missing, ","))
	}
	if len(unexpected) > 0 {
		parts = append(parts, "unexpected: "+strings.Join(unexpected, ","))
	}
	return strings.Join(parts, "; ")
}
