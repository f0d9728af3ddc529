package mutation

// A Target is a file whose mistakes would lose, double or falsely delete a
// row, with the tests that protect it and the efficacy they must reach.
type Target struct {
	File string // its path from the module root
	// Tests is the -run expression selecting the tests that protect the
	// file (top-level names: GOFLAGS cannot carry a space). Only these run
	// for each mutant, so that one file takes minutes.
	Tests string
	Goal  float64 // the least efficacy, in percent
	What  string  // what the file decides, for --list
}

// Targets are the files make mutate covers. The history and tamper rules
// are not among them: they live in SQL (migration 16's triggers and
// policies), which gremlins does not mutate; the access tests weaken
// each of those rules in turn instead (internal/sync/rewrite_test.go,
// pgtemp_test.go, catalog_test.go).
var Targets = []Target{
	{
		File:  "internal/sync/guard.go",
		Tests: "^(TestDeletionGuard|TestDeletionGuardConfirmed|TestEmptyAnswerOnSmallListIsHeld|TestListCutAtDefaultPageSizeMarksNothing|TestEmptyAccessListsAreHeld)$",
		Goal:  95,
		What:  "the deletion decision: which gone rows are marked deleted now, and which are held",
	},
	{
		File:  "internal/sync/sweep.go",
		Tests: "^(TestChangesAndDeletions|TestResumeFromCheckpointAfterFailure|TestRefusedCursorStartsNewSweep|TestBulkLoadFallsBackWhenARowMovesPages|TestLostSeenListMarksNothingDeleted|TestKnownPagesAreNotCompared|TestKnownPageWithARowWrittenEarlier|TestUnfollowablePagingMarksNothing|TestSweepDoesNotDeleteAMovedRecord|TestUpgradeOfAnInterruptedSweep)$",
		Goal:  90,
		What:  "the complete sweep: where it starts or resumes, its checkpoints, which rows it finds gone",
	},
	{
		File:  "internal/sync/follow.go",
		Tests: "^(TestFollowRuns|TestFollowSweepsAnUnorderedList|TestFollowMissedRecordsAreCounted|TestFollowSeveralLogins|TestFollowJournalEntries|TestFollowBesideAKilledSweep|TestSweepDoesNotDeleteAMovedRecord)$",
		Goal:  90,
		What:  "the follow run: what is new since the last read, and when a follow is not proved",
	},
	{
		File:  "internal/sync/walk.go",
		Tests: "^(TestChangesAndDeletions|TestResumeFromCheckpointAfterFailure|TestBulkLoadFallsBackWhenARowMovesPages|TestMalformedPageWritesNothingOfIt|TestKnownPagesAreNotCompared|TestFollowRuns|TestChaos)$",
		Goal:  90,
		What:  "the walk over a list's pages and the committer: each page committed with its checkpoint, grouped COPY",
	},
	{
		File:  "internal/sync/order.go",
		Tests: "^(TestFollowRuns|TestFollowSweepsAnUnorderedList)$",
		Goal:  90,
		What:  "the order of ids: which order a list keeps, and whether it can be followed",
	},
	{
		File:  "internal/erp/envelope.go",
		Tests: "^(TestDecodePage.*|TestEnvelopeErrorKeysSorted|TestListerArrayAndDecodeError|TestListerDRF|TestListerDataTables)$",
		Goal:  90,
		What:  "page decoding: the envelope's records, count, next page and digest",
	},
	{
		File:  "internal/erp/lister.go",
		Tests: "^(TestLister.*|TestClientCursorEncoding|TestClientAgainstSimulator)$",
		Goal:  90,
		What:  "paging signals: the one rule for following a list's pages",
	},
	{
		File:  "internal/erp/scan.go",
		Tests: "^(TestRepeatedKeys.*|TestDecodePage.*|TestParseMoney.*|TestRecord.*)$",
		Goal:  90,
		What:  "the exact JSON scanner: records and money read as written, malformed answers named",
	},
}
