package sync

import (
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/model"
)

// runResult is what a run did, added up apart from the handle its stream
// gets: the counters of its commits, its notes and warnings, and what it
// completed. Readings and steps return what they did; the run records it
// here, and the runner turns it into the run's Result and its row of
// erp.sync_runs.
type runResult struct {
	stats model.RunStats
	notes []string
	warns []string // what status shows until the next successful run
	// sweepID is the sweep the run walked, if any.
	sweepID int64
	// freshAt is when the stream's data were complete, if the run
	// completed them; followedAt when a follow run had read everything
	// new; windowedAt when a window run had read the newest pages; swept
	// why a follow run read the whole list instead, waited why a window
	// run read nothing.
	freshAt, followedAt, windowedAt time.Time
	swept, waited                   string
	// held counts the rows the deletion guard held.
	held int64
	// drift is the drift its commits stored, added up (see heard.go).
	drift []db.Drift
	// firstLoad: the run read the login's list whole before any complete
	// sweep of it had (see sweepRun).
	firstLoad bool
	// read is where the complete read it makes stands, for its progress.
	read readProgress
}
