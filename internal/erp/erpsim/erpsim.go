// Package erpsim is an in-process simulator of the ERP HTTP API that erpsync
// mirrors. It is an http.Handler: tests wrap it in httptest.NewServer,
// `erpsync demo` serves it on loopback with Serve.
//
// The simulator follows the reference (token auth, cursor-paged invoice list,
// currency scope rules, accounting and messaging lists) and has knobs for what
// real installations do: page-size cap, token lifetime, 429 with Retry-After,
// 5xx, dropped connections, latency, money as JSON number or string and
// different list envelopes. Hostile knobs serve what a client has not seen:
// records Postgres cannot store as they are, odd detail records, other
// paging schemes (some impossible to follow), empty and huge answers, ids
// with slashes, refused cursors, per-route statuses, unknown envelopes,
// drifting fields (records, preview lines, tree nodes) and lists silently cut
// at a default page size. Several users of one installation carry their own
// company and branch; lists are company- or branch-scoped, records may be
// labelled, balance sheets may depend on date_to (and late entries), and
// requests in flight and each request's user are observable. The paged lists
// (invoices, journal entries) are served oldest first, newest first or in no
// order, invoices with position or last-key cursors, and change while they
// are read: records issued, deleted and edited, at a fixed request of a
// route if a test wants (SetRouteHook), cheaply at a million invoices;
// requests are counted per route. All state of a simulator sits behind one
// mutex. A Fleet serves many independent
// simulators under /t/<tenant>/ from one handler.
package erpsim

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// Envelope is the response shape of the simple list routes.
type Envelope string

// The list envelopes a client must accept.
const (
	EnvelopeData       Envelope = "data"       // {"ok":true,"data":[...]}
	EnvelopeArray      Envelope = "array"      // bare [...]
	EnvelopeResults    Envelope = "results"    // DRF: {"count","next","previous","results"}; ?page=N, page size = PageSizeCap
	EnvelopeDataTables Envelope = "datatables" // {"draw","recordsTotal","recordsFiltered","data"}
)

// Faults injects failures into data GETs (any GET except /api/auth/*).
// Each kind keeps its own counter of all data GETs; 0 disables a kind.
// When several kinds fall on the same request, drop wins over 503 over 429.
type Faults struct {
	RateLimitEvery     int           // every Nth data GET answers 429 with Retry-After
	RetryAfter         time.Duration // default 1s; written in whole seconds (rounded up)
	RetryAfterHTTPDate bool          // write Retry-After as an HTTP date instead of seconds
	ServerErrorEvery   int           // every Nth data GET answers 503 {"detail":"unavailable"}
	DropEvery          int           // every Nth data GET: hijack and close the connection without answering
}

// User is one ERP user of the installation. Its token carries its company
// and branch context.
type User struct {
	Username, Password  string
	CompanyID, BranchID int // 0 takes Options.CompanyID / Options.BranchID
}

