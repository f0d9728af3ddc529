package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/model"
	"github.com/erpsync/erpsync/internal/sync/streams"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/migrations"
)

const (
	simUser = "erpsync"
	// wrongPassword is distinctive so that any leak of it is unmistakable.
	wrongPassword = "hunter2-WRONG-pw"
	// goodPassword is the simulator's password in the tests that log in.
	goodPassword = "s3cret-RIGHT-pw-Zq9x"
)

// syncBuffer is a bytes.Buffer safe for concurrent writers (the logger
// may be used from more than one goroutine).
type syncBuffer struct {
	mu gosync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type result struct {
	code           int
	stdout, stderr string
}

func (r result) combined() string { return r.stdout + r.stderr }

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout ---\n%s\n--- stderr ---\n%s", r.code, r.stdout, r.stderr)
}

// runMain runs one command in-process with an explicit environment.
func runMain(t *testing.T, environ []string, args ...string) result {
	t.Helper()
	var stdout, stderr syncBuffer
	code := Main(args, environ, strings.NewReader(""), &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// newSim starts a simulator on loopback HTTP; its URL is
// http://127.0.0.1:port, which the configuration accepts.
func newSim(t *testing.T, o erpsim.Options) (*erpsim.Sim, string) {
	t.Helper()
	sim := erpsim.New(o)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return sim, srv.URL
}

// environ builds an environment from key=value pairs; a later pair wins,
// and an empty value removes the key.
func environ(pairs ...string) []string {
	m := map[string]string{}
	var order []string
	for _, kv := range pairs {
		k, v, _ := strings.Cut(kv, "=")
		if _, seen := m[k]; !seen {
			order = append(order, k)
		}
		m[k] = v
	}
	var out []string
	for _, k := range order {
		if m[k] != "" {
			out = append(out, k+"="+m[k])
		}
	}
	return out
}

// erpEnv is a complete configuration for one source.
func erpEnv(simURL, dbURL, password string, extra ...string) []string {
	base := []string{
		"ERPSYNC_ERP_BASE_URL=" + simURL,
		"ERPSYNC_ERP_USERNAME=" + simUser,
		"ERPSYNC_ERP_PASSWORD=" + password,
		"ERPSYNC_DATABASE_URL=" + dbURL,
		"ERPSYNC_LOG_FORMAT=text",
	}
	return environ(append(base, extra...)...)
}

// issuedTokens are the bearer tokens the simulator saw, i.e. every token
// it issued that erpsync used.
func issuedTokens(sim *erpsim.Sim) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range sim.Requests() {
		if tok, ok := strings.CutPrefix(r.Authorization, "Bearer "); ok && tok != "" && !seen[tok] {
			seen[tok] = true
			out = append(out, tok)
		}
	}
	return out
}

// assertNotInDatabase checks that no row of any erp table, rendered as
// JSON text (every column, payloads included), contains any of secrets.
// The bookkeeping tables that hold free text are named explicitly so a
// renamed table cannot make the check pass vacuously.
func assertNotInDatabase(t *testing.T, dbURL string, secrets ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connecting to the test database: %v", err)
	}
	defer conn.Close(ctx)

	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables
WHERE table_schema = 'erp' AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"sync_runs", "rejected_records", "schema_drift", "sync_checkpoints"} {
		if !slices.Contains(tables, must) {
			t.Fatalf("table erp.%s not found (tables: %v)", must, tables)
		}
	}
	for _, secret := range secrets {
		if secret == "" {
			continue
		}
		// The columns the brief names, checked directly...
		for _, q := range []string{
			`SELECT count(*) FROM erp.sync_runs WHERE strpos(coalesce(error, ''), $1) > 0 OR strpos(coalesce(note, ''), $1) > 0`,
			`SELECT count(*) FROM erp.rejected_records WHERE strpos(reason, $1) > 0 OR position(convert_to($1, 'UTF8') in record) > 0 OR strpos(coalesce(record_id, ''), $1) > 0`,
			`SELECT count(*) FROM erp.schema_drift WHERE strpos(field || detail || coalesce(example, ''), $1) > 0`,
		} {
			var n int64
			if err := conn.QueryRow(ctx, q, secret).Scan(&n); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if n != 0 {
				t.Errorf("a secret (%d chars) appears in %d row(s) of: %s", len(secret), n, q)
			}
		}
		// ...and every column of every table, as JSON text.
		for _, table := range tables {
			var n int64
			q := fmt.Sprintf(`SELECT count(*) FROM erp.%s t WHERE strpos(to_jsonb(t)::text, $1) > 0`, pgx.Identifier{table}.Sanitize())
			if err := conn.QueryRow(ctx, q, secret).Scan(&n); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if n != 0 {
				t.Errorf("a secret (%d chars) appears in %d row(s) of erp.%s", len(secret), n, table)
			}
		}
	}
}

