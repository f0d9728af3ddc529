package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

// A lane of the freshness report: one shape of the invoice list, its
// simulator and its warehouse, and what was measured on them.

// shape is one way an ERP may keep a list that can be followed.
type shape struct {
	order  erpsim.ListOrder
	cursor erpsim.CursorKind
	// listOrder is the order the warehouse must learn from two sweeps.
	listOrder string
	// first and second name it, in the report's two header lines.
	first, second string
}

// shapes are the four a followed list may have.
var shapes = []shape{
	{erpsim.OrderOldestFirst, erpsim.CursorPosition, "ascending", "oldest first", "position"},
	{erpsim.OrderOldestFirst, erpsim.CursorLastKey, "ascending", "oldest first", "last key"},
	{erpsim.OrderNewestFirst, erpsim.CursorPosition, "descending", "newest first", "position"},
	{erpsim.OrderNewestFirst, erpsim.CursorLastKey, "descending", "newest first", "last key"},
}

func (s shape) String() string { return s.first + ", " + s.second + " cursors" }

// addedByFollow are the invoices issued before each measured follow run:
// none, one (in an ascending list after a complete sweep, on a page of its
// own), one again (on the page of the one before, as when invoices come
// one at a time), and more than two pages' worth.
var addedByFollow = []int{0, 1, 1, 250}

// The follow runs the requests an hour are computed from: nothing new,
// and one new invoice at every run.
const (
	followIdle = 0
	followBusy = 2
)

type lane struct {
	shape  shape
	n      int
	binary string
	sim    *erpsim.Sim
	env    []string // of every erpsync process of the lane
	pool   *pgxpool.Pool
	drop   func()
	daemon *process

	loads         [2]float64 // the two complete sweeps at latency 0, seconds
	sweepRequests int        // invoice requests of a complete sweep
	follows       []followRun
	outside       samples // new invoices while no sweep runs
	during        samples // new invoices while complete sweeps run
	sweep         sweepTime
	windowRun     windowRun // one `erpsync sync --window invoices` on the quiet lane
	window        windowRun // the daemon's window as the edits ended (pages, why)
	edits         []*edit
	// While the edits were measured (editWindow): the daemon's requests
	// to the ERP by kind of run, from its metrics, and the runs it
	// completed by kind.
	editWindow  time.Duration
	daemonKinds map[string]float64
	daemonRuns  map[string]runsOf
	metricsURL  string // the daemon's /metrics
	// farSwept: whether the complete sweeps that completed after the
	// edit outside the window wrote it (0: none completed).
	farSwept int
}

// followRun is one `erpsync sync --follow invoices`.
type followRun struct {
	added    int // invoices issued just before it
	requests int // to the invoice list
	secs     float64
	swept    string // why it read the whole list instead, if it did
}

// samples are the seconds new invoices took to reach the warehouse, and
// how many never did within the report's patience.
type samples struct {
	secs    []float64
	missing int
}

// sweepTime is how long a complete sweep takes at the report's latency:
// measured when sweeps completed while the invoices were issued, else
// computed from the rate of the sweep that was stopped.
type sweepTime struct {
	secs      float64
	completed int     // sweeps that completed
	pages     int64   // of the stopped sweep, when none did
	elapsed   float64 // seconds the stopped sweep had run
}

