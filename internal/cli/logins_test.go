package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/testdb"
)

// TestEveryLoginIsCovered runs the operator's commands against one source
// read through two branch logins of a branch-scoped installation whose
// records carry their labels: sync
// reads each login's branch, check logs both in, probe reports each
// login's context and list scope, verify agrees over both, status has a
// line per login and stream; neither password nor token reaches the
// output or the database, and both tokens are revoked.
func TestEveryLoginIsCovered(t *testing.T) {
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
}

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
