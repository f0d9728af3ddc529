package sync

import (
	"context"
	"errors"
	"fmt"
	gosync "sync"
	"time"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/model"
)

// preparedPage is a fetched page turned into rows to write: what it
// holds, where it stands in the list, and what a sweep learns of it.
type preparedPage struct {
	answer *erp.Page   // the rows point into it; the page source releases it
	number int64       // the page's number in the walk's pass, for messages
	scope  model.Scope // the run's, for reprepare
	pageRecords
	pagePlace
	pageEvidence
}

// pageRecords is what a page holds, ready to write.
type pageRecords struct {
	rows     []db.Row
	rejected []db.Rejected
	drift    []db.Drift
	received int
	// ids are the ids of its usable records in list order, a record
	// listed twice on it included (for the list's order).
	ids []string
}

// pagePlace is where a page stands in the list.
type pagePlace struct {
	// at is the position its request carried: asking from there asks
	// for this page again (an anchor).
	at     db.Anchor
	cursor string // cursor of the next page ("" at the end, or when not resumable)
	last   bool   // no page follows
	total  int64  // the list's size as the ERP stated it; -1 unknown
}

// pageEvidence is what a complete sweep learns of a page besides its rows.
type pageEvidence struct {
	// labelled counts its records that carry their own company and
	// branch, otherBranch those of them not of the login's.
	labelled, otherBranch int
	// cut: the list is this one page, which gave no paging signal and
	// holds exactly a page's worth of records (see mayBeCut).
	cut bool
	// known: the ERP answered the page's request with the same bytes as
	// in the last complete sweep; rows hold ids only.
	known bool
	// digest, when set, is recorded for the next sweep to know the page.
	digest *db.PageDigest
}

// errNotYet is next's answer when its wait ran out before a page came.
var errNotYet = errors.New("no page ready yet")

// pageSource reads the pages of one walk through a list route, in order,
// prepared for writing. With prefetch it fetches ahead on a goroutine
// (bounded by a channel) while the committer writes; without, it fetches
// on demand, so a crash re-fetches at most one page. It owns the pages'
// memory: the committer hands each prepared page back with release.
type pageSource struct {
	run     *Run
	lister  *erp.Lister
	prepare func(*erp.Page) *preparedPage
	base    int64 // pages of the sweep committed before this walk
	fetched int64
	asked   int // the page size the requests name (0: none)

	ch     chan fetched // nil without prefetch
	cancel context.CancelFunc
	wg     gosync.WaitGroup
	ended  bool // the last page or an error was delivered (no prefetch)
}

type fetched struct {
	page *preparedPage
	err  error
}

func (r *Run) newPageSource(ctx context.Context, req erp.ListRequest, base int64, prepare func(*erp.Page) *preparedPage, ahead bool) *pageSource {
	s := &pageSource{run: r, lister: r.login.Client.List(req), prepare: prepare, base: base, asked: req.Asked(), cancel: func() {}}
	if n := r.runner.Prefetch; n > 0 && ahead {
		var fctx context.Context
		fctx, s.cancel = context.WithCancel(ctx)
		s.ch = make(chan fetched, n-1)
		s.wg.Go(func() { s.produce(fctx) })
	}
	return s
}

// prefetching reports whether pages are fetched ahead of the writer.
func (s *pageSource) prefetching() bool { return s.ch != nil }

// produce fetches pages until the last one, an error, or cancellation.
func (s *pageSource) produce(ctx context.Context) {
	defer close(s.ch)
	for {
		f := s.fetch(ctx)
		select {
		case s.ch <- f:
		case <-ctx.Done():
			if f.page != nil {
				f.page.answer.Release()
			}
			return
		}
		if f.err != nil || f.page.last {
			return
		}
	}
}

// fetch reads and prepares the next page. A panic while decoding becomes
// the walk's error instead of killing the process from a goroutine.
func (s *pageSource) fetch(ctx context.Context) (f fetched) {
	n := s.base + s.fetched + 1
	ctx, span := startPageSpan(ctx, s.run, n)
	defer func() { endPageSpan(span, f) }()
	defer func() {
		if p := recover(); p != nil {
			f = fetched{err: fmt.Errorf("page %d: %w", n, s.run.panicked(p))}
		}
	}()
	cursor, start := s.lister.Position()
	answer, err := s.lister.Next(ctx)
	if err != nil {
		return fetched{err: fmt.Errorf("%s page %d: %w", s.run.scope.Stream, n, err)}
	}
	s.fetched++
	page := s.prepare(answer)
	page.answer, page.number, page.scope = answer, n, s.run.scope
	page.at = db.Anchor{Cursor: cursor, Start: start}
	page.last, page.cursor, page.total = s.lister.Done(), s.lister.Cursor(), s.lister.Total()
	page.cut = n == 1 && page.last && mayBeCut(answer, s.asked)
	return fetched{page: page}
}

// next returns the next page. Its errors are explicit: errStopped once a
// stop was asked for, ctx's error when cancelled, errNotYet when wait
// fires before a page is ready, or the page's fetch error.
func (s *pageSource) next(ctx context.Context, wait <-chan time.Time) (*preparedPage, error) {
	if err := s.run.Stopped(); err != nil {
		return nil, err
	}
	if s.ch == nil {
		if s.ended {
			return nil, errors.New("page source: read past the last page")
		}
		f := s.fetch(ctx)
		s.ended = f.err != nil || f.page.last
		return f.page, f.err
	}
	select {
	case f, ok := <-s.ch:
		if !ok {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return nil, errors.New("page source: read past the last page")
		}
		return f.page, f.err
	case <-s.run.stop:
		return nil, errStopped
	case <-wait:
		return nil, errNotYet
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// release hands a written page's memory back.
func (s *pageSource) release(page *preparedPage) { page.answer.Release() }

// close stops fetching and releases the pages fetched but not taken.
func (s *pageSource) close() {
	s.cancel()
	s.wg.Wait()
	if s.ch != nil {
		for f := range s.ch {
			if f.page != nil {
				f.page.answer.Release()
			}
		}
	}
}
