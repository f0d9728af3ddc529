package cli

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/internal/testutil"
)

// TestSimulate documents `erpsync simulate`, the ERP simulator served for docker-
// compose and manual tests.
func TestSimulate(t *testing.T) {
	t.Parallel()
	// Each bad value is refused before anything listens, exit 2, with a message naming
	// the flag and the value; good values become the simulator's options.
	t.Run("RefusesABadFlagValueBeforeListeningAndTakesGoodOnes", func(t *testing.T) {
		t.Parallel()
		bad := []struct {
			args []string
			want string
		}{
			{[]string{"--branches", "1,x"}, `--branches: "x" is not a branch id`},
			{[]string{"--branches", "0"}, `--branches: "0" is not a branch id`},
			{[]string{"--branches", "2,1,2"}, `--branches: branch 2 is named twice in "2,1,2"`},
			{[]string{"--lists", "team"}, `--lists: "team" is not one of branch, company`},
			{[]string{"--labels", "names"}, `--labels: "names" is not one of ids, none, objects`},
			{[]string{"--order", "newest"}, `--order: "newest" is not one of asc, desc, unordered`},
			{[]string{"--cursor", "page"}, `--cursor: "page" is not one of key, position`},
			{[]string{"--envelope", "xml"}, `--envelope: "xml" is not one of data, array, results, datatables`},
			{[]string{"--invoices", "-1"}, `--invoices: -1 is negative`},
			{[]string{"--page-size-cap", "0"}, `--page-size-cap: 0 is not a page size`},
			{[]string{"--latency", "-1s"}, `--latency: -1s is negative`},
			{[]string{"--token-ttl", "0s"}, `--token-ttl: 0s is not a lifetime`},
			{[]string{"--new-invoice-every", "-10s"}, `--new-invoice-every: -10s is negative`},
			{[]string{"--new-journal-entry-every", "-1m"}, `--new-journal-entry-every: -1m0s is negative`},
			{[]string{"--drop-every", "-2"}, `--drop-every: -2 is negative`},
			{[]string{"--new-invoice-every", "soon"}, `invalid value "soon" for flag -new-invoice-every`},
			{[]string{"invoices"}, `unexpected argument "invoices"`},
		}
		for _, tc := range bad {
			r := runMain(t, nil, append([]string{"simulate", "--addr", "127.0.0.1:0"}, tc.args...)...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("simulate %s: want exit 2 and %q\n%s", strings.Join(tc.args, " "), tc.want, r)
			}
		}

		e := &command{args: strings.Fields("--branches 3,1 --lists branch --labels objects --order desc --cursor key --invoices 0 --new-invoice-every 10s")}
		sm, err := e.simulationFlags()
		if err != nil {
			t.Fatal(err)
		}
		o := sm.opts
		if o.ListScope != erpsim.ScopeBranch || o.RecordLabels != erpsim.LabelsObjects || o.ListOrder != erpsim.OrderNewestFirst ||
			o.CursorKind != erpsim.CursorLastKey || o.Invoices != -1 || sm.newInvoiceEvery != 10*time.Second || o.BranchID != 3 ||
			len(o.Users) != 2 || o.Users[0] != branchUser(3) || o.Users[1].Username != "erpsync-branch-1" || o.Users[1].BranchID != 1 {
			t.Fatalf("options %+v", sm)
		}
		if sim := erpsim.New(o); len(sim.Invoices()) != 0 {
			t.Fatalf("--invoices 0 serves %d invoices", len(sim.Invoices()))
		}
		e = &command{}
		if sm, err := e.simulationFlags(); err != nil || sm.opts.Users != nil || sm.opts.Invoices != 1000 || sm.opts.ListOrder != erpsim.OrderOldestFirst {
			t.Fatalf("defaults %+v %v", sm, err)
		}
	})

	// The users printed log in, each sees its branch's invoices newest first under
	// last-key cursors, and invoices keep coming.
	t.Run("ServesTheBranchUsersItPrints", func(t *testing.T) {
		t.Parallel()
		base, out := simulating(t, "--branches", "1,2", "--lists", "branch", "--invoices", "40", "--order", "desc", "--cursor", "key", "--new-invoice-every", "30ms")
		users := servedUsers(t, out.String())
		if len(users) != 2 || users["erpsync-branch-2"] != "erpsync-demo-password-2" {
			t.Fatalf("users served %v\n%s", users, out)
		}
		for user, password := range users {
			body, _ := json.Marshal(map[string]string{"username": user, "password": password})
			res, err := http.Post(base+"/api/auth/token/", "application/json", strings.NewReader(string(body)))
			if err != nil {
				t.Fatal(err)
			}
			var tok struct {
				AccessToken string `json:"access_token"`
				BranchID    int    `json:"branch_id"`
			}
			err = json.NewDecoder(res.Body).Decode(&tok)
			res.Body.Close()
			if err != nil || tok.BranchID != int(user[len(user)-1]-'0') {
				t.Fatalf("login %s: %v %+v", user, err, tok)
			}
			ids := listInvoiceIDs(t, base, tok.AccessToken)
			// Branch 1 holds the odd ids from 1001, branch 2 the even ones;
			// newest first, with those issued since the start on top.
			if len(ids) < 20 || !slices.IsSortedFunc(ids, func(a, b int64) int { return int(b - a) }) || (ids[0]-1001)%2 != int64(tok.BranchID-1) {
				t.Fatalf("%s lists %v", user, ids)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), "issued invoice 1042 (INV-2026-000042, branch 2, ") {
			if time.Now().After(deadline) {
				t.Fatalf("no invoices issued:\n%s", out)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	// The set-up of docs/configuration.md ("Trying a multi-branch set-up") as written,
	// in its order: its logins file, then its simulate command and passwords, an empty
	// database made before any command needs it, then check (which passes on the
	// empty database: sync will make the schema), probe, sync, a follow run, a
	// window run and status.
	t.Run("ServesTheMultiBranchSetUpAsDocumented", func(t *testing.T) {
		t.Parallel()
		doc, err := os.ReadFile("../../docs/configuration.md")
		if err != nil {
			t.Fatal(err)
		}
		_, section, ok := strings.Cut(string(doc), "\n## Trying a multi-branch set-up\n")
		if !ok {
			t.Fatal("docs/configuration.md has no section \"Trying a multi-branch set-up\"")
		}
		section, _, _ = strings.Cut(section, "\n## ")
		blocks := regexp.MustCompile("(?s)```(sh|yaml)\n(.*?)```").FindAllStringSubmatch(section, -1)
		if len(blocks) != 2 || blocks[0][1] != "yaml" || blocks[1][1] != "sh" {
			t.Fatalf("the section should show the logins file, then the commands that use it: %q", blocks)
		}
		yaml, commands := blocks[0][2], blocks[1][2]

		var simArgs []string
		env := []string{"ERPSYNC_LOG_FORMAT=text", "ERPSYNC_DATABASE_URL="}
		var steps [][]string
		for line := range strings.Lines(commands) {
			line, _, _ = strings.Cut(strings.TrimSpace(line), " #")
			switch fields := strings.Fields(line); {
			case len(fields) == 0:
			case fields[0] == "make" && slices.Equal(fields[1:], []string{"build", "&&", "export", `PATH="$PWD/bin:$PATH"`}):
				// The binary: the test runs the commands in its process.
			case fields[0] == "export":
				for _, kv := range fields[1:] {
					if !strings.HasPrefix(kv, "ERPSYNC_DATABASE_URL=") {
						env = append(env, kv)
					}
				}
			case fields[0] == "createdb":
				env[1] = "ERPSYNC_DATABASE_URL=" + testdb.Empty(t)
			case len(fields) > 2 && fields[0] == "erpsync" && fields[1] == "simulate":
				simArgs = slices.DeleteFunc(fields[2:], func(f string) bool { return f == "&" })
			case fields[0] == "erpsync":
				if env[1] == "ERPSYNC_DATABASE_URL=" {
					t.Fatalf("the section runs %q before it creates the database", line)
				}
				steps = append(steps, fields[1:])
			default:
				t.Fatalf("a command the test does not know: %q", line)
			}
		}
		base, out := simulating(t, simArgs...)
		for user, password := range servedUsers(t, out.String()) {
			if !strings.Contains(yaml, "username: "+user) || !slices.Contains(env, "SIM_PASSWORD_"+user[len(user)-1:]+"="+password) {
				t.Errorf("the section does not log in as %s (password %s):\n%s\n%s", user, password, commands, yaml)
			}
		}
		cfg := filepath.Join(t.TempDir(), "sim.yaml")
		if err := os.WriteFile(cfg, []byte(strings.ReplaceAll(yaml, "http://127.0.0.1:8090", base)), 0o600); err != nil {
			t.Fatal(err)
		}
		var ran []string
		for _, step := range steps {
			ran = append(ran, step[0])
		}
		if want := []string{"check", "probe", "sync", "sync", "sync", "status"}; !slices.Equal(ran, want) {
			t.Fatalf("steps %q, want %v", steps, want)
		}
		for i, step := range steps {
			step = slices.Clone(step)
			for j := range step {
				if step[j] == "sim.yaml" {
					step[j] = cfg
				}
			}
			r := runMain(t, env, step...)
			if r.code != exitOK {
				t.Fatalf("erpsync %s: exit %d\n%s", strings.Join(steps[i], " "), r.code, r)
			}
			if step[0] == "probe" || step[0] == "status" {
				for _, user := range []string{"erpsync-branch-1", "erpsync-branch-2"} {
					if !strings.Contains(r.stdout, user) {
						t.Errorf("%s does not name %s\n%s", step[0], user, r)
					}
				}
			}
		}
		conn, err := pgx.Connect(t.Context(), env[1][len("ERPSYNC_DATABASE_URL="):])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(t.Context())
		var rows, branches int
		if err := conn.QueryRow(t.Context(), `SELECT count(*), count(DISTINCT branch_id) FROM erp.invoices`).Scan(&rows, &branches); err != nil {
			t.Fatal(err)
		}
		want, _ := strconv.Atoi(simFlag(simArgs, "--invoices", "1000"))
		if rows < want || branches != 2 {
			t.Errorf("erp.invoices holds %d rows of %d branches, want at least %d of 2", rows, branches, want)
		}
	})
}

// simulating serves `erpsync simulate` with args on a free port until the
// test ends; it returns the base URL and the output so far.
func simulating(t *testing.T, args ...string) (string, *testutil.Buffer) {
	t.Helper()
	e := &command{args: append([]string{"--addr", "127.0.0.1:0"}, args...)}
	sm, err := e.simulationFlags()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", sm.addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &testutil.Buffer{}
	done := make(chan error, 1)
	go func() { done <- sm.serve(ctx, ln, out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); !strings.HasPrefix(out.String(), "erpsync simulator on "); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no banner: %q", out)
		}
	}
	return "http://" + ln.Addr().String(), out
}

// servedUsers reads the users a simulator says it serves.
func servedUsers(t *testing.T, out string) map[string]string {
	t.Helper()
	users := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^  user (\S+)  password (\S+)  \(company 1, branch \d+\)$`).FindAllStringSubmatch(out, -1) {
		users[m[1]] = m[2]
	}
	return users
}

// listInvoiceIDs walks the invoice list with tok, 10 a page.
func listInvoiceIDs(t *testing.T, base, tok string) []int64 {
	t.Helper()
	var ids []int64
	q := url.Values{"page_size": {"10"}}
	for {
		req, _ := http.NewRequest("GET", base+"/sales/api/invoices/list/?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Data       []struct{ ID int64 }
			Pagination struct {
				HasNext    bool   `json:"has_next"`
				NextCursor string `json:"next_cursor"`
			}
		}
		err = json.NewDecoder(res.Body).Decode(&page)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("invoice page: %d %v", res.StatusCode, err)
		}
		for _, d := range page.Data {
			ids = append(ids, d.ID)
		}
		if !page.Pagination.HasNext {
			return ids
		}
		q.Set("cursor", page.Pagination.NextCursor)
	}
}

// simFlag is the value of flag in args, def if absent.
func simFlag(args []string, flag, def string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return def
}
