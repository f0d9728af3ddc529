package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/db"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/sync/streams"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

const (
	simUser = "erpsync"
	// wrongPassword is distinctive so that any leak of it is unmistakable.
	wrongPassword = "hunter2-WRONG-pw"
	// goodPassword is the simulator's password in the tests that log in.
	goodPassword = "s3cret-RIGHT-pw-Zq9x"
)

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
	var stdout, stderr testutil.Buffer
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

// loginsConfig writes the configuration file of one source, main, read
// through a login per user (each password in a file of its own), and
// returns its path.
func loginsConfig(t *testing.T, dbURL, simURL string, pageSize int, users []erpsim.User) string {
	t.Helper()
	dir := t.TempDir()
	var logins strings.Builder
	for _, u := range users {
		pw := filepath.Join(dir, u.Username)
		if err := os.WriteFile(pw, []byte(u.Password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&logins, "      - {username: %s, password_file: %s}\n", u.Username, pw)
	}
	cfg := filepath.Join(dir, "erpsync.yaml")
	yaml := fmt.Sprintf("database_url: %s\nsources:\n  - name: main\n    base_url: %s\n    page_size: %d\n    logins:\n%s", dbURL, simURL, pageSize, logins.String())
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCommand documents what every command holds: the exit status and message of
// each kind of failure, no secret in any output nor in the warehouse, and every
// login of a source covered.
func TestCommand(t *testing.T) {
	t.Parallel()
	// Usage, configuration and login failures: each case checks the exit status and
	// what the message says.
	t.Run("ExitsWithTheStatusOfItsFailureNamingWhatIsWrong", func(t *testing.T) {
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
				name:    "CheckWithAWrongPassword",
				args:    []string{"check"},
				needDB:  true,
				env:     func(s setup) []string { return erpEnv(s.simURL, s.dbURL, wrongPassword) },
				code:    exitFailed,
				want:    []*regexp.Regexp{regexp.MustCompile(`FAIL\s+source default .*credentials were refused`), regexp.MustCompile(`ok\s+database`)},
				secrets: []string{wrongPassword},
			},
			{
				name:    "SyncWithAWrongPassword",
				args:    []string{"sync"},
				needDB:  true,
				env:     func(s setup) []string { return erpEnv(s.simURL, s.dbURL, wrongPassword) },
				code:    exitFailed,
				want:    []*regexp.Regexp{regexp.MustCompile(`credentials were refused`), regexp.MustCompile(`stream run\(s\) failed`)},
				secrets: []string{wrongPassword},
			},
			{
				name:   "SyncWithAWrongPasswordAndJSONLogs",
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
				name: "SyncOverPlainHTTPToAHostNotOnLoopback",
				args: []string{"sync"},
				env: func(s setup) []string {
					return erpEnv("http://erp.example.com", "postgres://postgres@127.0.0.1:5432/nonexistent?sslmode=disable", goodPassword)
				},
				code:    exitUsage,
				want:    []*regexp.Regexp{regexp.MustCompile(`ERPSYNC_ERP_BASE_URL`), regexp.MustCompile(`HTTPS is required`)},
				secrets: []string{goodPassword},
			},
			{
				name: "CheckOverPlainHTTPToAHostNotOnLoopback",
				args: []string{"check"},
				env: func(s setup) []string {
					return erpEnv("http://erp.example.com", "postgres://postgres@127.0.0.1:5432/nonexistent?sslmode=disable", goodPassword)
				},
				code: exitUsage,
				want: []*regexp.Regexp{regexp.MustCompile(`HTTPS is required`)},
			},
			{
				name: "SyncWithoutADatabaseURL",
				args: []string{"sync"},
				env: func(s setup) []string {
					return erpEnv(s.simURL, "", goodPassword, "DATABASE_URL=")
				},
				code: exitUsage,
				want: []*regexp.Regexp{regexp.MustCompile(`ERPSYNC_DATABASE_URL`)},
			},
			{
				name:   "SyncOfAnUnknownStream",
				args:   []string{"sync", "nosuchstream"},
				needDB: true,
				env:    func(s setup) []string { return erpEnv(s.simURL, s.dbURL, goodPassword) },
				code:   exitUsage,
				want:   []*regexp.Regexp{regexp.MustCompile(`unknown stream "nosuchstream"`), regexp.MustCompile(`invoices`)},
			},
			{
				name: "CheckWithAPasswordInTheBaseURL",
				args: []string{"check"},
				env: func(s setup) []string {
					return erpEnv(strings.Replace(s.simURL, "http://", "http://sync:"+goodPassword+"@", 1), "postgres://postgres@127.0.0.1:5432/nonexistent?sslmode=disable", goodPassword)
				},
				code:    exitUsage,
				want:    []*regexp.Regexp{regexp.MustCompile(`ERPSYNC_ERP_BASE_URL: "http://\[redacted\]@127\.0\.0\.1:\d+": user information`)},
				secrets: []string{goodPassword},
			},
			{
				name: "SyncWithAKeyInTheBaseURLsQuery",
				args: []string{"sync"},
				env: func(s setup) []string {
					return erpEnv(s.simURL+"/?api_key="+goodPassword, "postgres://postgres@127.0.0.1:5432/nonexistent?sslmode=disable", goodPassword)
				},
				code:    exitUsage,
				want:    []*regexp.Regexp{regexp.MustCompile(`\?api_key=\[redacted\]": a query`)},
				secrets: []string{goodPassword},
			},
			{
				name: "AnUnknownCommand",
				args: []string{"frobnicate"},
				env:  func(s setup) []string { return nil },
				code: exitUsage,
				want: []*regexp.Regexp{regexp.MustCompile(`unknown command "frobnicate"`), regexp.MustCompile(`Usage:`)},
			},
			{
				// The benchmark drops databases: it lives in cmd/erpsync-bench,
				// never in the released binary.
				name: "BenchWhichIsNoCommand",
				args: []string{"bench"},
				env:  func(s setup) []string { return nil },
				code: exitUsage,
				want: []*regexp.Regexp{regexp.MustCompile(`unknown command "bench"`)},
			},
			{
				name: "NoCommand",
				args: []string{},
				env:  func(s setup) []string { return nil },
				code: exitUsage,
				want: []*regexp.Regexp{regexp.MustCompile(`Usage:`)},
			},
			{
				name: "AnUnknownFlag",
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
	})

	// The operator's commands against one source read through two branch logins of a
	// branch-scoped installation whose records carry their labels: sync reads each
	// login's branch, check logs both in, probe reports each login's context and list
	// scope, verify agrees over both, status has a line per login and stream; neither
	// password nor token reaches the output or the database, and both tokens are
	// revoked.
	t.Run("CoversEveryLoginOfASource", func(t *testing.T) {
		t.Parallel()
		users := []erpsim.User{
			{Username: "sync-riyadh", Password: "riyadh-Secret-pw-41", CompanyID: 1, BranchID: 1},
			{Username: "sync-jeddah", Password: "jeddah-Secret-pw-73", CompanyID: 1, BranchID: 2},
		}
		sim, simURL := newSim(t, erpsim.Options{Users: users, ListScope: erpsim.ScopeBranch, RecordLabels: erpsim.LabelsIDs, Invoices: 90, PageSizeCap: 50})
		dbURL := testdb.New(t)
		env := environ("ERPSYNC_CONFIG="+loginsConfig(t, dbURL, simURL, 50, users), "ERPSYNC_LOG_FORMAT=text")
		var outputs []result
		run := func(args ...string) result {
			t.Helper()
			r := runMain(t, env, args...)
			outputs = append(outputs, r)
			if r.code != exitOK {
				t.Fatalf("%s: exit %d\n%s", strings.Join(args, " "), r.code, r)
			}
			return r
		}

		r := run("check")
		for _, u := range users {
			if !strings.Contains(r.stdout, u.Username) {
				t.Errorf("check does not name login %s\n%s", u.Username, r)
			}
		}
		run("sync")

		// Each branch's invoices are there once, labelled with their branch.
		conn, err := pgx.Connect(t.Context(), dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(t.Context())
		var branches, rows, distinct int
		if err := conn.QueryRow(t.Context(), `SELECT count(DISTINCT branch_id), count(*), count(DISTINCT id) FROM erp.invoices WHERE source = 'main'`).
			Scan(&branches, &rows, &distinct); err != nil {
			t.Fatal(err)
		}
		if branches != 2 || rows != 90 || distinct != 90 {
			t.Errorf("erp.invoices: %d branches, %d rows, %d ids; want 2 branches and the 90 invoices once", branches, rows, distinct)
		}

		var probe []struct {
			Stream    string `json:"stream"`
			Login     string `json:"login"`
			BranchID  string `json:"branch_id"`
			ListScope string `json:"list_scope"`
			Usable    bool   `json:"usable"`
		}
		if err := json.Unmarshal([]byte(run("probe", "--json", "invoices").stdout), &probe); err != nil {
			t.Fatalf("probe --json: %v", err)
		}
		var probed []string
		for _, p := range probe {
			probed = append(probed, p.Login+"/"+p.BranchID+"/"+p.ListScope)
			if !p.Usable {
				t.Errorf("probe: %s through %s not usable", p.Stream, p.Login)
			}
		}
		if want := []string{"sync-jeddah/2/branch", "sync-riyadh/1/branch"}; !slices.Equal(slices.Sorted(slices.Values(probed)), want) {
			t.Errorf("probe invoices: login/branch/list scope %v, want %v", probed, want)
		}

		var verify []struct {
			Stream        string `json:"stream"`
			Problem       string `json:"problem"`
			ERPRows       int64  `json:"erp_rows"`
			WarehouseRows int64  `json:"warehouse_rows"`
			Missing       int64  `json:"missing"`
			Extra         int64  `json:"extra"`
		}
		if err := json.Unmarshal([]byte(run("verify", "--json", "invoices").stdout), &verify); err != nil {
			t.Fatalf("verify --json: %v", err)
		}
		if len(verify) != 1 || verify[0].Problem != "" || verify[0].ERPRows != 90 || verify[0].WarehouseRows != 90 || verify[0].Missing+verify[0].Extra != 0 {
			t.Errorf("verify invoices over both logins = %+v, want 90 rows on each side and no difference", verify)
		}

		var status []struct {
			Stream        string `json:"stream"`
			Login         string `json:"login"`
			LastRunStatus string `json:"last_run_status"`
			ListScope     string `json:"list_scope"`
		}
		if err := json.Unmarshal([]byte(run("status", "--json").stdout), &status); err != nil {
			t.Fatalf("status --json: %v", err)
		}
		perLogin := map[string]int{}
		for _, s := range status {
			if s.LastRunStatus != "succeeded" {
				t.Errorf("status: %s of %s is %q", s.Stream, s.Login, s.LastRunStatus)
			}
			if s.Stream == "invoices" && s.ListScope != "branch" {
				t.Errorf("status: invoices of %s has list scope %q, want branch", s.Login, s.ListScope)
			}
			perLogin[s.Login]++
		}
		for _, u := range users {
			if perLogin[u.Username] != len(coreStreams) {
				t.Errorf("status: %d lines for %s, want one per core stream (%d); status %+v", perLogin[u.Username], u.Username, len(coreStreams), status)
			}
		}

		// Each command logs in once per login and lets its tokens go.
		tokens := issuedTokens(sim)
		if len(tokens) < len(users) {
			t.Fatalf("the simulator saw %d tokens, want at least one per login", len(tokens))
		}
		if got := sim.Revocations(); got < len(tokens) {
			t.Errorf("%d revocations for %d tokens", got, len(tokens))
		}
		secrets := tokens
		for _, u := range users {
			secrets = append(secrets, u.Password)
		}
		for _, r := range outputs {
			assertNoSecret(t, r, secrets...)
		}
		assertNotInDatabase(t, dbURL, secrets...)
	})

	// A schema that is not there yet: check passes it when `erpsync run` will
	// migrate it, and exits 2 when run could not (auto-migrate off, or a role
	// that may not migrate). sync and run as the runtime role exit 2 with the
	// way out, not goose's "permission denied".
	t.Run("SaysWhoMayMigrateASchemaNotThereYet", func(t *testing.T) {
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
	})

	// A variable nothing reads is warned of by every command that reads the
	// configuration, before whatever else it says, a refusal included.
	t.Run("WarnsOfAVariableNothingReads", func(t *testing.T) {
		t.Parallel()
		// Written in two, so that config's scan of the repository for the
		// variables erpsync uses does not take it for one.
		const misspelt = "ERPSYNC_ERP_" + "PASSWROD"
		const warning = misspelt + " is not read by erpsync; did you mean ERPSYNC_ERP_PASSWORD?"
		env := environ("ERPSYNC_ERP_BASE_URL=http://127.0.0.1:1", "ERPSYNC_ERP_USERNAME="+simUser, misspelt+"="+goodPassword,
			"ERPSYNC_DATABASE_URL=postgres://postgres@127.0.0.1:1/none?connect_timeout=2", "ERPSYNC_HTTP_ADDR=127.0.0.1:0")
		for _, args := range [][]string{{"migrate"}, {"sync"}, {"run"}, {"status"}, {"check"}, {"probe"}, {"verify"}, {"reset", "invoices", "--yes"}, {"demo"}} {
			r := runMain(t, env, args...)
			if r.code == exitOK {
				t.Errorf("%s: exit 0 without a database or a password\n%s", args[0], r)
			}
			if !strings.Contains(r.combined(), warning) {
				t.Errorf("%s: no warning of the misspelt variable\n%s", args[0], r)
			}
			assertNoSecret(t, r, goodPassword)
		}
	})

	// check prints no secret of the configuration: not the database URLs'
	// passwords, not the ERP's password, not those a world-readable config
	// file writes, of which it warns.
	t.Run("CheckPrintsNoSecret", func(t *testing.T) {
		t.Parallel()
		sim, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 10})
		const dbPassword = "db-Pw-7f3Kq"
		dbURL, _ := url.Parse(testdb.New(t))
		dbURL.User = url.UserPassword("postgres", dbPassword) // the test server trusts, so any password does
		file := filepath.Join(t.TempDir(), "erpsync.yaml")
		if err := os.WriteFile(file, []byte("database_url: "+dbURL.String()+"\nmigrate_database_url: "+dbURL.String()+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(file, 0o644); err != nil { // whatever the umask
			t.Fatal(err)
		}
		r := runMain(t, environ(erpEnv(simURL, "", goodPassword, "ERPSYNC_CONFIG="+file)...), "check")
		if r.code != exitOK {
			t.Fatalf("check: exit %d\n%s", r.code, r)
		}
		if !regexp.MustCompile(`warn\s+configuration: config file: ` + regexp.QuoteMeta(file) + ` can be read by every user of the host \(mode 0644\) and writes a secret in it \(database_url on line 1, migrate_database_url on line 2\)`).MatchString(r.stdout) {
			t.Errorf("check does not warn of the config file\n%s", r)
		}
		assertNoSecret(t, r, append([]string{goodPassword, dbPassword}, issuedTokens(sim)...)...)

		// The database refuses: its error names no password either.
		dbURL.Path = "/erpsync_no_such_database"
		r = runMain(t, erpEnv(simURL, dbURL.String(), goodPassword), "check")
		if r.code != exitFailed || !strings.Contains(r.stdout, "FAIL  database") {
			t.Errorf("check of a database that is not there: exit %d\n%s", r.code, r)
		}
		assertNoSecret(t, r, goodPassword, dbPassword)
	})

	// A login of a migrated warehouse that is not a member of the runtime role may not
	// read the schema's version: every command that reads it exits 2 naming the role
	// to grant and the exact statement, not Postgres' "permission denied", and that
	// statement is the fix.
	t.Run("SaysWhichRoleToGrantALoginWithoutTheRuntimeRights", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, simURL := newSim(t, erpsim.Options{Username: simUser, Password: goodPassword, Invoices: 10})
		dbURL := testdb.New(t)
		login := testdb.Role(t)
		loginURL := testdb.URLAs(t, dbURL, login)
		grant := "GRANT erpsync_runtime TO " + login + ";"
		for _, args := range [][]string{{"check"}, {"sync", "invoices"}, {"status"}, {"run"}} {
			r := runMain(t, erpEnv(simURL, loginURL, goodPassword, "ERPSYNC_HTTP_ADDR=127.0.0.1:0"), args...)
			if r.code != exitUsage {
				t.Errorf("%s: exit %d, want %d\n%s", args[0], r.code, exitUsage, r)
			}
			for _, want := range []string{"role " + login + " may not read the schema's version table goose_db_version",
				"not a member of erpsync_runtime", "as a superuser, run: " + grant} {
				if !strings.Contains(r.combined(), want) {
					t.Errorf("%s: output lacks %q\n%s", args[0], want, r)
				}
			}
		}
		admin := testdb.Admin(t)
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, grant); err != nil {
			t.Fatal(err)
		}
		if r := runMain(t, erpEnv(simURL, loginURL, goodPassword), "check"); r.code != exitOK || !strings.Contains(r.stdout, "ok    database: schema at version") {
			t.Errorf("check after %s: exit %d\n%s", grant, r.code, r)
		}
	})
}

// TestVersion documents `erpsync version`.
func TestVersion(t *testing.T) {
	t.Parallel()
	t.Run("PrintsTheVersion", func(t *testing.T) {
		t.Parallel()
		r := runMain(t, nil, "version")
		if r.code != exitOK {
			t.Fatalf("version: exit %d\n%s", r.code, r)
		}
		if !strings.HasPrefix(r.stdout, "erpsync") {
			t.Errorf("version prints %q, want it to start with erpsync", r.stdout)
		}
	})
}

// TestUsage documents the commands' help.
func TestUsage(t *testing.T) {
	t.Parallel()
	// Every command --help lists is in the README's table of commands, and
	// the table lists no command the binary does not have: a newcomer finds
	// in the front door what the binary offers.
	t.Run("ListsTheCommandsOfTheREADMEsTable", func(t *testing.T) {
		t.Parallel()
		readme, err := os.ReadFile("../../README.md")
		if err != nil {
			t.Fatal(err)
		}
		command := regexp.MustCompile("(?m)^\\| `erpsync ([a-z]+)")
		var inREADME []string
		for _, m := range command.FindAllStringSubmatch(string(readme), -1) {
			inREADME = append(inREADME, m[1])
		}
		var inHelp []string
		for _, m := range regexp.MustCompile(`(?m)^  erpsync ([a-z]+)`).FindAllStringSubmatch(runMain(t, nil, "--help").stdout, -1) {
			inHelp = append(inHelp, m[1])
		}
		slices.Sort(inREADME)
		slices.Sort(inHelp)
		if len(inHelp) < 10 || !slices.Equal(inREADME, inHelp) {
			t.Errorf("the README's table of commands lists %v; --help lists %v", inREADME, inHelp)
		}
	})
}