// newLane starts the lane's simulator (no latency, its pages encoded up
// front) and creates its warehouse.
func (o FreshnessOptions) newLane(ctx context.Context, sh shape, n int, name string) (*lane, error) {
	sim := erpsim.New(erpsim.Options{Invoices: n, PageSizeCap: o.PageSize, ListOrder: sh.order, CursorKind: sh.cursor})
	sim.PreEncodeInvoicePages(o.PageSize)
	base, err := serveSim(ctx, sim)
	if err != nil {
		return nil, err
	}
	dbURL, drop, err := freshDB(ctx, o.AdminURL, name)
	if err != nil {
		return nil, err
	}
	l := &lane{shape: sh, n: n, binary: o.Binary, sim: sim, env: erpsyncEnv(dbURL, base, o.PageSize), drop: drop}
	if err := migrate(ctx, dbURL); err != nil {
		l.close()
		return nil, err
	}
	if l.pool, err = db.Open(ctx, dbURL); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

func (l *lane) close() {
	if l.daemon != nil {
		l.daemon.stop()
	}
	if l.pool != nil {
		l.pool.Close()
	}
	l.drop()
}

// Patience: how long a run the report waits for may take. A follow run is
// a few requests; one that took minutes has read the whole list.
const (
	loadTimeout   = 30 * time.Minute
	followTimeout = 3 * time.Minute
)

// load fills the warehouse with two complete sweeps, so that the list's
// order is known and the next runs follow it, and counts a sweep's
// requests.
func (l *lane) load(ctx context.Context) error {
	for i := range l.loads {
		l.sim.ResetRequests()
		secs, err := runErpsync(ctx, loadTimeout, l.binary, l.env, "sync", "invoices")
		if err != nil {
			return err
		}
		l.loads[i] = secs
	}
	l.sweepRequests = l.sim.RequestCount(invoicesPath)
	if err := l.holds(ctx, l.n); err != nil {
		return err
	}
	var order *string
	if err := l.pool.QueryRow(ctx, `SELECT list_order FROM erp.stream_freshness WHERE stream = 'invoices'`).Scan(&order); err != nil {
		return fmt.Errorf("reading the list's order: %w", err)
	}
	if order == nil || *order != l.shape.listOrder {
		return fmt.Errorf("after two complete sweeps the warehouse holds the list's order as %v, want %s: it would not be followed", deref(order), l.shape.listOrder)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return "unknown"
	}
	return *s
}

// holds checks that the warehouse holds n live invoices.
func (l *lane) holds(ctx context.Context, n int) error {
	var live int
	if err := l.pool.QueryRow(ctx, `SELECT count(*) FROM erp.invoices WHERE deleted_at IS NULL`).Scan(&live); err != nil {
		return err
	}
	if live != n {
		return fmt.Errorf("the warehouse holds %d live invoices, the ERP %d", live, n)
	}
	return nil
}

// measureFollows runs one follow run after each number of new invoices
// and counts its requests to the invoice list.
func (l *lane) measureFollows(ctx context.Context) error {
	total := l.n
	for _, added := range addedByFollow {
		l.sim.AddInvoices(added)
		total += added
		l.sim.ResetRequests()
		secs, err := runErpsync(ctx, followTimeout, l.binary, l.env, "sync", "--follow", "invoices")
		if err != nil {
			return fmt.Errorf("the follow run after %d new invoices: %w", added, err)
		}
		f := followRun{added: added, requests: l.sim.RequestCount(invoicesPath), secs: secs}
		if err := l.pool.QueryRow(ctx, `SELECT coalesce(last_follow_swept, '') FROM erp.sync_follow WHERE stream = 'invoices'`).Scan(&f.swept); err != nil {
			return fmt.Errorf("reading the follow run: %w", err)
		}
		if err := l.holds(ctx, total); err != nil {
			return fmt.Errorf("after a follow run with %d new invoices: %w", added, err)
		}
		l.follows = append(l.follows, f)
	}
	return nil
}

// startDaemon starts `erpsync run` on the invoices at the report's
// schedules (the stream's defaults unless told otherwise), serving its
// metrics on a port of its own, and waits for its first follow run. Its
// complete sweeps do not come during a report: the loads have just
// completed one.
func (l *lane) startDaemon(ctx context.Context, o FreshnessOptions) error {
	var since time.Time
	if err := l.pool.QueryRow(ctx, `SELECT now()`).Scan(&since); err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	l.metricsURL = "http://" + addr + "/metrics"
	env := append(slices.Clone(l.env), "ERPSYNC_STREAMS=invoices", "ERPSYNC_HTTP_ADDR="+addr)
	env = append(env, o.daemonSchedules()...)
	p, err := startErpsync(ctx, l.binary, env, "run")
	if err != nil {
		return err
	}
	l.daemon = p
	return l.waitFor(ctx, 2*o.Follow+time.Minute, "the daemon's first follow run", func() (bool, error) {
		var followed bool
		err := l.pool.QueryRow(ctx, `SELECT coalesce(bool_or(last_follow_at > $1), false) FROM erp.sync_follow WHERE stream = 'invoices'`, since).Scan(&followed)
		return followed, err
	})
}

// freeAddr is a loopback address no one listens on, for the daemon's
// metrics.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// requestsByKind reads the daemon's requests to the ERP so far, by kind
// of run (erpsync_erp_requests_total, every route and answer).
func (l *lane) requestsByKind(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.metricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the daemon's metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the daemon's metrics: %s %v", resp.Status, err)
	}
	return requestKinds(string(body))
}

