package sync

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/erpsync/erpsync/internal/model"
)

// ProgressEvery is how often a long run logs a progress line (see
// Runner.ProgressEvery): the daemon's runs, and erpsync sync's when its
// output is not a terminal, which shows a live line instead.
const ProgressEvery = 30 * time.Second

// Progress is where a run stands after one of its commits: what the
// terminal's live line and the log's progress line say.
type Progress struct {
	model.RunStats               // the run's counters so far
	Elapsed        time.Duration // since the run began
	// Done and Total are the rows of the complete read the run is making:
	// done so far (a resumed sweep's earlier pages included), and expected
	// (0: not known): the list's size as the ERP states it (DataTables
	// recordsTotal, a DRF count), else as the login's last complete
	// sweep found it. A follow run, which reads what is new, knows
	// neither.
	Done, Total int64
	FirstLoad   bool
}

// Rate is the rows a second the run has read.
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Seen) / p.Elapsed.Seconds()
}

// Left is how long the read needs yet at the run's rate so far, when its
// total is known (and the rows it has yet, when that many remain at all).
func (p Progress) Left() (time.Duration, bool) {
	rate := p.Rate()
	if p.Total <= 0 || rate <= 0 {
		return 0, false
	}
	rest := max(p.Total-p.Done, 0)
	return time.Duration(float64(rest) / rate * float64(time.Second)).Round(time.Second), true
}

// String is the progress as a line reads it: "135 pages, 67500 rows,
// 1850 rows/s; 67500 of 200000 rows (34%), 1m12s left".
func (p Progress) String() string {
	s := fmt.Sprintf("%d pages, %d rows, %.0f rows/s", p.Pages, p.Seen, p.Rate())
	if left, ok := p.Left(); ok {
		s += fmt.Sprintf("; %d of %d rows (%d%%), %s left", p.Done, p.Total, min(100, 100*p.Done/p.Total), left)
	}
	return s
}

// attrs are the progress as a log line's attributes.
func (p Progress) attrs() []any {
	var out []any
	if p.FirstLoad {
		out = append(out, "first_load", true)
	}
	out = append(out, "pages", p.Pages, "rows", p.Seen, "rows_per_second", int64(p.Rate()), "elapsed", p.Elapsed.Round(time.Second))
	if left, ok := p.Left(); ok {
		out = append(out, "done", p.Done, "total", p.Total, "left", left)
	}
	return out
}

// progressLog logs a run's progress at INFO every Runner.ProgressEvery,
// the first time once the run has lasted that long: a run that ends
// sooner logs its summary line alone.
func (rn *Runner) progressLog(log *slog.Logger) func(Progress) {
	every := rn.ProgressEvery
	next := every
	return func(p Progress) {
		if every <= 0 || p.Elapsed < next {
			return
		}
		next = p.Elapsed + every
		log.Info("sync in progress", p.attrs()...)
	}
}

// readProgress is where the complete read a run makes stands: rows done
// and expected (0: not known), for Progress.
type readProgress struct{ done, total int64 }

// sweptTo is where a sweep stands once a transaction committed: rows
// done, and the list's size as the ERP stated it on the last page (-1: it
// did not say).
func (p *readProgress) sweptTo(rows, stated int64) {
	p.done = rows
	if stated >= 0 {
		p.total = stated
	}
}