func assertNoSecret(t *testing.T, r result, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s == "" {
			continue
		}
		if strings.Contains(r.stdout, s) {
			t.Errorf("stdout contains a secret (%d chars, starting %.4q...)", len(s), s)
		}
		if strings.Contains(r.stderr, s) {
			t.Errorf("stderr contains a secret (%d chars, starting %.4q...)", len(s), s)
		}
	}
}

// TestMainErrors covers the usage, configuration and login failures: each
// case checks the exit status and what the message says.
func TestMainErrors(t *testing.T) {
	t.Parallel()
	type setup struct{ simURL, dbURL string }
	cases := []struct {
		name    string
		args    []string
		needDB  bool
		env     func(s setup) []string
		code    int
		want    []*regexp.Regexp // all must match stdout+stderr
		secrets []string         // must appear nowhere in stdout/stderr (nor the database)
	}{
		{
			name:    "check with wrong password",
			args:    []string{"check"},
			needDB:  true,
			env:     func(s setup) []string { return erpEnv(s.simURL, s.dbURL, wrongPassword) },
			code:    exitFailed,
			want:    []*regexp.Regexp{regexp.MustCompile(`FAIL\s+source default .*credentials were refused`), regexp.MustCompile(`ok\s+database`)},
			secrets: []string{wrongPassword},
		},
		{
			name:    "sync with wrong password",
			args:    []string{"sync"},
			needDB:  true,
			env:     func(s setup) []string { return erpEnv(s.simURL, s.dbURL, wrongPassword) },
			code:    exitFailed,
			want:    []*regexp.Regexp{regexp.MustCompile(`credentials were refused`), regexp.MustCompile(`stream run\(s\) failed`)},
			secrets: []string{wrongPassword},
		},
		{
			name:   "sync with wrong password in json logs",
			args:   []string{"sync", "invoices"},
			needDB: true,
			env: func(s setup) []string {
				return erpEnv(s.simURL, s.dbURL, wrongPassword, "ERPSYNC_LOG_FORMAT=json", "ERPSYNC_LOG_LEVEL=debug")
			},
			code:    exitFailed,
			want:    []*regexp.Regexp{regexp.MustCompile(`credentials were refused`)},
			secrets: []string{wrongPassword},
		},
		{
			name: "plain http to a non-loopback host",
			args: []string{"sync"},
			env: func(s setup) []string {
				return erpEnv("http://erp.example.com", "postgres://postgres@127.0.0.1:5432/nonexistent?sslmode=disable", goodPassword)
			},
			code:    exitUsage,
			want:    []*regexp.Regexp{regexp.MustCompile(`ERPSYNC_ERP_BASE_URL`), regexp.MustCompile(`HTTPS is required`)},
			secrets: []string{goodPassword},
		},
		{
			name: "plain http to a non-loopback host (check)",
			args: []string{"check"},
			env: func(s setup) []string {
				return erpEnv("http://erp.example.com", "postgres://postgres@127.0.0.1:5432/nonexistent?sslmode=disable", goodPassword)
			},
			code: exitUsage,
			want: []*regexp.Regexp{regexp.MustCompile(`HTTPS is required`)},
		},
		{
			name: "no database URL",
			args: []string{"sync"},
			env: func(s setup) []string {
				return erpEnv(s.simURL, "", goodPassword, "DATABASE_URL=")
			},
			code: exitUsage,
			want: []*regexp.Regexp{regexp.MustCompile(`ERPSYNC_DATABASE_URL`)},
		},
		{
			name:   "unknown stream",
			args:   []string{"sync", "nosuchstream"},
			needDB: true,
			env:    func(s setup) []string { return erpEnv(s.simURL, s.dbURL, goodPassword) },
			code:   exitUsage,
			want:   []*regexp.Regexp{regexp.MustCompile(`unknown stream "nosuchstream"`), regexp.MustCompile(`invoices`)},
		},
		{
			name: "unknown command",
			args: []string{"frobnicate"},
			env:  func(s setup) []string { return nil },
			code: exitUsage,
			want: []*regexp.Regexp{regexp.MustCompile(`unknown command "frobnicate"`), regexp.MustCompile(`Usage:`)},
		},
		{
			// The benchmark drops databases: it lives in cmd/erpsync-bench,
			// never in the released binary.
			name: "no bench command",
			args: []string{"bench"},
			env:  func(s setup) []string { return nil },
			code: exitUsage,
			want: []*regexp.Regexp{regexp.MustCompile(`unknown command "bench"`)},
		},
		{
			name: "no command",
			args: []string{},
			env:  func(s setup) []string { return nil },
			code: exitUsage,
			want: []*regexp.Regexp{regexp.MustCompile(`Usage:`)},
		},
		{
			name: "unknown flag",
			args: []string{"sync", "--no-such-flag"},
			env:  func(s setup) []string { return erpEnv(s.simURL, "", goodPassword) },
			code: exitUsage,
			want: []*regexp.Regexp{regexp.MustCompile(`no-such-flag`)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 30})
			s := setup{simURL: simURL}
			if tc.needDB {
				s.dbURL = testdb.New(t)
			}
			env := tc.env(s)
			r := runMain(t, env, tc.args...)
			if r.code != tc.code {
				t.Fatalf("erpsync %s: exit %d, want %d\n%s", strings.Join(tc.args, " "), r.code, tc.code, r)
			}
			for _, re := range tc.want {
				if !re.MatchString(r.combined()) {
					t.Errorf("output does not match %q\n%s", re, r)
				}
			}
			if tc.code == exitUsage && r.stderr == "" {
				t.Errorf("exit %d with nothing on stderr", tc.code)
			}
			secrets := append(slices.Clone(tc.secrets), issuedTokens(sim)...)
			assertNoSecret(t, r, secrets...)
			if s.dbURL != "" {
				assertNotInDatabase(t, s.dbURL, secrets...)
			}
		})
	}
}