// Options configures a simulator. Zero values take the documented defaults.
type Options struct {
	Username, Password     string // default "erpsync" / "erpsync-demo-password"; ignored when Users is set
	PluginScheme           string // default "ERPPlugin"
	ClientID, ClientSecret string // if both set, "Authorization: <PluginScheme> <ClientID>.<ClientSecret>" is accepted
	CompanyID, BranchID    int    // default 1 and 1
	Invoices               int    // generated invoices (default 250; negative means 0)
	Seed                   int64  // deterministic generation; default 1
	PageSizeCap            int    // default 100
	DefaultPageSize        int    // default 25
	TokenTTL               time.Duration
	MoneyAsString          bool     // money written as JSON strings
	ListEnvelope           Envelope // envelope of the simple lists (default EnvelopeData)
	Latency                time.Duration
	Faults                 Faults
	MaxRequestLog          int  // default 100000
	ForbidLogin            bool // logins with good credentials answer 403
	// SlashIDs gives journal entries and vouchers ids with slashes
	// ("JE/2026/000001", "PV/2026/000001", "RV/2026/000001"), as some
	// installations number them; their journal-preview routes then take the
	// id with the slashes escaped (JE%2F2026%2F000001).
	SlashIDs bool
	// MessagingPrefix is the path under which the messaging routes are
	// served (default "/messaging"; "/" serves them at the root), since
	// installations mount the messaging channel differently. A literal path.
	MessagingPrefix string
	// The following start the knobs of the same name.
	HostileInvoices bool          // SetHostileInvoices
	HostileDetails  bool          // SetHostileDetails
	ListPaging      ListPaging    // SetListPaging, with ListPageSize
	ListPageSize    int           // default DefaultPageSize
	CursorRefusal   CursorRefusal // SetCursorRefusal
	TokenStatus     int           // SetTokenStatus
	ListOrder       ListOrder     // SetListOrder: invoices and journal entries
	CursorKind      CursorKind    // SetCursorKind: invoice cursors
	// Users, if set, are the users who may log in, each with its own
	// credentials and context (default: one user from Username, Password,
	// CompanyID and BranchID). Records belong to CompanyID; the
	// installation's branches are the distinct BranchIDs of the users of
	// that company (sorted), or BranchID when there are none. Generated
	// invoices, journal entries, vouchers and cashboxes are spread over the
	// branches round robin (reconciliations follow their cashbox).
	Users []User
	// ListScope is what a token's lists hold (SetListScope).
	ListScope ListScope
	// RecordLabels is how records name their company and branch
	// (SetRecordLabels).
	RecordLabels RecordLabels
	// BalanceSheetHistory makes the balance-sheet tree depend on date_to:
	// leaf balances are a base plus the postings dated on or before it
	// (PostLateEntry, SetBalanceSheetIgnoresDate, BalanceSheet). Off, the
	// tree is one static tree whoever asks and whatever the date.
	BalanceSheetHistory bool
	// Now is the clock (default time.Now); tests use it for token expiry.
	// The balance-sheet postings are dated from its reading at New.
	Now func() time.Time
}

// Request is one entry of the request log.
type Request struct {
	Method, Path, RawQuery string
	Authorization          string // header as received
	Status                 int    // status answered (0 when dropped or abandoned)
	At                     time.Time
	Username               string // user of the bearer token, if live when recorded; "" otherwise
}

// Invoice is one sales invoice of the simulated ERP.
type Invoice struct {
	ID         int64
	Number     string
	Date       string // YYYY-MM-DD
	Customer   string
	CustomerID int64 // written as customer.id
	Currency   string
	TotalBC    decimal.Decimal
	Status     string
	UpdatedAt  string // RFC3339; empty means Date + "T10:00:00Z"
	// CompanyID and BranchID are whose the invoice is (0: Options.CompanyID
	// and Options.BranchID). BranchID -1 is written as a null branch, while
	// the invoice still belongs to the first branch for scoping.
	CompanyID, BranchID int
	// Raw, if non-nil, is emitted verbatim as the record instead of the
	// encoding of the fields.
	Raw json.RawMessage
}

// Currency is one entry of the currency list.
type Currency struct {
	ID                            int64
	Code, Name                    string
	ExchangeRate                  string // written verbatim as a JSON string
	IsBase, SystemEnabled, Active bool
}

// Hook is consulted first for every request (after it is recorded). If it
// returns true the simulator does nothing else for that request.
type Hook func(w http.ResponseWriter, r *http.Request) (handled bool)

type tokenInfo struct {
	expires time.Time
	user    int // index into opts.Users
}

// Sim is the simulator. Create it with New.
type Sim struct {
	mu sync.Mutex

	opts Options // read-only after New
	now  func() time.Time

	money   bool
	env     Envelope
	latency time.Duration

	faults                  Faults
	rlCount, seCount, dropN int
	hook                    Hook
	forbidLogin             bool
	loginRL                 int
	loginRetryAfter         time.Duration

	tokens      map[string]tokenInfo
	revocations int

	log                   []Request
	logSeq                int64 // sequence number of log[0]
	nextSeq               int64
	inFlight, maxInFlight int

	branches []int // the installation's branches, sorted; never empty
	scope    ListScope
	labels   RecordLabels
	views    map[listView]invoiceView // invoice views served, dropped with the list

	ledger      map[int]*branchLedger // balance-sheet postings by branch, built on first use
	born        time.Time             // clock at New: the postings end in the month before it
	ignoresDate bool

	invoices        []Invoice // the normal invoices, as MutateInvoices sees them
	listed          []Invoice // the invoice list held: invoices, plus the hostile ones when on
	idsSorted       bool      // the ids of listed never decrease
	hostileInvoices bool
	gen             uint64
	refusal         CursorRefusal
	pre             map[preKey]*preEncoded
	order           ListOrder
	cursorKind      CursorKind

	journal      []JournalEntry // the journal entries held, oldest first; nil until first used
	journalIndex map[string]int // position in journal by id; nil until needed

	routeHooks map[string]*routeHook // by path
	routeCount map[string]int        // requests recorded by path, since New or ResetRequests

	currencies []Currency
	fx         [4]*fixtures // by fixtureKind.index, built on first use

	hostileDetails bool
	paging         ListPaging
	pagingSize     int
	tokenStatus    int
	overrides      map[string]routeOverride // by path

	authMux, dataMux *http.ServeMux
}

