package model

import "time"

// StreamStatus is where one key (a source's stream through one login)
// stands: its last run, its complete sweeps and, for a list that is
// followed, its follow runs. Freshness is the time of the last completed
// sweep (or snapshot): the warehouse holds everything the ERP listed then.
// The groups are embedded, so that the JSON of status --json is flat.
type StreamStatus struct {
	Key
	// Contract is what the API reference says of the stream's route:
	// reviewed, unreviewed, or not stated.
	Contract string `json:"contract,omitempty"`
	Schedules
	LastRun
	SweepStatus
	FollowStatus
	WindowStatus
	// RequestsPerHour is what the stream asks of the ERP an hour through
	// the login at its schedules, by kind of run, and how far its window
	// runs and sweeps are stretched to fit the source's budget.
	RequestsPerHour map[RunKind]float64 `json:"expected_requests_per_hour,omitempty"`
	ScheduleStretch float64             `json:"schedule_stretch,omitempty"`
	// StreamWarning is what the login's last successful run warned of
	// (a list that may be cut, an installation that ignores date_to).
	StreamWarning string `json:"-"`
	// Warning says what needs an operator's eye, "" when nothing does.
	Warning string `json:"warning,omitempty"`
}

// Schedules are when the stream runs (for a list that is followed, its
// follow runs, its window runs and its complete sweeps), and where they
// came from: the stream's defaults, or the settings that gave them.
type Schedules struct {
	Schedule       string `json:"schedule,omitempty"`
	SweepSchedule  string `json:"sweep_schedule,omitempty"`
	WindowSchedule string `json:"window_schedule,omitempty"`
	SchedulesFrom  string `json:"schedules_from,omitempty"`
}

// LastRun is the key's last run, of either kind.
type LastRun struct {
	LastRunID       int64      `json:"last_run_id,omitempty"`
	LastRunStatus   RunStatus  `json:"last_run_status,omitempty"`
	LastRunKind     RunKind    `json:"last_run_kind,omitempty"`
	LastRunHost     string     `json:"last_run_host,omitempty"`
	LastRunPID      int32      `json:"last_run_pid,omitempty"`
	LastRunStarted  *time.Time `json:"last_run_started,omitempty"`
	LastRunFinished *time.Time `json:"last_run_finished,omitempty"`
	LastError       string     `json:"last_error,omitempty"`
	Rows            int64      `json:"rows_last_run"`
	// ProcessGone: the last run is recorded as running, but its process is
	// gone (killed, or its database connection lost): nothing holds the
	// lock it ran under. The next run of its kind closes it as abandoned
	// and carries on (a cursor-paged sweep from its checkpoint).
	ProcessGone bool `json:"process_gone,omitempty"`
}

// SweepStatus is what the key's complete sweeps say.
type SweepStatus struct {
	// LastSuccess is the last completed sweep: the data are as of then.
	LastSuccess     *time.Time `json:"last_success,omitempty"`
	FreshnessSecs   *float64   `json:"freshness_seconds,omitempty"`
	SweepInProgress bool       `json:"sweep_in_progress"`
	SweepPages      int64      `json:"sweep_pages"`
	SweepRows       int64      `json:"sweep_rows"`
	// SweepResumable: the sweep in progress has a cursor to resume from;
	// without one, the next sweep starts over.
	SweepResumable bool   `json:"sweep_resumable,omitempty"`
	LastSweepRows  *int64 `json:"last_sweep_rows,omitempty"`
	// FirstLoad: the sweep in progress is the login's first load (it has
	// no complete sweep yet).
	FirstLoad bool `json:"first_load,omitempty"`
	// HeldDeletions are rows the deletion guard holds (see erpsync sync
	// --confirm-deletions).
	HeldDeletions int64 `json:"held_deletions,omitempty"`
	// ListScope is what the login's sweeps showed of the lists: "branch",
	// "company" (every login of the company reads every record), or "".
	ListScope string `json:"list_scope,omitempty"`
	// ListOrder is the order the login's last complete sweeps agree
	// the list's ids come in ("ascending", "descending", "unordered"; ""
	// when they do not say): a paged list is followed in a strict order.
	ListOrder Order `json:"list_order,omitempty"`
}

// FollowStatus is what the key's follow runs say.
type FollowStatus struct {
	// LastFollow is when a follow run last read everything new;
	// NewRecordsSecs how long ago that, or the last complete sweep, was;
	// FollowSwept why the last follow run read the whole list instead.
	LastFollow     *time.Time `json:"last_follow,omitempty"`
	NewRecordsSecs *float64   `json:"new_records_seconds,omitempty"`
	FollowSwept    string     `json:"follow_swept,omitempty"`
}

// WindowStatus is what the key's window runs say: when one last re-read
// the list's newest pages, how long ago that (or the last complete
// sweep) was, and the window: its pages, the lowest id it read (it runs
// from there to the list's newest end) and why it has that size.
type WindowStatus struct {
	LastWindow        *time.Time `json:"last_window,omitempty"`
	RecentChangesSecs *float64   `json:"recent_changes_seconds,omitempty"`
	WindowPages       int        `json:"window_pages,omitempty"`
	WindowFromID      string     `json:"window_from_id,omitempty"`
	WindowSizeWhy     string     `json:"window_size_why,omitempty"`
}