// requestKinds sums erpsync_erp_requests_total by its kind label, from
// metrics in the Prometheus text format.
func requestKinds(text string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		labels, ok := strings.CutPrefix(line, "erpsync_erp_requests_total{")
		if !ok {
			continue
		}
		end := strings.LastIndex(labels, "} ")
		if end < 0 {
			return nil, fmt.Errorf("a line of metrics that does not parse: %q", line)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(labels[end+2:]), 64)
		if err != nil {
			return nil, fmt.Errorf("a line of metrics that does not parse: %q", line)
		}
		_, kind, _ := strings.Cut(labels[:end], `kind="`)
		kind, _, _ = strings.Cut(kind, `"`)
		out[kind] += v
	}
	return out, nil
}

// waitFor polls cond until it holds, the daemon exits or timeout passes.
func (l *lane) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if err := l.daemon.exited(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %s for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// measureOutside issues new invoices while the daemon follows and no
// sweep runs.
func (l *lane) measureOutside(ctx context.Context, o FreshnessOptions) error {
	var err error
	l.outside, err = l.issue(ctx, o, l.daemon.exited)
	return err
}

// measureDuring issues new invoices while complete sweeps run back to
// back (`erpsync sync invoices`, beside the daemon, as a cron job would),
// then stops them, and times a sweep.
func (l *lane) measureDuring(ctx context.Context, o FreshnessOptions) error {
	sw := l.sweepBackToBack(ctx)
	defer sw.stop()
	const progress = `SELECT pages, extract(epoch FROM now() - sweep_started_at)::float8 FROM erp.sync_checkpoints
WHERE stream = 'invoices' AND sweep_id IS NOT NULL`
	var pages int64
	var elapsed float64
	read := func() (bool, error) {
		err := l.pool.QueryRow(ctx, progress).Scan(&pages, &elapsed)
		if errors.Is(err, pgx.ErrNoRows) {
			return sw.completions() > 0, sw.failure()
		}
		return pages > 0, err
	}
	if err := l.waitFor(ctx, 2*time.Minute, "a complete sweep to commit its first page", read); err != nil {
		return err
	}
	var err error
	l.during, err = l.issue(ctx, o, func() error {
		return errors.Join(l.daemon.exited(), sw.failure())
	})
	if err != nil {
		return err
	}
	pages, elapsed = 0, 0
	if _, err := read(); err != nil {
		return err
	}
	sw.stop()
	if err := sw.failure(); err != nil {
		return err
	}
	l.sweep = sw.time(pages, elapsed, l.sweepRequests)
	if l.sweep.secs == 0 {
		return fmt.Errorf("no complete sweep completed or committed a page while the invoices were issued")
	}
	// The sweeps began after the edit outside the window: one that
	// completed must have written it.
	for _, e := range l.edits {
		if !e.outside || e.beyond || l.sweep.completed == 0 {
			continue
		}
		var seen bool
		if err := l.pool.QueryRow(ctx, `SELECT total_bc = $2::numeric FROM erp.invoices WHERE id = $1`, e.id, e.total).Scan(&seen); err != nil {
			return err
		}
		l.farSwept = -1
		if seen {
			l.farSwept = 1
		}
	}
	return nil
}

// sweeper runs complete sweeps back to back until stopped.
type sweeper struct {
	mu        sync.Mutex
	completed []float64 // seconds of each sweep that completed
	err       error
	halt      chan struct{}
	done      chan struct{}
	once      sync.Once
}

func (l *lane) sweepBackToBack(ctx context.Context) *sweeper {
	s := &sweeper{halt: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			start := time.Now()
			p, err := startErpsync(ctx, l.binary, l.env, "sync", "invoices")
			if err != nil {
				s.fail(err)
				return
			}
			select {
			case <-p.done:
				if err := p.failure(); err != nil {
					s.fail(err)
					return
				}
				s.mu.Lock()
				s.completed = append(s.completed, time.Since(start).Seconds())
				s.mu.Unlock()
			case <-s.halt:
				p.stop()
				return
			}
		}
	}()
	return s
}

