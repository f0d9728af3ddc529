package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// bound is one value of a setting at or just past a boundary of what it
// accepts: the value it stores, or the error it gives.
type bound struct {
	value string
	want  string // what the setting holds, as got renders it; "" when refused
	err   string // the error's text after the setting's name
}

// TestEverySettingIsRefusedJustPastItsBounds: each bounded setting takes
// its smallest and largest value and refuses the value one step beyond,
// saying why, naming the setting.
func TestEverySettingIsRefusedJustPastItsBounds(t *testing.T) {
	src := func(get func(Source) any) func(Config) any {
		return func(c Config) any { return get(c.Sources[0]) }
	}
	for _, tt := range []struct {
		env    string
		get    func(Config) any
		bounds []bound
	}{
		{"ERPSYNC_ERP_PAGE_SIZE", src(func(s Source) any { return s.PageSize }), []bound{
			{value: "0", err: "0 is not between 1 and 10000"},
			{value: "1", want: "1"},
			{value: "10000", want: "10000"},
			{value: "10001", err: "10001 is not between 1 and 10000"},
		}},
		{"ERPSYNC_ERP_MAX_CONCURRENT_REQUESTS", src(func(s Source) any { return s.MaxConcurrentRequests }), []bound{
			{value: "0", err: "0 is not between 1 and 100"},
			{value: "1", want: "1"},
			{value: "100", want: "100"},
			{value: "101", err: "101 is not between 1 and 100"},
		}},
		{"ERPSYNC_ERP_MAX_REQUESTS_PER_SECOND", src(func(s Source) any { return s.MaxRequestsPerSecond }), []bound{
			{value: "-0.5", err: "-0.5 is not between 0 and 10000"},
			{value: "0", want: "0"},
			{value: "10000", want: "10000"},
			{value: "10000.5", err: "10000.5 is not between 0 and 10000"},
			{value: "fast", err: `"fast" is not a number`},
		}},
		{"ERPSYNC_MAX_CONCURRENT_RUNS", func(c Config) any { return c.MaxConcurrentRuns }, []bound{
			{value: "0", err: "0 is not between 1 and 1000"},
			{value: "1", want: "1"},
			{value: "1000", want: "1000"},
			{value: "1001", err: "1001 is not between 1 and 1000"},
		}},
		{"ERPSYNC_RETENTION", func(c Config) any { return c.Retention }, []bound{
			{value: "23h59m59s", err: "23h59m59s is less than a day"},
			{value: "0d", err: "0s is less than a day"},
			{value: "24h", want: "24h0m0s"},
			{value: "1d", want: "24h0m0s"},
			{value: "99999d", want: (99999 * 24 * time.Hour).String()},
			{value: "100000d", err: `"100000d" is not a duration such as 20s, 5m or 90d`},
			{value: "-1d", err: `"-1d" is not a duration`},
			{value: "-48h", err: `"-48h" is not a duration`},
		}},
		{"ERPSYNC_ERP_TIMEOUT", src(func(s Source) any { return s.Timeout }), []bound{
			{value: "999us", err: "999µs is less than a millisecond"},
			{value: "1ms", want: "1ms"},
		}},
		{"ERPSYNC_DB_LOCK_TIMEOUT", func(c Config) any { return c.Database.LockTimeout }, []bound{
			{value: "0", err: "0s is less than a second"},
			{value: "999ms", err: "999ms is less than a second"},
			{value: "1s", want: "1s"},
		}},
		{"ERPSYNC_ERP_MAX_RESPONSE", src(func(s Source) any { return s.MaxResponse }), []bound{
			{value: "65535", err: `"65535" is too small (at least 64KiB)`},
			{value: "65536", want: "65536"},
			{value: "64KiB", want: "65536"},
			{value: "63KiB", err: `"63KiB" is too small`},
			{value: "1024GiB", want: fmt.Sprint(int64(1) << 40)},
			{value: "1025GiB", err: `"1025GiB" is not a size such as 64MiB`},
			{value: "1099511627776", want: fmt.Sprint(int64(1) << 40)},
			{value: "1099511627777B", err: `"1099511627777B" is not a size`},
			{value: "0", err: `"0" is not a size`},
			{value: "1", err: `"1" is too small`},
		}},
		{"ERPSYNC_SOURCE", src(func(s Source) any { return s.Name }), []bound{
			{value: strings.Repeat("a", 64), want: strings.Repeat("a", 64)},
			{value: strings.Repeat("a", 65), err: "is not 1-64 letters"},
		}},
		{"ERPSYNC_SHUTDOWN_TIMEOUT", func(c Config) any { return c.Shutdown }, []bound{
			{value: "8999ms", err: "8.999s is less than 9s"},
			{value: "9s", want: fmt.Sprint(ShutdownWithGrace(time.Second))},
		}},
		{"ERPSYNC_SHUTDOWN_GRACE", func(c Config) any { return c.Shutdown }, []bound{
			{value: "0s", want: fmt.Sprint(ShutdownWithGrace(0))},
			{value: "-1s", err: `"-1s" is not a duration`},
		}},
	} {
		for _, b := range tt.bounds {
			name := fmt.Sprintf("%s=%s is refused", tt.env, b.value)
			if b.err == "" {
				name = fmt.Sprintf("%s=%s is taken", tt.env, b.value)
			}
			t.Run(name, func(t *testing.T) {
				cfg, err := Load(baseEnv(tt.env+"="+b.value), Options{Streams: testSpecs})
				if b.err != "" {
					wantConfigError(t, err, tt.env+": ", b.err)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := fmt.Sprint(tt.get(cfg)); got != b.want {
					t.Errorf("got %s, want %s", got, b.want)
				}
			})
		}
	}
}

// TestAGraceMustFitTheTimeout: shutdown_grace with shutdown_timeout may
// take the whole grace the timeout leaves, not a nanosecond more.
func TestAGraceMustFitTheTimeout(t *testing.T) {
	t.Run("the whole grace the timeout leaves is taken", func(t *testing.T) {
		cfg := mustLoad(t, baseEnv("ERPSYNC_SHUTDOWN_TIMEOUT=20s", "ERPSYNC_SHUTDOWN_GRACE=12s"), Options{Streams: testSpecs})
		if want := ShutdownWithGrace(12 * time.Second); cfg.Shutdown != want {
			t.Errorf("Shutdown = %+v, want %+v", cfg.Shutdown, want)
		}
	})
	t.Run("a smaller grace is kept, the timeout too", func(t *testing.T) {
		cfg := mustLoad(t, baseEnv("ERPSYNC_SHUTDOWN_TIMEOUT=20s", "ERPSYNC_SHUTDOWN_GRACE=5s"), Options{Streams: testSpecs})
		if cfg.Shutdown.Timeout != 20*time.Second || cfg.Shutdown.Grace != 5*time.Second {
			t.Errorf("Shutdown = %+v, want timeout 20s, grace 5s", cfg.Shutdown)
		}
	})
	t.Run("one nanosecond more is refused", func(t *testing.T) {
		_, err := Load(baseEnv("ERPSYNC_SHUTDOWN_TIMEOUT=20s", "ERPSYNC_SHUTDOWN_GRACE=12000000001ns"), Options{Streams: testSpecs})
		wantConfigError(t, err, "ERPSYNC_SHUTDOWN_GRACE: 12.000000001s does not fit ERPSYNC_SHUTDOWN_TIMEOUT 20s (at most 12s)")
	})
}

// TestASuggestionIsAtMostAThirdOfTheWordAway: "did you mean" names a
// word at most two edits away and, counting one more letter, a third of
// the word's letters; of two as near, the first.
func TestASuggestionIsAtMostAThirdOfTheWordAway(t *testing.T) {
	for _, tt := range []struct {
		word  string
		words []string
		want  string
	}{
		{"abcde", []string{"abxye"}, "abxye"}, // 2 edits of 5 letters: 2*3 <= 5+1
		{"abcd", []string{"abxy"}, ""},        // 2 edits of 4 letters: 6 > 5
		{"ab", []string{"xy"}, ""},            // 2 edits of 2 letters
		{"ab", []string{"ax"}, "ax"},          // 1 edit of 2 letters: 3 <= 3
		{"cat", []string{"bat", "hat"}, "bat"},
		{"cat", []string{"bxt", "bat"}, "bat"}, // the nearer, wherever it is
		{"abcdefgh", []string{"abcxyzgh"}, ""}, // 3 edits: too many, however long
	} {
		if got := nearest(tt.word, tt.words); got != tt.want {
			t.Errorf("nearest(%q, %q) = %q, want %q", tt.word, tt.words, got, tt.want)
		}
	}
}

// TestEditDistanceCountsASwapOfNeighboursAsOne, and only a true swap.
func TestEditDistanceCountsASwapOfNeighboursAsOne(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"ab", "ba", 1}, {"ab", "ca", 2}, {"ab", "bc", 2}, {"abc", "acb", 1}, {"abc", "xbx", 2}, {"", "ab", 2}, {"schedule", "schedlue", 1},
	} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
