package model

// The window of a paged list: the newest pages a window run re-reads.
// Its bounds are written once here, for the runs that size it, the
// configuration that may set it and the estimate of what it costs.
const (
	// MaxWindowPages is the largest window: the anchors a login keeps to
	// start one from, and the most window_pages may set.
	MaxWindowPages = 100
	// UntaughtWindowPages is the window's size until enough changes were
	// seen to learn it from.
	UntaughtWindowPages = 20
)