func (s *sweeper) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *sweeper) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *sweeper) completions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.completed)
}

func (s *sweeper) stop() {
	s.once.Do(func() { close(s.halt) })
	<-s.done
}

// time is a complete sweep's duration: the median of those that
// completed, else the stopped sweep's pages read over its time, scaled to
// a sweep's requests.
func (s *sweeper) time(pages int64, elapsed float64, perSweep int) sweepTime {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.completed) > 0 {
		return sweepTime{secs: median(s.completed), completed: len(s.completed)}
	}
	if pages == 0 {
		return sweepTime{}
	}
	return sweepTime{secs: elapsed * float64(perSweep) / float64(pages), pages: pages, elapsed: elapsed}
}

// pollEvery is how often the warehouse is asked for the invoices issued.
const pollEvery = 100 * time.Millisecond

// issue issues o.Samples invoices at random moments over o.Spread, one at
// a time as the ERP's users do, and times each until the warehouse holds
// it, while alive says the processes measured still run. An invoice not
// there within o.patience() is counted missing.
func (l *lane) issue(ctx context.Context, o FreshnessOptions, alive func() error) (samples, error) {
	at := make([]time.Duration, o.Samples)
	for i := range at {
		at[i] = rand.N(o.Spread)
	}
	slices.Sort(at)
	type pending struct {
		id     string
		issued time.Time
	}
	var (
		s     samples
		wait  []pending
		start = time.Now()
		tick  = time.NewTicker(pollEvery)
	)
	defer tick.Stop()
	for len(at) > 0 || len(wait) > 0 {
		for len(at) > 0 && time.Since(start) >= at[0] {
			inv := l.sim.AddInvoices(1)[0]
			wait = append(wait, pending{strconv.FormatInt(inv.ID, 10), time.Now()})
			at = at[1:]
		}
		if len(wait) > 0 {
			ids := make([]string, len(wait))
			for i, p := range wait {
				ids[i] = p.id
			}
			rows, err := l.pool.Query(ctx, `SELECT id FROM erp.invoices WHERE id = ANY($1)`, ids)
			if err != nil {
				return s, err
			}
			held, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return s, err
			}
			now := time.Now()
			wait = slices.DeleteFunc(wait, func(p pending) bool {
				switch {
				case slices.Contains(held, p.id):
					s.secs = append(s.secs, now.Sub(p.issued).Seconds())
				case now.Sub(p.issued) > o.patience():
					s.missing++
				default:
					return false
				}
				return true
			})
		}
		if err := alive(); err != nil {
			return s, err
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-tick.C:
		}
	}
	return s, nil
}

// measureWindow runs one `erpsync sync --window invoices` on the quiet
// lane, at the report's latency: what a window run of the size the
// daemon will choose asks of the ERP, and how long it takes.
func (l *lane) measureWindow(ctx context.Context) error {
	l.sim.ResetRequests()
	secs, err := runErpsync(ctx, followTimeout, l.binary, l.env, "sync", "--window", "invoices")
	if err != nil {
		return fmt.Errorf("a window run: %w", err)
	}
	l.windowRun = windowRun{requests: l.sim.RequestCount(invoicesPath), secs: secs}
	err = l.pool.QueryRow(ctx, `SELECT coalesce(pages, 0), coalesce(size_why, '') FROM erp.sync_window WHERE stream = 'invoices'`).
		Scan(&l.windowRun.pages, &l.windowRun.why)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("a window run completed and left no window in erp.sync_window")
	}
	return err
}

// windowRun is one window run: its requests to the invoice list, its
// time, the pages it read and why the window has that size.
type windowRun struct {
	requests, pages int
	secs            float64
	why             string
}