// New returns a simulator with generated data.
func New(opts Options) *Sim {
	return newWithNumbers(opts.withDefaults(), &invoiceNumbers{})
}

// withDefaults fills in the documented defaults.
func (opts Options) withDefaults() Options {
	if opts.Username == "" {
		opts.Username = "erpsync"
	}
	if opts.Password == "" {
		opts.Password = "erpsync-demo-password"
	}
	if opts.PluginScheme == "" {
		opts.PluginScheme = "ERPPlugin"
	}
	if opts.CompanyID == 0 {
		opts.CompanyID = 1
	}
	if opts.BranchID == 0 {
		opts.BranchID = 1
	}
	switch {
	case opts.Invoices == 0:
		opts.Invoices = 250
	case opts.Invoices < 0:
		opts.Invoices = 0
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.PageSizeCap <= 0 {
		opts.PageSizeCap = 100
	}
	if opts.DefaultPageSize <= 0 {
		opts.DefaultPageSize = 25
	}
	if opts.DefaultPageSize > opts.PageSizeCap {
		opts.DefaultPageSize = opts.PageSizeCap
	}
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = time.Hour
	}
	if opts.ListEnvelope == "" {
		opts.ListEnvelope = EnvelopeData
	}
	if opts.MaxRequestLog <= 0 {
		opts.MaxRequestLog = 100000
	}
	if opts.MessagingPrefix == "" {
		opts.MessagingPrefix = "/messaging"
	}
	opts.MessagingPrefix = strings.TrimSuffix("/"+strings.Trim(opts.MessagingPrefix, "/"), "/")
	opts.Users = usersWithDefaults(opts)
	return opts
}

// newWithNumbers is New for options with their defaults, with the table the
// invoice numbers come from (a fleet shares one between its tenants).
func newWithNumbers(opts Options, numbers *invoiceNumbers) *Sim {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	branches := installationBranches(opts)
	s := &Sim{
		opts:            opts,
		money:           opts.MoneyAsString,
		env:             opts.ListEnvelope,
		latency:         opts.Latency,
		now:             now,
		faults:          opts.Faults,
		forbidLogin:     opts.ForbidLogin,
		tokens:          map[string]tokenInfo{},
		gen:             1,
		refusal:         opts.CursorRefusal,
		invoices:        generateInvoices(opts.Invoices, opts.Seed, numbers, opts.CompanyID, branches),
		hostileInvoices: opts.HostileInvoices,
		currencies:      defaultCurrencies(),
		hostileDetails:  opts.HostileDetails,
		paging:          opts.ListPaging,
		overrides:       map[string]routeOverride{},
		branches:        branches,
		scope:           opts.ListScope,
		labels:          opts.RecordLabels,
		born:            now(),
		order:           opts.ListOrder,
		cursorKind:      opts.CursorKind,
	}
	s.pagingSize = s.pageSize(opts.ListPageSize, true)
	s.SetTokenStatus(opts.TokenStatus)
	s.relist()
	s.authMux, s.dataMux = s.authRoutes(), s.dataRoutes()
	return s
}

// ---- knobs -----------------------------------------------------------------

// SetFaults replaces the fault configuration and resets the fault counters.
func (s *Sim) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
	s.rlCount, s.seCount, s.dropN = 0, 0, 0
}

// set changes one knob under the simulator's lock: the setters below are
// each one knob.
func set[T any](s *Sim, knob *T, v T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*knob = v
}

// SetMoneyAsString switches money between JSON numbers and JSON strings.
func (s *Sim) SetMoneyAsString(b bool) { set(s, &s.money, b) }

// SetListEnvelope changes the envelope of the simple lists.
func (s *Sim) SetListEnvelope(e Envelope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e == "" {
		e = EnvelopeData
	}
	s.env = e
}