// TestSyncKeepsSecrets runs a full sync with debug logging in both log
// formats and checks that neither the password nor any token the
// simulator issued shows up in the output or the database.
func TestSyncKeepsSecrets(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			sim, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 120, PageSizeCap: 50})
			dbURL := testdb.New(t)
			env := erpEnv(simURL, dbURL, goodPassword, "ERPSYNC_LOG_FORMAT="+format, "ERPSYNC_LOG_LEVEL=debug", "ERPSYNC_ERP_PAGE_SIZE=50")
			r := runMain(t, env, "sync")
			if r.code != exitOK {
				t.Fatalf("sync: exit %d, want 0\n%s", r.code, r)
			}
			// Debug logging really was on, or the test proves little.
			debugMark := map[string]string{"text": "DBG", "json": `"level":"DEBUG"`}[format]
			if !strings.Contains(r.stderr, debugMark) {
				t.Errorf("no debug line (%s) in the log\n%s", debugMark, r)
			}
			if format == "json" {
				for i, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
					if line != "" && !json.Valid([]byte(line)) {
						t.Errorf("stderr line %d is not JSON: %s", i+1, line)
					}
				}
			}
			tokens := issuedTokens(sim)
			if len(tokens) == 0 {
				t.Fatalf("the simulator saw no bearer token; requests: %d", len(sim.Requests()))
			}
			if sim.Revocations() == 0 {
				t.Errorf("the token was not revoked at the end of the sync")
			}
			assertNoSecret(t, r, append([]string{goodPassword}, tokens...)...)
			assertNotInDatabase(t, dbURL, append([]string{goodPassword}, tokens...)...)

			// Something was actually synced.
			var n int64
			conn, err := pgx.Connect(context.Background(), dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM erp.invoices`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 120 {
				t.Errorf("erp.invoices has %d rows, want 120", n)
			}
		})
	}
}

// TestCheckSucceeds: with the right credentials check exits 0 and says
// what it verified.
func TestCheckSucceeds(t *testing.T) {
	t.Parallel()
	sim, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 10})
	dbURL := testdb.New(t)
	r := runMain(t, erpEnv(simURL, dbURL, goodPassword), "check")
	if r.code != exitOK {
		t.Fatalf("check: exit %d, want 0\n%s", r.code, r)
	}
	for _, want := range []string{"ok    configuration", "ok    database", "logged in", "/api/auth/me/"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("check output lacks %q\n%s", want, r)
		}
	}
	assertNoSecret(t, r, append([]string{goodPassword}, issuedTokens(sim)...)...)
}

// TestCheckWarnsOfAPasswordFileEveryoneMayRead: the file is read (a
// Kubernetes Secret volume is mode 0644 unless told otherwise) and check
// says so, naming the variable and the file but not the password.
func TestCheckWarnsOfAPasswordFileEveryoneMayRead(t *testing.T) {
	t.Parallel()
	sim, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 10})
	dbURL := testdb.New(t)
	pw := filepath.Join(t.TempDir(), "erp-password")
	if err := os.WriteFile(pw, []byte(goodPassword+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pw, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	r := runMain(t, erpEnv(simURL, dbURL, "", "ERPSYNC_ERP_PASSWORD_FILE="+pw), "check")
	if r.code != exitOK {
		t.Fatalf("check: exit %d, want 0\n%s", r.code, r)
	}
	if !regexp.MustCompile(`warn\s+configuration: source "default": ERPSYNC_ERP_PASSWORD_FILE: ` + regexp.QuoteMeta(pw) + ` can be read by every user`).MatchString(r.stdout) {
		t.Errorf("check output lacks the warning\n%s", r)
	}
	assertNoSecret(t, r, append([]string{goodPassword}, issuedTokens(sim)...)...)
}

// TestStatusJSONAfterSync: after a sync of the core streams, status --json
// prints one entry per core stream, each last run succeeded.
func TestStatusJSONAfterSync(t *testing.T) {
	t.Parallel()
	_, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 75, PageSizeCap: 50})
	dbURL := testdb.New(t)
	env := erpEnv(simURL, dbURL, goodPassword, "ERPSYNC_ERP_PAGE_SIZE=50")

	// Before any run: an empty JSON list, not null.
	r := runMain(t, env, "status", "--json")
	if r.code != exitOK {
		t.Fatalf("status --json before any run: exit %d\n%s", r.code, r)
	}
	var empty []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &empty); err != nil || empty == nil || len(empty) != 0 {
		t.Errorf("status --json before any run: want [], got %q (err %v)", r.stdout, err)
	}

	if r := runMain(t, env, "sync"); r.code != exitOK {
		t.Fatalf("sync: exit %d\n%s", r.code, r)
	}
	r = runMain(t, env, "status", "--json")
	if r.code != exitOK {
		t.Fatalf("status --json: exit %d\n%s", r.code, r)
	}
	if !json.Valid([]byte(r.stdout)) {
		t.Fatalf("status --json printed invalid JSON:\n%s", r.stdout)
	}
	var st []struct {
		Source        string `json:"source"`
		Stream        string `json:"stream"`
		LastRunStatus string `json:"last_run_status"`
		LastError     string `json:"last_error"`
		LastSuccess   string `json:"last_success"`
		Sweep         bool   `json:"sweep_in_progress"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	var streams []string
	for _, s := range st {
		streams = append(streams, s.Stream)
		if s.Source != "default" {
			t.Errorf("stream %s: source %q, want default", s.Stream, s.Source)
		}
		if s.LastRunStatus != "succeeded" {
			t.Errorf("stream %s: last_run_status %q, want succeeded (error %q)", s.Stream, s.LastRunStatus, s.LastError)
		}
		if s.LastSuccess == "" {
			t.Errorf("stream %s: no last_success", s.Stream)
		}
		if s.Sweep {
			t.Errorf("stream %s: sweep still in progress after a successful sync", s.Stream)
		}
	}
	slices.Sort(streams)
	want := slices.Sorted(slices.Values(coreStreams))
	if !slices.Equal(streams, want) {
		t.Errorf("status --json streams = %v, want one entry per core stream %v", streams, want)
	}

	// The table form says the same.
	r = runMain(t, env, "status")
	if r.code != exitOK || strings.Count(r.stdout, "succeeded") != len(coreStreams) {
		t.Errorf("status: exit %d, want 0 and %d lines with succeeded\n%s", r.code, len(coreStreams), r)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := runMain(t, nil, "version")
	if r.code != exitOK {
		t.Fatalf("version: exit %d\n%s", r.code, r)
	}
	if !strings.HasPrefix(r.stdout, "erpsync") {
		t.Errorf("version prints %q, want it to start with erpsync", r.stdout)
	}
}

// TestMigrateTwice applies the migrations to a brand-new empty database,
// then again: both exit 0 and the second applies nothing.
func TestMigrateTwice(t *testing.T) {
	t.Parallel()
	dbURL := testdb.Empty(t)
	sqlFiles, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(sqlFiles) == 0 {
		t.Fatalf("no embedded migrations (%v)", err)
	}
	env := environ("ERPSYNC_DATABASE_URL="+dbURL, "ERPSYNC_LOG_FORMAT=json")
	// Before migrating: every command that reads the schema says so, as
	// a configuration problem (exit 2), not a Postgres error.
	for _, args := range [][]string{{"status"}, {"status", "--json"}} {
		r := runMain(t, env, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "the schema is not there yet: run `erpsync migrate`") || strings.Contains(r.stderr, "42P01") {
			t.Errorf("erpsync %s on a database never migrated: want exit 2 and a hint to migrate\n%s", strings.Join(args, " "), r)
		}
	}
	r := runMain(t, environ("ERPSYNC_DATABASE_URL="+dbURL, "ERPSYNC_AUTO_MIGRATE=false", "ERPSYNC_ERP_BASE_URL=http://127.0.0.1:1",
		"ERPSYNC_ERP_USERNAME=u", "ERPSYNC_ERP_PASSWORD=p"), "sync")
	if r.code != exitUsage || !strings.Contains(r.stderr, "run `erpsync migrate`") {
		t.Errorf("sync with auto-migrate off on a database never migrated: want exit 2 and a hint\n%s", r)
	}
	applied := regexp.MustCompile(`migrations applied: (\d+)`)
	for i, want := range []int{len(sqlFiles) + len(migrations.Go), 0} {
		r := runMain(t, env, "migrate")
		if r.code != exitOK {
			t.Fatalf("migrate #%d: exit %d\n%s", i+1, r.code, r)
		}
		m := applied.FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("migrate #%d: no 'migrations applied' line\n%s", i+1, r)
		}
		if n, _ := strconv.Atoi(m[1]); n != want {
			t.Errorf("migrate #%d: applied %d, want %d\n%s", i+1, n, want, r)
		}
	}
	// The schema is there, and DATABASE_URL alone is accepted too.
	r = runMain(t, environ("DATABASE_URL="+dbURL), "status", "--json")
	if r.code != exitOK || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("status on the migrated database: want exit 0 and [], got\n%s", r)
	}
}