// An edit of the freshness report: an invoice changed, or deleted, at the
// ERP so many pages from the list's newest end, and when the warehouse
// showed it.
type edit struct {
	pages   int  // from the newest end (0: the newest page)
	delete  bool // deleted rather than changed
	outside bool // outside the window: left to the sweep, not waited for
	beyond  bool // the list has fewer pages: not made
	at      time.Duration

	id      string
	total   string // the changed invoice's new total
	issued  time.Time
	secs    float64 // from the change at the ERP to the warehouse; 0: not seen
	missing bool    // not seen within the report's patience
	held    bool    // held at a page boundary by a window run first
	version bool    // the change left its version in erp.invoices_history
}

func (e *edit) label() string {
	what := "an edit"
	if e.delete {
		what = "a deletion"
	}
	return fmt.Sprintf("%s %d pages from the newest end", what, e.pages)
}

// editPoll is how often the warehouse is asked for the edits made.
const editPoll = 250 * time.Millisecond

// measureEdits changes invoices inside the window (o.EditPages from the
// newest end), deletes one (o.DeletePages), and changes one outside it
// (o.FarPages), each at a random moment over o.EditSpread while the
// daemon runs at its schedules, and times each inside the window until
// the warehouse shows it. The one outside is left to the sweep: the
// report only says whether anything wrote it meanwhile. It also counts
// the daemon's requests to the ERP by kind of run, from its metrics,
// and its runs.
func (l *lane) measureEdits(ctx context.Context, o FreshnessOptions) error {
	edits := o.edits(l.n)
	before, err := l.requestsByKind(ctx)
	if err != nil {
		return err
	}
	var since time.Time
	if err := l.pool.QueryRow(ctx, `SELECT now()`).Scan(&since); err != nil {
		return err
	}
	start := time.Now()
	tick := time.NewTicker(editPoll)
	defer tick.Stop()
	for {
		pending := 0
		for _, e := range edits {
			switch {
			case e.beyond:
			case e.issued.IsZero() && time.Since(start) >= e.at:
				if err := l.make(ctx, e, o.PageSize); err != nil {
					return fmt.Errorf("%s: %w", e.label(), err)
				}
				pending++
			case e.issued.IsZero():
				pending++
			case e.secs > 0 || e.missing:
			case e.outside:
				// Not waited for: only whether anything wrote it meanwhile.
				if err := l.look(ctx, e); err != nil {
					return fmt.Errorf("%s: %w", e.label(), err)
				}
			default:
				if err := l.look(ctx, e); err != nil {
					return fmt.Errorf("%s: %w", e.label(), err)
				}
				if e.secs == 0 && time.Since(e.issued) > o.editPatience(e.delete) {
					e.missing = true
				}
				if e.secs == 0 && !e.missing {
					pending++
				}
			}
		}
		if pending == 0 {
			break
		}
		if err := l.daemon.exited(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	l.edits = edits
	l.editWindow = time.Since(start)
	after, err := l.requestsByKind(ctx)
	if err != nil {
		return err
	}
	l.daemonKinds = map[string]float64{}
	for k, n := range after {
		l.daemonKinds[k] = n - before[k]
	}
	l.daemonRuns = map[string]runsOf{}
	rows, err := l.pool.Query(ctx, `SELECT kind, count(*), coalesce(sum(extract(epoch FROM finished_at - started_at)), 0)::float8
FROM erp.sync_runs WHERE stream = 'invoices' AND started_at >= $1 AND status = 'succeeded' GROUP BY kind`, since)
	if err != nil {
		return err
	}
	var r runsOf
	var kind string
	_, err = pgx.ForEachRow(rows, []any{&kind, &r.runs, &r.secs}, func() error {
		l.daemonRuns[kind] = r
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading the daemon's runs: %w", err)
	}
	return l.pool.QueryRow(ctx, `SELECT coalesce(pages, 0), coalesce(size_why, '') FROM erp.sync_window WHERE stream = 'invoices'`).
		Scan(&l.window.pages, &l.window.why)
}

// edits are the edits the report makes on a list of about n invoices, each
// at a random moment over o.EditSpread: those inside the window
// (o.EditPages), the deletion (o.DeletePages), and the one outside it
// (o.FarPages). One the list is too short to hold (a quick look at a
// small list) is beyond it: not made, nor judged.
func (o FreshnessOptions) edits(n int) []*edit {
	var edits []*edit
	for _, p := range o.EditPages {
		edits = append(edits, &edit{pages: p})
	}
	edits = append(edits, &edit{pages: o.DeletePages, delete: true})
	if o.FarPages > 0 {
		edits = append(edits, &edit{pages: o.FarPages, outside: true})
	}
	for _, e := range edits {
		e.at = rand.N(o.EditSpread)
		e.beyond = e.pages >= n/o.PageSize
	}
	return edits
}

// runsOf are the runs of one kind the daemon completed while the edits
// were measured: how many, and their seconds in all.
type runsOf struct {
	runs int64
	secs float64
}

// make chooses the invoice the edit is about, inside its page (a deletion
// at a page boundary is held for the next read to confirm, a case judged
// apart), and changes or deletes it at the ERP. Pages are counted as the list pages
// them: from its newest end for a list newest first; from its oldest for
// one oldest first, whose newest page may be short.
func (l *lane) make(ctx context.Context, e *edit, pageSize int) error {
	var live int
	if err := l.pool.QueryRow(ctx, `SELECT count(*) FROM erp.invoices WHERE deleted_at IS NULL`).Scan(&live); err != nil {
		return err
	}
	// Edits half way into their page, deletions a quarter: never the same
	// invoice, nor one at a page boundary.
	into := pageSize / 2
	if e.delete {
		into = pageSize / 4
	}
	back := e.pages*pageSize + into // records before it, from the newest
	if l.shape.order == erpsim.OrderOldestFirst {
		last := (live - 1) / pageSize // the newest page
		back = live - 1 - ((last-e.pages)*pageSize + into)
	}
	if back < 0 || back >= live {
		return fmt.Errorf("the list has %d invoices: none lies %d pages from its newest end", live, e.pages)
	}
	if err := l.pool.QueryRow(ctx, `SELECT id FROM erp.invoices WHERE deleted_at IS NULL ORDER BY id::bigint DESC OFFSET $1 LIMIT 1`, back).Scan(&e.id); err != nil {
		return fmt.Errorf("choosing the invoice: %w", err)
	}
	id, err := strconv.ParseInt(e.id, 10, 64)
	if err != nil {
		return err
	}
	e.issued = time.Now()
	if e.delete {
		if l.sim.DeleteInvoices(id) != 1 {
			return fmt.Errorf("the ERP holds no invoice %d", id)
		}
		return nil
	}
	changed := l.sim.ChangeInvoices(func(v *erpsim.Invoice) {
		v.TotalBC = v.TotalBC.Add(decimal.NewFromInt(1))
		v.UpdatedAt = e.issued.UTC().Format(time.RFC3339)
		e.total = v.TotalBC.String()
	}, id)
	if changed != 1 {
		return fmt.Errorf("the ERP holds no invoice %d", id)
	}
	return nil
}

// look asks the warehouse whether it shows the edit yet, and notes when
// it first does; for a deletion, whether a window run holds it at a page
// boundary meanwhile.
func (l *lane) look(ctx context.Context, e *edit) error {
	var seen, held bool
	if e.delete {
		if err := l.pool.QueryRow(ctx, `SELECT deleted_at IS NOT NULL, EXISTS (SELECT 1 FROM erp.deletion_candidates WHERE kind = 'window' AND id = $1)
FROM erp.invoices WHERE id = $1`, e.id).Scan(&seen, &held); err != nil {
			return err
		}
		// A row held once was held: it leaves the held set as it is marked.
		e.held = e.held || held
	} else if err := l.pool.QueryRow(ctx, `SELECT total_bc = $2::numeric FROM erp.invoices WHERE id = $1`, e.id, e.total).Scan(&seen); err != nil {
		return err
	}
	if !seen {
		return nil
	}
	e.secs = time.Since(e.issued).Seconds()
	return l.pool.QueryRow(ctx, `SELECT count(*) > 0 FROM erp.invoices_history WHERE id = $1`, e.id).Scan(&e.version)
}