// SetLatency changes the delay added before every answer.
func (s *Sim) SetLatency(d time.Duration) { set(s, &s.latency, d) }

// SetHook installs a hook consulted first for every request; nil clears it.
func (s *Sim) SetHook(h Hook) { set(s, &s.hook, h) }

// SetForbidLogin makes logins with good credentials answer 403.
func (s *Sim) SetForbidLogin(b bool) { set(s, &s.forbidLogin, b) }

// SetTokenStatus makes successful logins answer code (e.g. 201 Created)
// with the normal token body; a code outside 200..299 restores 200.
func (s *Sim) SetTokenStatus(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if code < 200 || code > 299 {
		code = http.StatusOK
	}
	s.tokenStatus = code
}

// RateLimitLogins makes the next n logins answer 429 with Retry-After
// (whole seconds, rounded up; at least 1).
func (s *Sim) RateLimitLogins(n int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loginRL = max(n, 0)
	s.loginRetryAfter = retryAfter
}

// ---- request log -----------------------------------------------------------

// Requests returns a copy of the request log, oldest first.
func (s *Sim) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.log
	if len(l) > s.opts.MaxRequestLog {
		l = l[len(l)-s.opts.MaxRequestLog:]
	}
	return append([]Request(nil), l...)
}

// ResetRequests empties the request log and the counts of RequestCount.
func (s *Sim) ResetRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logSeq = s.nextSeq
	s.log = nil
	s.routeCount = nil
}

// RequestCount is the number of requests to path (any method and answer,
// each as the request log records it: unescaped, without a fleet tenant's
// prefix) since New or ResetRequests, however few the log keeps.
func (s *Sim) RequestCount(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.routeCount[path]
}

// routeHook is a hook of SetRouteHook and the requests it has seen.
type routeHook struct {
	f func(n int)
	n int
}

// SetRouteHook makes f run before the route at path answers a request,
// with the request's number (1 for the first since the hook was set). It
// runs only for the requests the route answers itself (after the
// credentials, faults and status overrides), with the simulator unlocked:
// f may change the lists (AddInvoices, DeleteInvoices, ...), so that a test
// changes a list at a fixed point of a read, such as before its third
// page. Path is as in SetRouteStatus; nil clears the hook.
func (s *Sim) SetRouteHook(path string, f func(n int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f == nil {
		delete(s.routeHooks, path)
		return
	}
	if s.routeHooks == nil {
		s.routeHooks = map[string]*routeHook{}
	}
	s.routeHooks[path] = &routeHook{f: f}
}

// runRouteHook runs the hook of path, if any, on its next request.
func (s *Sim) runRouteHook(path string) {
	s.mu.Lock()
	h := s.routeHooks[path]
	n := 0
	if h != nil {
		h.n++
		n = h.n
	}
	s.mu.Unlock()
	if h != nil {
		h.f(n)
	}
}

func (s *Sim) record(r *http.Request) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := s.opts.MaxRequestLog
	if len(s.log) >= 2*limit {
		drop := len(s.log) - limit + 1
		nl := make([]Request, len(s.log)-drop, 2*limit)
		copy(nl, s.log[drop:])
		s.log = nl
		s.logSeq += int64(drop)
	}
	seq := s.nextSeq
	s.nextSeq++
	if s.routeCount == nil {
		s.routeCount = map[string]int{}
	}
	s.routeCount[r.URL.Path]++
	now := s.now()
	s.log = append(s.log, Request{
		Method:        r.Method,
		Path:          r.URL.Path,
		RawQuery:      r.URL.RawQuery,
		Authorization: r.Header.Get("Authorization"),
		At:            now,
		Username:      s.tokenUser(r, now),
	})
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	return seq
}

// tokenUser is the username of the live bearer token of r, "" if none.
// Caller holds s.mu.
func (s *Sim) tokenUser(r *http.Request, now time.Time) string {
	tok, ok := s.bearer(r)
	if !ok {
		return ""
	}
	if t, ok := s.tokens[tok]; ok && now.Before(t.expires) {
		return s.opts.Users[t.user].Username
	}
	return ""
}

// finish ends request seq: it logs the status answered and leaves the
// requests in flight.
func (s *Sim) finish(seq int64, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	i := seq - s.logSeq
	if i >= 0 && i < int64(len(s.log)) {
		s.log[i].Status = status
	}
}