// On a terminal, a log line first clears the live progress line: one
// stream's progress never runs into the next line.
func TestProgressLineClearedBeforeLog(t *testing.T) {
	var out bytes.Buffer
	term := &terminal{w: &out, tty: true}
	progress := progressPrinter(term, "default", "invoices", true)
	progress("sync-riyadh", model.RunStats{Pages: 100, Seen: 20000})
	log := slog.New(slog.NewTextHandler(term, nil))
	log.Info("sync finished")
	got := out.String()
	if !strings.Contains(got, "default/invoices (sync-riyadh): 100 pages, 20000 rows") {
		t.Errorf("the progress line does not name the source, stream and login: %q", got)
	}
	i, j := strings.Index(got, "20000 rows"), strings.Index(got, "msg=\"sync finished\"")
	if i < 0 || j < 0 || !strings.Contains(got[i:j], "\r\033[K") {
		t.Errorf("the progress line is not cleared before the log line: %q", got)
	}
	// Off a terminal there is no progress line at all.
	out.Reset()
	if p := progressPrinter(&terminal{w: &out}, "default", "invoices", false); p != nil {
		t.Error("a progress printer off a terminal")
	}
}

// status warns of what needs an operator: a run that has held its lock
// for more than three intervals of its schedule, and held deletions.
func TestStatusWarns(t *testing.T) {
	t.Parallel()
	// invoices: a follow run held an hour against its 30-second schedule.
	// journal_entries: a complete sweep held an hour against its weekly
	// one, which is no warning.
	dbURL := databaseWith(t, `
INSERT INTO erp.sync_runs (source, stream, kind, status, started_at) VALUES ('default', 'invoices', 'follow', 'running', now() - interval '1 hour');
INSERT INTO erp.sync_runs (source, stream, kind, status, started_at) VALUES ('default', 'journal_entries', 'sweep', 'running', now() - interval '1 hour');
INSERT INTO erp.sync_checkpoints (source, stream, last_sweep_completed_at, held_deletions) VALUES ('default', 'cashboxes', now(), 40);`)
	got := statusField(t, dbURL, "warning")
	if !strings.Contains(got["invoices"], "running for 1h0m") || !strings.Contains(got["invoices"], "3x its schedule") {
		t.Errorf("invoices warning %q, want the follow run held an hour against its 30-second schedule", got["invoices"])
	}
	if strings.Contains(got["journal_entries"], "running for") {
		t.Errorf("journal_entries warning %q, want none for a sweep an hour into its weekly schedule", got["journal_entries"])
	}
	if !strings.Contains(got["cashboxes"], "40 deletions held") || !strings.Contains(got["cashboxes"], "--confirm-deletions cashboxes") {
		t.Errorf("cashboxes warning %q", got["cashboxes"])
	}
	if sched := statusField(t, dbURL, "schedules_from")["invoices"]; sched != "the stream's defaults" {
		t.Errorf("invoices schedules from %q, want the stream's defaults", sched)
	}
}

