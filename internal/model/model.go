// Package model holds the plain values that erpsync's packages hand to
// each other: which reading of the ERP a run is (Key, Scope), what it is
// called when it ends and what it counted. It imports nothing of erpsync,
// so the database, metrics, scheduler and commands can share these types
// without depending on one another.
package model

import "time"

// RunStatus is the outcome of a run, as stored in erp.sync_runs.status
// and used as the status label of the runs metric.
type RunStatus string

const (
	StatusRunning   RunStatus = "running"
	StatusSucceeded RunStatus = "succeeded"
	StatusFailed    RunStatus = "failed"
	StatusCancelled RunStatus = "cancelled"
)

// RunKind is what a run does, as stored in erp.sync_runs.kind: a complete
// sweep reads a whole stream and decides its deletions; a follow run reads
// what is new in a paged list; a window run re-reads its newest pages and
// decides the deletions among them; a reset starts a stream over.
type RunKind string

const (
	KindSweep  RunKind = "sweep"
	KindFollow RunKind = "follow"
	KindWindow RunKind = "window"
	KindReset  RunKind = "reset"
)

// FinalStatuses are the statuses a run can end with.
var FinalStatuses = []RunStatus{StatusSucceeded, StatusFailed, StatusCancelled}

// RunStats are the counters of a run, or of the part of it one commit
// wrote.
type RunStats struct {
	Pages, Seen, Inserted, Updated, Unchanged, Rejected, Deleted int64
}

// Add accumulates another part's counters.
func (s *RunStats) Add(o RunStats) {
	s.Pages += o.Pages
	s.Seen += o.Seen
	s.Inserted += o.Inserted
	s.Updated += o.Updated
	s.Unchanged += o.Unchanged
	s.Rejected += o.Rejected
	s.Deleted += o.Deleted
}

// Key names one reading of the ERP: a stream of a configured source, read
// through one of its logins (its username or client id; "" for what was
// recorded before logins). A checkpoint, a run and a follow state are
// each of one key.
type Key struct {
	Source string `json:"source"`
	Stream string `json:"stream"`
	Login  string `json:"login"`
}

func (k Key) String() string {
	if k.Login == "" {
		return k.Source + "/" + k.Stream
	}
	return k.Source + "/" + k.Stream + " (" + k.Login + ")"
}

// Scope is a key as its login reads it: with the company and branch
// context of the login's token, which labels the rows whose records carry
// none.
type Scope struct {
	Key
	CompanyID, BranchID string
}

// RunOutcome is what a finished run tells its observers.
type RunOutcome struct {
	Login   string
	Kind    RunKind
	Status  RunStatus
	Elapsed time.Duration
	// FreshAt is when the stream's data were complete, if this run
	// completed them (zero otherwise).
	FreshAt time.Time
	// FollowedAt is when a follow run had read everything new (zero
	// otherwise); Swept, that it read the whole list to do so.
	FollowedAt time.Time
	Swept      bool
	// WindowedAt is when a window run had re-read the list's newest pages
	// (zero otherwise).
	WindowedAt time.Time
	// HeldDeletions is how many rows the deletion guard held (0: none).
	HeldDeletions int64
}

// OverdueFactor: a stream whose lock has been held, or whose data have
// aged, for more than this many intervals of its schedule is overdue and
// reported.
const OverdueFactor = 3

// Overdue is the one rule of when something has gone on too long: more
// than OverdueFactor intervals of the stream's schedule (an interval of 0
// is unknown: nothing is overdue).
func Overdue(d, interval time.Duration) bool { return interval > 0 && d > OverdueFactor*interval }
