package mutation

// A Target is a file whose mistakes would lose, double or falsely delete a
// row, with the tests that protect it and the efficacy they must reach.
type Target struct {
	File string // its path from the module root
	// Tests is the -run expression selecting the tests that protect the
	// file: ^(TestA|TestB)$, or ^(TestA|TestB)$/^(SubA|SubB)$ to run only
	// those subtests of them (names without spaces: GOFLAGS carries it).
	// Only these run for each mutant, so that one file takes minutes.
	Tests string
	Goal  float64 // the least efficacy, in percent
	What  string  // what the file decides, for --list
}

// Targets are the files make mutate covers. The history and tamper rules
// are not among them: they live in SQL (migration 16's triggers and
// policies), which gremlins does not mutate; the access tests weaken
// each of those rules in turn instead (internal/sync's TestHistory,
// TestSchema and TestCompleteSweep/SetsRightWhatWasRewrittenInTheWarehouse).
var Targets = []Target{
	{
		File:  "internal/sync/deletion.go",
		Tests: "^(TestDecideDeletions|TestGuardHolds|TestDeletionGuard|TestCompleteSweep)$/^(MarksHoldsOrLeavesWhatTheEvidenceSays|HoldsADeletionTooLargeForOneRead|CountsTheReadsThatAgreeOnAHeldDeletion|StartsCountingAgainWhenOtherRowsAreGone|MarksAHeldDeletionWhenThreeReadsAgree|MarksAtOnceWhatAnOperatorConfirms|ForgetsAHeldDeletionWhenTheRowsAreGoneNoMore|HoldsAllLiveRowsGoneOrMoreThanHalfAndMoreThanTen|HoldsAnEmptyAnswerUntilItPassesOrThreeSweepsAgree|HoldsAnEmptyAnswerOnASmallList|MarksAHeldDeletionOnlyWhenThreeSweepsAgree|DoesNotDeleteARecordThatMovedPages|MarksNothingOfAListCutAtADefaultPageSize|MarksNothingWhenItsSeenListIsLost)$",
		Goal:  95,
		What:  "the one deletion decision: from the evidence a read gathered, which gone rows are marked deleted now, and which are held",
	},
	{
		File:  "internal/sync/sweep.go",
		Tests: "^(TestCompleteSweep|TestBulkLoad|TestFollowRun|TestLogins|TestDeletionGuard|TestList|TestUpgrade)$/^(MarksWhatIsGoneOnlyOnceCompleteAndClearsWhatComesBack|DoesNotDeleteARecordThatMovedPages|MarksNothingWhenItsSeenListIsLost|MarksNothingOfAListCutAtADefaultPageSize|StartsOverWhenTheERPRefusesItsCursor|ResumesFromItsCheckpointAfterAFailure|ComparesNoRowOfAKnownPage|WritesAKnownPageHoldingARowItWroteEarlier|FallsBackWhenARowMovesPages|MissesRecordsAddedBelowItWhichTheNextSweepCounts|DecideTheDeletionsOfWhatTheyList|HoldsAnEmptyAnswerUntilItPassesOrThreeSweepsAgree|RefreshesThePlannerStatistics|FollowsEveryPagingSignalOfAOneListRoute|SweepsAListInNoStrictOrder|StartsOverWhenItCannotResume|FailsTheRunWhenAGroupedCOPYIsRefused|CommitsAtMostTenThousandRowsAtOnce|ResumesAnInterruptedSweep|LandEveryInvoiceOnceLabelledByItsBranch|HoldsSixteenOfThirtyGoneAndMarksFifteenExactlyHalf|MarksTenOfNineteenGoneMoreThanHalfButNotMoreThanTen|HoldsElevenOfTwentyGoneMoreThanHalfAndMoreThanTen|HoldsNothingOfAnEmptyStream|MarksNothingWhenItSawFewerRecordsThanStated|MarksWhatIsGoneFromASinglePageAtOnce|DoesNotDeleteARecordThatMovedPagesOfADescendingList)$",
		Goal:  90,
		What:  "the complete sweep: where it starts or resumes, its checkpoints, which rows it finds gone",
	},
	{
		File:  "internal/sync/follow.go",
		Tests: "^(TestFollowRun)$/^(OfANewestFirstList|OfAnOldestFirstList|LeavesTheListToASweepUnderWay|SweepsWhenItCannotProveContinuityAndRecordsWhy|ProvesWhatItRead|MissesNothingWhateverTheListsShape|GivesUpOnAListThatChangesUnderEverySecondLook)$",
		Goal:  90,
		What:  "the follow run: what is new since the last read, and when a follow is not proved",
	},
	{
		File:  "internal/sync/walk.go",
		Tests: "^(TestCompleteSweep|TestBulkLoad|TestRunner|TestList|TestCommitter|TestFollowRun|TestLogins)$/^(ComparesNoRowOfAKnownPage|WritesAKnownPageHoldingARowItWroteEarlier|RefreshesThePlannerStatistics|ResumesFromItsCheckpointAfterAFailure|SyncsExactlyThroughRateLimitsServerErrorsAndExpiredTokens|FallsBackWhenARowMovesPages|MarksWhatIsGoneOnlyOnceCompleteAndClearsWhatComesBack|ResumesAfterLosingItsDatabaseConnection|GroupsMoreThanOnePageAndAtMostTenThousandRows|NamesThePagesOfAFailedCOPYAndWritesNoneOfThem|KeepsTheRatePeriodsOfThePagesThatWriteRates|BoundsAGroupInRows|StreamsTheRowsOfAGroupPageAfterPage|RemembersTheIDsItWroteUpToMaxWritten|OfANewestFirstList|LandEveryInvoiceOnceLabelledByItsBranch|FailsTheRunWhenAGroupedCOPYIsRefused)$",
		Goal:  90,
		What:  "the walk over a list's pages and the committer: each page committed with its checkpoint, grouped COPY",
	},
	{
		File:  "internal/sync/window.go",
		Tests: "^(TestWindowRun)$",
		Goal:  90,
		What:  "the window run: where it starts, what it proves, the range inside which it decides deletions",
	},
	{
		File:  "internal/sync/ledger.go",
		Tests: "^(TestLedger|TestFollowRun|TestCompleteSweep|TestWindowRun|TestUpgrade)$/^(SaysWhyAListIsNotFollowed|KeepsTheEndsOfEachAnchorsPageNewestFirstInARingOfBoundedLength|KeepsOneAnchorAPageWhenPagesAreReadAgain|TakesAnchorsOfPagesWithRecordsAndCountsInsertsAtOrBelowTheFollowedID|MissesNothingWhateverTheListsShape|OfANewestFirstList|OfAnOldestFirstList|ProvesWhatItRead|SweepsAListInNoStrictOrder|MissesRecordsAddedBelowItWhichTheNextSweepCounts|GoesOnBesideAKilledSweep|MarksWhatIsGoneOnlyOnceCompleteAndClearsWhatComesBack|CarriesASweepInterruptedByTheReleaseBeforeIntoTheLedger|ResumesAnInterruptedSweep)$",
		Goal:  90,
		What:  "the ledger: what a login learnt of a list (its order, anchors, the highest id read, records follow runs missed)",
	},
	{
		File:  "internal/sync/reads.go",
		Tests: "^(TestFollowRun|TestCompleteSweep|TestWindowRun|TestUpgrade)$/^(MissesNothingWhateverTheListsShape|ProvesWhatItRead|LeavesTheListToASweepUnderWay|SweepsWhenItCannotProveContinuityAndRecordsWhy|SweepsAListInNoStrictOrder|StartsOverWhenTheERPRefusesItsCursor|ResumesFromItsCheckpointAfterAFailure|RunsBesideASweepUnderWayWithoutTouchingIt|WaitsUntilTheListsOrderIsKnown|ResumesAnInterruptedSweep)$",
		Goal:  90,
		What:  "which readings a run of each kind walks: a follow not proved sweeps, a window waits for the list's order",
	},
	{
		File:  "internal/sync/order.go",
		Tests: "^(TestOrder)$",
		Goal:  90,
		What:  "the order of ids: which order a list keeps, and whether it can be followed",
	},
	{
		File:  "internal/erp/envelope.go",
		Tests: "^(TestDecodePage|TestDecodeObject|TestPage|TestRecord|TestKind|TestLister|TestScanner|TestValueStats)$",
		Goal:  90,
		What:  "page decoding: the envelope's records, count, next page and digest",
	},
	{
		File:  "internal/erp/lister.go",
		Tests: "^(TestDecodePage|TestDecodeObject|TestPage|TestRecord|TestKind|TestLister|TestScanner|TestValueStats)$",
		Goal:  90,
		What:  "paging signals: the one rule for following a list's pages",
	},
	{
		File:  "internal/erp/scan.go",
		Tests: "^(TestDecodePage|TestDecodeObject|TestPage|TestRecord|TestKind|TestLister|TestScanner|TestValueStats)$",
		Goal:  90,
		What:  "the exact JSON scanner: records and money read as written, malformed answers named",
	},
	{
		File:  "internal/config/validate.go",
		Tests: "^(Test.*)$",
		Goal:  90,
		What:  "the configuration's bounds: each bounded setting taken at its bounds and refused one step past",
	},
	{
		File:  "internal/config/values.go",
		Tests: "^(Test.*)$",
		Goal:  90,
		What:  "the configuration's values: numbers, durations, sizes and lists parsed as written or named",
	},
	{
		File:  "internal/config/env.go",
		Tests: "^(Test.*)$",
		Goal:  90,
		What:  "how environment variables apply over the file",
	},
}