// MaxInFlight is the highest number of requests (any route, auth included)
// served at the same moment since New or ResetMaxInFlight, each counted from
// when it is recorded until its handler returns (latency included), so that
// a client's concurrency is visible.
func (s *Sim) MaxInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxInFlight
}

// ResetMaxInFlight starts MaxInFlight again from the requests in flight now.
func (s *Sim) ResetMaxInFlight() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxInFlight = s.inFlight
}

// ---- invoices ----------------------------------------------------------------

// Invoices returns a copy of the invoice list served, in page order (the
// list order in force): the invoices, with the hostile ones mixed in when
// SetHostileInvoices is on. Generated invoices have CompanyID and BranchID
// filled in.
func (s *Sim) Invoices() []Invoice {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.orderedView(nil)
	out := make([]Invoice, v.len())
	for i := range out {
		out[i] = *v.at(i)
	}
	return out
}

// MutateInvoices replaces the invoices with f's result, under the lock. f
// sees the normal invoices only, never the hostile ones. It drops any
// pre-encoded pages.
func (s *Sim) MutateInvoices(f func([]Invoice) []Invoice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.invoices = f(s.invoices)
	s.relist()
}

// InvoiceTotal is the exact sum of TotalBC over the invoices whose Raw is nil.
func (s *Sim) InvoiceTotal() decimal.Decimal {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := decimal.Zero
	for i := range s.invoices {
		if s.invoices[i].Raw == nil {
			sum = sum.Add(s.invoices[i].TotalBC)
		}
	}
	return sum
}

// InvalidateCursors bumps the cursor generation: every cursor issued before
// is refused as SetCursorRefusal says (by default 400
// {"ok":false,"error":"invalid cursor"}).
func (s *Sim) InvalidateCursors() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
}

// ---- tokens ------------------------------------------------------------------

// ExpireTokens makes every issued token answer 401, as if expired.
func (s *Sim) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.tokens)
}

// ActiveTokens is the number of tokens that are neither expired nor revoked.
func (s *Sim) ActiveTokens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	n := 0
	for _, t := range s.tokens {
		if now.Before(t.expires) {
			n++
		}
	}
	return n
}

// Revocations is the number of successful revokes so far.
func (s *Sim) Revocations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revocations
}

// ---- currencies ----------------------------------------------------------------

// Currencies returns a copy of the currency table.
func (s *Sim) Currencies() []Currency {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Currency(nil), s.currencies...)
}

// SetCurrencies replaces the currency table.
func (s *Sim) SetCurrencies(c []Currency) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.currencies = append([]Currency(nil), c...)
}

// SetCurrencyRate sets the exchange rate (verbatim) of the currency with that
// code; an unknown code is ignored.
func (s *Sim) SetCurrencyRate(code, rate string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.currencies {
		if s.currencies[i].Code == code {
			s.currencies[i].ExchangeRate = rate
		}
	}
}

func defaultCurrencies() []Currency {
	return []Currency{
		{ID: 1, Code: "USD", Name: "US Dollar", ExchangeRate: "1.000000", IsBase: true, SystemEnabled: true, Active: true},
		{ID: 2, Code: "EUR", Name: "Euro", ExchangeRate: "0.921500", SystemEnabled: true, Active: true},
		{ID: 3, Code: "GBP", Name: "Pound Sterling", ExchangeRate: "0.789300", SystemEnabled: true, Active: true},
		{ID: 4, Code: "JPY", Name: "Japanese Yen", ExchangeRate: "151.230000", SystemEnabled: false, Active: true},
		{ID: 5, Code: "CHF", Name: "Swiss Franc", ExchangeRate: "0.880100", SystemEnabled: true, Active: true},
		{ID: 6, Code: "SEK", Name: "Swedish Krona", ExchangeRate: "10.412000", SystemEnabled: true, Active: false},
	}
}

// ---- serving -------------------------------------------------------------------

// Serve serves the simulator on ln until ctx is done, then shuts the server
// down gracefully (bounded) and returns nil.
func (s *Sim) Serve(ctx context.Context, ln net.Listener) error {
	return serve(ctx, ln, s)
}

func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	baseCtx, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	cancelBase() // abort latency sleeps of requests in flight
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	<-errc
	return nil
}