// statusField runs `erpsync status --json` on dbURL for the streams named
// and returns one field of its answer by stream.
func statusField(t *testing.T, dbURL, field string, streams ...string) map[string]string {
	t.Helper()
	r := runMain(t, environ("ERPSYNC_DATABASE_URL="+dbURL, "ERPSYNC_ERP_BASE_URL=https://erp.example.com"),
		append([]string{"status", "--json"}, streams...)...)
	if r.code != exitOK {
		t.Fatalf("status %v: %s", streams, r)
	}
	var st []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range st {
		v, _ := s[field].(string)
		got[s["stream"].(string)] = v
	}
	return got
}

// databaseWith is a fresh migrated database holding what sql inserts.
func databaseWith(t *testing.T, sql string) string {
	t.Helper()
	dbURL := testdb.New(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
	return dbURL
}

// coreStreams are the streams a source enables when its configuration
// names none.
var coreStreams = streams.MustDefault().Core()

// A schema that is not there yet: check passes it when `erpsync run` will
// migrate it, and exits 2 when run could not (auto-migrate off, or a role
// that may not migrate). sync and run as the runtime role exit 2 with the
// way out, not goose's "permission denied".
func TestSchemaToMigrate(t *testing.T) {
	t.Parallel()
	_, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 10})
	dbURL := testdb.Empty(t)
	runtimeURL := testdb.URLAs(t, dbURL, testdb.Role(t, "erpsync_runtime"))
	const ownerHint = "migrate as the schema's owner, with `erpsync migrate` and ERPSYNC_MIGRATE_DATABASE_URL"
	cases := []struct {
		name  string
		env   []string
		args  []string
		code  int
		wants []string
	}{
		{"check, run will migrate", erpEnv(simURL, dbURL, goodPassword), []string{"check"}, exitOK,
			[]string{"ok    database: schema at version 0, this binary needs", "`erpsync run` or `erpsync sync` will migrate it (as role "}},
		{"check, auto-migrate off", erpEnv(simURL, dbURL, goodPassword, "ERPSYNC_AUTO_MIGRATE=false"), []string{"check"}, exitUsage,
			[]string{"FAIL  database: the schema is not there yet: run `erpsync migrate`"}},
		{"check as the runtime role", erpEnv(simURL, runtimeURL, goodPassword), []string{"check"}, exitUsage,
			[]string{"FAIL  database: the schema is not there yet, and role erpsync_t_role_", "may not create schema erp", ownerHint}},
		{"check as the runtime role, the owner's URL given", erpEnv(simURL, runtimeURL, goodPassword, "ERPSYNC_MIGRATE_DATABASE_URL="+dbURL), []string{"check"}, exitOK,
			[]string{"`erpsync run` or `erpsync sync` will migrate it (as role "}},
		{"sync as the runtime role", erpEnv(simURL, runtimeURL, goodPassword), []string{"sync"}, exitUsage, []string{ownerHint}},
		{"run as the runtime role", erpEnv(simURL, runtimeURL, goodPassword, "ERPSYNC_HTTP_ADDR=127.0.0.1:0"), []string{"run"}, exitUsage, []string{ownerHint}},
	}
	for _, tc := range cases {
		r := runMain(t, tc.env, tc.args...)
		if r.code != tc.code {
			t.Errorf("%s: exit %d, want %d\n%s", tc.name, r.code, tc.code, r)
		}
		for _, want := range tc.wants {
			if !strings.Contains(r.combined(), want) {
				t.Errorf("%s: output lacks %q\n%s", tc.name, want, r)
			}
		}
		if strings.Contains(r.combined(), "goose") || strings.Contains(r.combined(), "42501") {
			t.Errorf("%s: a raw migration error\n%s", tc.name, r)
		}
	}
	// Nothing above migrated: check only asks.
	if cur, _, err := db.SchemaVersions(context.Background(), testdb.ObserverPool(t, dbURL)); err != nil || cur != 0 {
		t.Errorf("schema at version %d after check and refused runs (%v), want 0", cur, err)
	}
}

