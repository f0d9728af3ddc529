package erp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
)

const cashboxes = "/accounts/api/cashboxes/"

// hugeSim serves the simulator with a huge answer at /accounts/api/cashboxes/
// and a client limited to limit bytes.
func hugeSim(t *testing.T, limit int64) (*erpsim.Sim, *Client, *recObserver) {
	t.Helper()
	obs := &recObserver{}
	sim, c := newSimClient(t, erpsim.Options{}, func(o *Options) {
		o.MaxResponse = limit
		o.Hints.MaxResponse = "ERPSYNC_ERP_MAX_RESPONSE"
		o.Observer = obs
	})
	return sim, c, obs
}

func dataGETs(sim *erpsim.Sim) int {
	n := 0
	for _, r := range sim.Requests() {
		if r.Method == http.MethodGet && r.Path == cashboxes {
			n++
		}
	}
	return n
}

// checkTooLarge: the error is a TooLargeError naming the route, the limit
// and the setting, after one request and no retry.
func checkTooLarge(t *testing.T, err error, limit int64, gets int, obs *recObserver) {
	t.Helper()
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Route != cashboxes || tl.Limit != limit || tl.Method != http.MethodGet {
		t.Fatalf("err = %v (%T), want a TooLargeError of GET %s, limit %d", err, err, cashboxes, limit)
	}
	if !strings.Contains(err.Error(), "(ERPSYNC_ERP_MAX_RESPONSE)") {
		t.Errorf("error %q does not name the setting", err)
	}
	if gets != 1 {
		t.Errorf("%d requests, want 1: a too large answer is not retried", gets)
	}
	if _, retries, _ := obs.snapshot(); len(retries) != 0 {
		t.Errorf("retries %v, want none", retries)
	}
}

// endless is an answer that never ends.
type endless struct{ n int64 }

func (e *endless) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = 'x'
	}
	e.n += int64(len(b))
	return len(b), nil
}