// statusWriter captures the status answered.
type statusWriter struct {
	http.ResponseWriter
	status   int
	hijacked bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("erpsim: hijack not supported")
	}
	c, rw, err := h.Hijack()
	if err == nil {
		w.hijacked = true
	}
	return c, rw, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServeHTTP answers one request.
func (s *Sim) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	seq := s.record(r)
	w := &statusWriter{ResponseWriter: rw}
	defer func() {
		st := w.status
		if w.hijacked {
			st = 0
		}
		s.finish(seq, st)
	}()

	s.mu.Lock()
	hook := s.hook
	latency := s.latency
	s.mu.Unlock()

	if hook != nil && hook(w, r) {
		if w.status == 0 && !w.hijacked {
			w.status = http.StatusOK
		}
		return
	}
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}

	isAuth := strings.HasPrefix(r.URL.Path, "/api/auth/")
	isRead := r.Method == http.MethodGet || r.Method == http.MethodHead
	if !isRead && !(isAuth && r.Method == http.MethodPost) {
		// Writes are recorded and acknowledged so tests can prove erpsync never writes.
		writeJSON(w, http.StatusOK, `{"ok":true}`)
		return
	}
	if isAuth {
		serveRoute(s.authMux, w, r)
		return
	}
	if s.injectFault(w) {
		return
	}
	v, ok := s.viewer(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="erp"`)
		writeJSON(w, http.StatusUnauthorized, `{"detail":"token missing, invalid or expired"}`)
		return
	}
	r = withViewer(r, v)
	if s.answerOverride(w, r) {
		return
	}
	s.runRouteHook(r.URL.Path)
	serveRoute(s.dataMux, w, r)
}

// injectFault applies Faults to a data GET; it reports whether it answered.
func (s *Sim) injectFault(w *statusWriter) bool {
	s.mu.Lock()
	f := s.faults
	s.rlCount++
	s.seCount++
	s.dropN++
	drop := f.DropEvery > 0 && s.dropN%f.DropEvery == 0
	se := f.ServerErrorEvery > 0 && s.seCount%f.ServerErrorEvery == 0
	rl := f.RateLimitEvery > 0 && s.rlCount%f.RateLimitEvery == 0
	now := s.now()
	s.mu.Unlock()
	switch {
	case drop:
		if h, ok := w.ResponseWriter.(http.Hijacker); ok {
			if c, _, err := h.Hijack(); err == nil {
				w.hijacked = true
				_ = c.Close()
				return true
			}
		}
		w.hijacked = true
		panic(http.ErrAbortHandler)
	case se:
		writeJSON(w, http.StatusServiceUnavailable, `{"detail":"unavailable"}`)
		return true
	case rl:
		writeRetryAfter(w, f.RetryAfter, f.RetryAfterHTTPDate, now)
		writeJSON(w, http.StatusTooManyRequests, `{"detail":"rate limited"}`)
		return true
	}
	return false
}

func writeRetryAfter(w http.ResponseWriter, d time.Duration, httpDate bool, now time.Time) {
	if d <= 0 {
		d = time.Second
	}
	if httpDate {
		at := now.Add(d).UTC()
		if t := at.Truncate(time.Second); t.Before(at) {
			at = t.Add(time.Second)
		}
		w.Header().Set("Retry-After", at.Format(http.TimeFormat))
		return
	}
	w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(d), 10))
}

func ceilSeconds(d time.Duration) int64 {
	sec := int64((d + time.Second - 1) / time.Second)
	return max(sec, 1)
}

// ---- auth ------------------------------------------------------------------------

func (s *Sim) bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return "", false
	}
	return tok, true
}

func (s *Sim) pluginOK(r *http.Request) bool {
	o := s.opts
	if o.ClientID == "" || o.ClientSecret == "" {
		return false
	}
	want := o.PluginScheme + " " + o.ClientID + "." + o.ClientSecret
	got := r.Header.Get("Authorization")
	return subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

func (s *Sim) tokenLive(tok string) bool {
	_, ok := s.liveToken(tok)
	return ok
}

// liveToken returns the token's info if it is neither expired nor revoked.
func (s *Sim) liveToken(tok string) (tokenInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tokens[tok]
	if !ok {
		return tokenInfo{}, false
	}
	if !s.now().Before(t.expires) {
		delete(s.tokens, tok)
		return tokenInfo{}, false
	}
	return t, true
}

// viewer is whom the credentials of r belong to: the user of a live bearer
// token, else the plugin credentials (with Options' context); false when
// neither.
func (s *Sim) viewer(r *http.Request) (viewer, bool) {
	if tok, ok := s.bearer(r); ok {
		if t, ok := s.liveToken(tok); ok {
			u := s.opts.Users[t.user]
			return viewer{user: t.user, company: u.CompanyID, branch: u.BranchID}, true
		}
	}
	if s.pluginOK(r) {
		return s.pluginViewer(), true
	}
	return viewer{}, false
}

// me answers who the credentials belong to, with the company and branch
// context of the token. The first user has id 7, the next 8 and so on; the
// plugin credentials answer as the first user's id with the client id.
func (s *Sim) me(w http.ResponseWriter, r *http.Request) {
	v, ok := s.viewer(r)
	if !ok {
		writeJSON(w, http.StatusUnauthorized, `{"detail":"token missing, invalid or expired"}`)
		return
	}
	me := meJSON{ID: 7, Username: s.opts.ClientID, CompanyID: v.company, BranchID: v.branch}
	if v.user >= 0 {
		me.ID, me.Username = 7+v.user, s.opts.Users[v.user].Username
	}
	writeValue(w, http.StatusOK, me)
}

type meJSON struct {
	ID        int    `json:"id"`
	Username  string `json:"username"`
	CompanyID int    `json:"company_id"`
	BranchID  int    `json:"branch_id"`
}

// revoke ends only the presented token.
func (s *Sim) revoke(w http.ResponseWriter, r *http.Request) {
	tok, ok := s.bearer(r)
	if !ok || !s.tokenLive(tok) {
		writeJSON(w, http.StatusUnauthorized, `{"detail":"token missing, invalid or expired"}`)
		return
	}
	s.mu.Lock()
	delete(s.tokens, tok)
	s.revocations++
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, `{"ok":true}`)
}

type tokenJSON struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int64  `json:"expires_in"`
	ExpiresAt   string `json:"expires_at"`
	CompanyID   int    `json:"company_id"`
	BranchID    int    `json:"branch_id"`
}

func (s *Sim) login(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.loginRL > 0 {
		s.loginRL--
		ra := s.loginRetryAfter
		now := s.now()
		s.mu.Unlock()
		writeRetryAfter(w, ra, false, now)
		writeJSON(w, http.StatusTooManyRequests, `{"detail":"too many login attempts"}`)
		return
	}
	forbid, status := s.forbidLogin, s.tokenStatus
	s.mu.Unlock()
	o := s.opts

	var body struct {
		Username *string `json:"username"`
		Password *string `json:"password"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	if err := dec.Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, `{"detail":"malformed JSON body"}`)
		return
	}
	if body.Username == nil || body.Password == nil || *body.Username == "" || *body.Password == "" {
		writeJSON(w, http.StatusBadRequest, `{"detail":"username and password are required"}`)
		return
	}
	user := findUser(o.Users, *body.Username, *body.Password)
	if user < 0 {
		writeJSON(w, http.StatusUnauthorized, `{"detail":"invalid credentials"}`)
		return
	}
	if forbid {
		writeJSON(w, http.StatusForbidden, `{"detail":"login forbidden: company, branch or license unavailable"}`)
		return
	}
	var raw [20]byte
	_, _ = rand.Read(raw[:])
	tok := hex.EncodeToString(raw[:])
	s.mu.Lock()
	now := s.now()
	exp := now.Add(o.TokenTTL)
	s.tokens[tok] = tokenInfo{expires: exp, user: user}
	s.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	writeValue(w, status, tokenJSON{
		AccessToken: tok,
		TokenType:   "Bearer",
		ExpiresIn:   ceilSeconds(o.TokenTTL),
		ExpiresAt:   exp.UTC().Format(time.RFC3339),
		CompanyID:   o.Users[user].CompanyID,
		BranchID:    o.Users[user].BranchID,
	})
}

// findUser returns the index of the user with these credentials, -1 if
// none. Every user is compared in full, in constant time.
func findUser(users []User, username, password string) int {
	found := -1
	for i, u := range users {
		userOK := subtle.ConstantTimeCompare([]byte(username), []byte(u.Username)) == 1
		passOK := subtle.ConstantTimeCompare([]byte(password), []byte(u.Password)) == 1
		if userOK && passOK && found < 0 {
			found = i
		}
	}
	return found
}