// The demo creates the database ERPSYNC_DATABASE_URL names when it is
// missing (and says so), refuses clearly when its login may not, and may
// run again on the same database with another size: the second demo's
// ERP is a new one, and its totals still agree to the digit.
func TestDemo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := fmt.Sprintf("erpsync_t_demo_%d", time.Now().UnixNano())
	dbURL := testdb.URLOf(name)
	t.Cleanup(func() {
		if c, err := pgx.Connect(ctx, testdb.AdminURL()); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	env := func(dbURL string) []string { return environ("ERPSYNC_DATABASE_URL="+dbURL, "ERPSYNC_LOG_FORMAT=text") }

	r := runMain(t, env(testdb.URLAs(t, dbURL, testdb.Role(t))), "demo", "--invoices", "10")
	if r.code == exitOK || !strings.Contains(r.stderr, "database "+name+" does not exist, and role erpsync_t_role_") || !strings.Contains(r.stderr, "may not create it") {
		t.Errorf("demo on a missing database its login may not create: want a refusal naming both\n%s", r)
	}
	for i, size := range []string{"300", "100"} {
		r := runMain(t, env(dbURL), "demo", "--invoices", size)
		if r.code != exitOK || !strings.Contains(r.stdout, "(equal, digit for digit)") {
			t.Fatalf("demo #%d with %s invoices: want exit 0 and equal totals\n%s", i+1, size, r)
		}
		if created := strings.Contains(r.stdout, "created the database "+name); created != (i == 0) {
			t.Errorf("demo #%d: says it created the database: %v, want %v\n%s", i+1, created, i == 0, r)
		}
		if earlier := strings.Contains(r.stdout, "holds an earlier demo"); earlier != (i == 1) {
			t.Errorf("demo #%d: says an earlier demo is there: %v, want %v\n%s", i+1, earlier, i == 1, r)
		}
	}
}

// status shows the streams it is given (all when none; an unknown name is
// refused), and LAST ERROR is the error of the last run that ended: a
// success after a failure clears it, a run in progress does not.
func TestStatusStreamsAndLastError(t *testing.T) {
	t.Parallel()
	dbURL := databaseWith(t, `
INSERT INTO erp.sync_runs (source, stream, status, started_at, finished_at, error) VALUES
  ('default', 'invoices', 'failed', now() - interval '2 hours', now() - interval '2 hours', 'invoices boom'),
  ('default', 'invoices', 'succeeded', now() - interval '1 hour', now() - interval '1 hour', NULL),
  ('default', 'cashboxes', 'succeeded', now() - interval '2 hours', now() - interval '2 hours', NULL),
  ('default', 'cashboxes', 'failed', now() - interval '1 hour', now() - interval '1 hour', 'cashboxes boom'),
  ('default', 'currencies', 'failed', now() - interval '2 hours', now() - interval '2 hours', 'currencies boom'),
  ('default', 'currencies', 'running', now() - interval '1 minute', NULL, NULL);`)
	status := func(streams ...string) map[string]string { return statusField(t, dbURL, "last_error", streams...) }
	want := map[string]string{"invoices": "", "cashboxes": "cashboxes boom", "currencies": "currencies boom"}
	if got := status(); fmt.Sprint(got) != fmt.Sprint(want) { // maps print sorted
		t.Errorf("status: last errors %v, want %v", got, want)
	}
	if got := status("invoices", "cashboxes"); fmt.Sprint(got) != fmt.Sprint(map[string]string{"invoices": "", "cashboxes": "cashboxes boom"}) {
		t.Errorf("status invoices cashboxes: %v, want those two streams only", got)
	}
	if r := runMain(t, environ("ERPSYNC_DATABASE_URL="+dbURL), "status", "invoice"); r.code != exitUsage || !strings.Contains(r.stderr, `unknown stream "invoice"`) {
		t.Errorf("status with an unknown stream: want exit 2 naming it\n%s", r)
	}
}

// ERPSYNC_HISTORY=none still parses, and no longer keeps a stream from
// keeping versions: Postgres writes them, and the run says so once.
func TestHistoryNoneKeepsVersionsAndSaysSo(t *testing.T) {
	t.Parallel()
	sim, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 30})
	dbURL := testdb.New(t)
	env := erpEnv(simURL, dbURL, goodPassword, "ERPSYNC_HISTORY=none", "ERPSYNC_STREAMS=invoices,cashboxes")
	if r := runMain(t, env, "sync", "invoices"); r.code != exitOK {
		t.Fatalf("sync: %s", r)
	}
	sim.MutateInvoices(func(inv []erpsim.Invoice) []erpsim.Invoice {
		inv[0].TotalBC = inv[0].TotalBC.Add(decimal.New(1, 0))
		return inv
	})
	r := runMain(t, env, "sync", "invoices")
	if r.code != exitOK {
		t.Fatalf("sync: %s", r)
	}
	if n := strings.Count(r.stderr, "no longer turns a stream's history off"); n != 1 {
		t.Errorf("the run said %d times that history is kept all the same, want once:\n%s", n, r)
	}
	pool := testdb.ObserverPool(t, dbURL)
	var versions int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM erp.invoices_history`).Scan(&versions); err != nil || versions != 1 {
		t.Errorf("%d versions (%v), want the changed invoice's", versions, err)
	}
}