// TestBody documents how an answer's body is read: up to the client's limit,
// and one larger is refused at once, naming the limit and the setting, and not
// retried. Not parallel: IsRefusedWithLittleMoreThanTheLimitAllocated counts
// the process's allocations.
func TestBody(t *testing.T) {
	t.Run("IsRefusedInAnErrorNamingTheLimitAndItsSetting", func(t *testing.T) {
		for _, tt := range []struct {
			err  TooLargeError
			want string
		}{
			{TooLargeError{Method: "GET", Route: cashboxes, Limit: 64 << 20, Setting: "ERPSYNC_ERP_MAX_RESPONSE"},
				"GET /accounts/api/cashboxes/: the answer is larger than the 64 MiB limit (ERPSYNC_ERP_MAX_RESPONSE)"},
			{TooLargeError{Route: cashboxes, Limit: 1 << 20},
				"GET /accounts/api/cashboxes/: the answer is larger than the 1 MiB limit"},
			{TooLargeError{Method: "POST", Route: "/api/auth/token/", Limit: 1000, Setting: "sources[1].max_response"},
				"POST /api/auth/token/: the answer is larger than the 1000-byte limit (sources[1].max_response)"},
		} {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q\nwant      %q", got, tt.want)
			}
		}
	})

	t.Run("IsLimitedTo64MiBUnlessMaxResponseSaysOtherwise", func(t *testing.T) {
		c, err := New(Options{BaseURL: "https://erp.example.com"})
		if err != nil || c.opt.MaxResponse != DefaultMaxResponse || DefaultMaxResponse != 64<<20 {
			t.Fatalf("default MaxResponse %d, %v", c.opt.MaxResponse, err)
		}
		for _, bad := range []int64{-1, maxBody, 1 << 40} {
			if _, err := New(Options{BaseURL: "https://erp.example.com", MaxResponse: bad}); err == nil {
				t.Errorf("MaxResponse %d accepted", bad)
			}
		}
	})

	t.Run("IsReadAtTheLimitAndRefusedOneBytePast", func(t *testing.T) {
		const limit = 100_000
		for _, withLength := range []bool{false, true} {
			t.Run("ContentLength="+strconv.FormatBool(withLength), func(t *testing.T) {
				sim, c, obs := hugeSim(t, limit)
				set := sim.SetHugeAnswer
				if withLength {
					set = sim.SetHugeAnswerWithLength
				}
				set(cashboxes, limit)
				body, err := c.Get(testCtx(t), cashboxes, nil)
				if err != nil || len(body) != limit || !json.Valid(body) {
					t.Fatalf("an answer of exactly the limit: %d bytes, %v", len(body), err)
				}
				sim.ResetRequests()
				set(cashboxes, limit+1)
				_, err = c.Get(testCtx(t), cashboxes, nil)
				checkTooLarge(t, err, limit, dataGETs(sim), obs)
			})
		}
	})

	// An answer announced larger than the limit is refused before any of it
	// is read: the handler sends its headers and then nothing, and the
	// client does not wait for it.
	t.Run("IsRefusedUnreadWhenItsLengthIsOverTheLimit", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		var gets atomic.Int32
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			gets.Add(1)
			w.Header().Set("Content-Length", strconv.Itoa(2<<20))
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		obs := &recObserver{}
		c := newTestClient(t, f.srv.URL, func(o *Options) {
			o.MaxResponse = 1 << 20
			o.Hints.MaxResponse = "ERPSYNC_ERP_MAX_RESPONSE"
			o.Observer = obs
		})
		start := time.Now()
		_, err := c.Get(testCtx(t), cashboxes, nil)
		checkTooLarge(t, f.note(err), 1<<20, int(gets.Load()), obs)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("refusing took %s: the body was waited for", d)
		}
		if err.Error() != "GET /accounts/api/cashboxes/: the answer is larger than the 1 MiB limit (ERPSYNC_ERP_MAX_RESPONSE)" {
			t.Errorf("error %q", err)
		}
	})

	// An answer without a length that never ends is refused once the limit
	// is passed, through the paging path too.
	t.Run("IsRefusedOnceAnEndlessAnswerPassesTheLimit", func(t *testing.T) {
		var gets atomic.Int32
		var written atomic.Int64
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) {
			gets.Add(1)
			w.WriteHeader(http.StatusOK)
			w.Write([]byte(`{"ok":true,"data":[`))
			rec := []byte(`{"id":1,"pad":"` + strings.Repeat("x", 4000) + `"},`)
			for {
				n, err := w.Write(rec)
				written.Add(int64(n))
				if err != nil {
					return
				}
			}
		})
		obs := &recObserver{}
		const limit = 3 << 20
		c := newTestClient(t, f.srv.URL, func(o *Options) {
			o.MaxResponse = limit
			o.Hints.MaxResponse = "ERPSYNC_ERP_MAX_RESPONSE"
			o.Observer = obs
		})
		_, err := c.Get(testCtx(t), cashboxes, nil)
		checkTooLarge(t, f.note(err), limit, int(gets.Load()), obs)

		gets.Store(0)
		l := c.List(ListRequest{Path: cashboxes, Paging: CursorPaged, PageSize: 100})
		_, err = l.Next(testCtx(t))
		checkTooLarge(t, f.note(err), limit, int(gets.Load()), obs)
	})

	// The simulator's huge answer of 400 MB, against the default limit.
	t.Run("IsRefusedPast64MiBByDefault", func(t *testing.T) {
		if testing.Short() {
			t.Skip("downloads 64 MiB")
		}
		for _, withLength := range []bool{false, true} {
			sim, c, obs := hugeSim(t, 0)
			if withLength {
				sim.SetHugeAnswerWithLength(cashboxes, 400<<20)
			} else {
				sim.SetHugeAnswer(cashboxes, 400<<20)
			}
			_, err := c.Get(testCtx(t), cashboxes, nil)
			checkTooLarge(t, err, DefaultMaxResponse, dataGETs(sim), obs)
			if !strings.Contains(err.Error(), "64 MiB") {
				t.Errorf("error %q does not name the 64 MiB default", err)
			}
		}
	})

	// The token endpoint's answer is bounded too, and not retried either.
	t.Run("IsBoundedAtTheTokenEndpointToo", func(t *testing.T) {
		f := newFakeERP(t, func(w http.ResponseWriter, r *http.Request) { writeResp(w, http.StatusOK, `[]`) })
		f.set(func(f *fakeERP) {
			f.loginHook = func(w http.ResponseWriter, r *http.Request, n int) bool {
				writeResp(w, http.StatusOK, `{"access_token":"`+strings.Repeat("t", 5000)+`"}`)
				return true
			}
		})
		obs := &recObserver{}
		c := newTestClient(t, f.srv.URL, func(o *Options) { o.MaxResponse = 4096; o.Observer = obs })
		_, err := c.Get(testCtx(t), cashboxes, nil)
		var tl *TooLargeError
		if !errors.As(f.note(err), &tl) || tl.Method != http.MethodPost || tl.Route != "/api/auth/token/" {
			t.Fatalf("err = %v, want a TooLargeError of the token endpoint", err)
		}
		if logins, _, _ := f.counts(); logins != 1 {
			t.Errorf("%d logins, want 1", logins)
		}
		if _, retries, _ := obs.snapshot(); len(retries) != 0 {
			t.Errorf("retries %v", retries)
		}
	})

	// Pages that fit are read into the page's pooled buffer, with no copy;
	// larger ones without a length are assembled once, whole.
	t.Run("IsReadIntoThePagesPooledBufferWhenItFits", func(t *testing.T) {
		sim, c, _ := hugeSim(t, 0)
		for _, tt := range []struct {
			size       int64
			withLength bool
			pooled     bool
		}{
			{300 << 10, false, true},
			{300 << 10, true, true},
			{contiguousMax, false, true},
			{contiguousMax + 1, false, false},
			{10<<20 + 7, false, false},
			{10<<20 + 7, true, true},
		} {
			if tt.withLength {
				sim.SetHugeAnswerWithLength(cashboxes, tt.size)
			} else {
				sim.SetHugeAnswer(cashboxes, tt.size)
			}
			p, err := c.fetchPage(testCtx(t), cashboxes, c.url(cashboxes, nil))
			if err != nil {
				t.Fatalf("%d bytes: %v", tt.size, err)
			}
			if len(p.Records) == 0 || p.Envelope != "data" {
				t.Fatalf("%d bytes: %d records, envelope %q", tt.size, len(p.Records), p.Envelope)
			}
			first := p.Records[0]
			i := bytes.Index(p.buf[:cap(p.buf)], first)
			inBuf := i >= 0 && &p.buf[:cap(p.buf)][i] == &first[0]
			if inBuf != tt.pooled {
				t.Errorf("%d bytes (length %v): records in the page's buffer %v, want %v", tt.size, tt.withLength, inBuf, tt.pooled)
			}
			p.Release()
		}
	})

	// Refusing an endless answer reads one byte past the limit and allocates
	// little more than the limit: no buffer that doubles, no second copy.
	t.Run("IsRefusedWithLittleMoreThanTheLimitAllocated", func(t *testing.T) {
		const limit = 32 << 20
		for _, into := range []*[]byte{nil, new([]byte)} {
			var before, after runtime.MemStats
			r := &endless{}
			runtime.ReadMemStats(&before)
			_, err := readBody(r, -1, limit, into)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, errOverLimit) {
				t.Fatalf("err = %v", err)
			}
			// The limit, the buffer of the answer's start outgrew, and a
			// chunk: the doubling of a buffer of the whole answer would take
			// 64 MiB or more.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > limit+2*contiguousMax {
				t.Errorf("%d MiB allocated to refuse an answer over %d MiB", alloc>>20, limit>>20)
			}
		}
		if _, err := readBody(&endless{}, limit+1, limit, nil); !errors.Is(err, errOverLimit) {
			t.Errorf("announced over the limit: err = %v", err)
		}
		// A Content-Length over the limit: nothing is read.
		r := &endless{}
		if _, err := readBody(r, limit+1, limit, nil); !errors.Is(err, errOverLimit) || r.n != 0 {
			t.Errorf("announced over the limit: %d bytes read, %v", r.n, err)
		}
		// Exactly the limit, without a length: the answer whole, in one piece
		// of its size.
		want := bytes.Repeat([]byte("0123456789abcdef"), limit/16)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, err := readBody(bytes.NewReader(want), -1, limit, nil)
		runtime.ReadMemStats(&after)
		if err != nil || !bytes.Equal(got, want) || cap(got) != limit {
			t.Fatalf("%d bytes (cap %d), %v", len(got), cap(got), err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2*limit+2*contiguousMax {
			t.Errorf("%d MiB allocated to read %d MiB", alloc>>20, limit>>20)
		}
		// And with a length, read in place.
		got, err = readBody(io.MultiReader(bytes.NewReader(want)), limit, limit, nil)
		if err != nil || !bytes.Equal(got, want) || cap(got) != limit+1 {
			t.Fatalf("with length: %d bytes (cap %d), %v", len(got), cap(got), err)
		}
	})
}
