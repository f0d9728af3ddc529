package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/sync"
)

// probeLine is one line of `erpsync probe`.
type probeLine struct {
	Source string `json:"source"`
	sync.ProbeReport
	Usable bool `json:"usable"`
}

// cmdProbe makes one small read of every enabled (or named) stream's
// route and says, per stream, whether erpsync can use it on this
// installation: the operator's first command against a real ERP. It
// needs no database and writes nothing anywhere.
func cmdProbe(e *env) error {
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
	ctx, cancel := signalContext()
	defer cancel()
	var lines []probeLine
	for _, src := range cfg.Sources {
		streams, err := e.streamsFor(src, e.positional())
		if err != nil {
			return err
		}
		// Answers fast rather than retrying for minutes.
		client, err := newClient(src, log, nil, func(o *erp.Options) {
			o.MaxAttempts, o.MaxWaits, o.BackoffMax, o.MaxRetryAfter = 2, 2, time.Second, 30*time.Second
		})
		if err != nil {
			return err
		}
		t := target(src, client)
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Minute)
		if _, err := client.Identity(pctx); err != nil {
			// Without a login no route can be read: one line says why.
			rep := sync.ProbeReport{Stream: "(login)", Route: "/api/auth/token/"}
			rep.Failed(err)
			lines = append(lines, probeLine{Source: src.Name, ProbeReport: rep})
		} else {
			for _, s := range streams {
				rep := sync.ProbeReport{Stream: s.Name(), Problem: "this stream cannot be probed"}
				if p, ok := s.(sync.Prober); ok {
					rep = p.Probe(pctx, t)
				}
				lines = append(lines, probeLine{Source: src.Name, ProbeReport: rep, Usable: rep.Usable()})
			}
		}
		_ = client.Close(pctx)
		pcancel()
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
	fmt.Fprintln(tw, "SOURCE\tSTREAM\tROUTE\tSTATUS\tENVELOPE\tPAGING\tRECORDS\tWITH ID\tMONEY\tFIELDS\tVERDICT")
	for _, l := range lines {
		verdict := "usable"
		if !l.Usable {
			verdict = l.Problem
		} else if l.Rejected > 0 {
			verdict = fmt.Sprintf("usable; %d would be rejected: %s", l.Rejected, l.RejectedReason)
		}
		status := "-"
		if l.Status != 0 {
			status = fmt.Sprint(l.Status)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", l.Source, l.Stream, l.Route, status,
			dash(l.Envelope), dash(strings.Join(l.Paging, " ")), l.Records, l.WithID, dash(moneySummary(l.Money)),
			dash(fieldSummary(l.Missing, l.Unexpected)), oneLine(verdict, 120))
	}
	tw.Flush()
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
