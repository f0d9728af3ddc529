package daemon

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/erp/erpsim"
	"github.com/erpsync/erpsync/internal/sync"
)

// TestRevoker documents the token revoker: at the daemon's stop, after the
// scheduler's, it revokes the ERP token of every login.
func TestRevoker(t *testing.T) {
	// Stop revokes the token of every login of every source, each with its own token;
	// an ERP that does not answer the revoke holds the stop no longer than the
	// timeout, and keeps nobody else's token alive; a second Stop revokes nothing
	// more.
	t.Run("RevokesEveryLoginsTokenOnceWithinItsTimeout", func(t *testing.T) {
		branches, branchesURL := newSim(t, erpsim.Options{Users: branchUsers})
		hung, hungURL := newSim(t, erpsim.Options{})
		var a []sync.Login
		for _, u := range branchUsers {
			a = append(a, loggedIn(t, branchesURL, u.Username, u.Password))
		}
		b := []sync.Login{loggedIn(t, hungURL, goodUser, goodPassword)}
		if branches.ActiveTokens() != 2 || hung.ActiveTokens() != 1 {
			t.Fatalf("tokens before the stop: %d and %d, want 2 and 1", branches.ActiveTokens(), hung.ActiveTokens())
		}
		// The second ERP takes the revoke and does not answer it until the
		// client gives up (or the test ends: the server's Close waits for its
		// handlers). The body is read first: only then does the server notice
		// a client that went away.
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		hung.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != revokePath {
				return false
			}
			io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return true
		})

		const timeout = time.Second
		log, logs := testLog()
		rv := newRevoker(revokerDeps{Targets: []sync.Target{{Source: "branches", Logins: a}, {Source: "hung", Logins: b}},
			Timeout: timeout, Log: log})
		if err := rv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := len(revokeRequests(branches)) + len(revokeRequests(hung)); n != 0 {
			t.Fatalf("%d revokes before Stop", n)
		}
		// The bound is the timeout; the slack is for a loaded CI machine.
		took := returnsWithin(t, timeout+10*time.Second, "revoker Stop", rv.Stop)
		if took > timeout+2*time.Second {
			t.Errorf("Stop took %s with an ERP hanging; the revoke timeout is %s", took, timeout)
		}
		if got := branches.Revocations(); got != 2 {
			t.Errorf("the two-login ERP saw %d revocations, want 2", got)
		}
		if got := branches.ActiveTokens(); got != 0 {
			t.Errorf("%d tokens of the two-login ERP still active", got)
		}
		var users []string
		for _, r := range revokeRequests(branches) {
			users = append(users, r.Username)
		}
		slices.Sort(users)
		if want := []string{"sync-jeddah", "sync-riyadh"}; !slices.Equal(users, want) {
			t.Errorf("revokes came with the tokens of %v, want one of each login %v", users, want)
		}
		if got := len(revokeRequests(hung)); got != 1 {
			t.Errorf("the hanging ERP was asked %d times, want 1", got)
		}
		if !strings.Contains(logs.String(), "could not revoke the ERP token") || !strings.Contains(logs.String(), "source=hung") {
			t.Errorf("no warning about the token of the hanging source:\n%s", logs.String())
		}

		// A client forgets a token it revoked, so a second revoke pass would
		// send nothing anyway; give one login a fresh token to see that the
		// second Stop makes no pass at all.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := a[0].Client.Get(ctx, "/accounts/api/currencies/", nil); err != nil || branches.ActiveTokens() != 1 {
			t.Fatalf("logging in again: %v (%d tokens)", err, branches.ActiveTokens())
		}
		returnsWithin(t, time.Second, "a second revoker Stop", rv.Stop)
		if n, m := len(revokeRequests(branches)), len(revokeRequests(hung)); n != 2 || m != 1 || branches.ActiveTokens() != 1 {
			t.Errorf("after a second Stop the ERPs saw %d and %d revokes (%d tokens left), want still 2 and 1 (1 left): Stop revokes once",
				n, m, branches.ActiveTokens())
		}
		if err := a[0].Client.Close(ctx); err != nil {
			t.Errorf("revoking the fresh token: %v", err)
		}
	})
}

// loggedIn is a login whose client holds a token of sim (it read the
// currencies once).
func loggedIn(t *testing.T, baseURL, username, password string) sync.Login {
	t.Helper()
	c, err := erp.New(erp.Options{BaseURL: baseURL, Username: username, Password: password, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, "/accounts/api/currencies/", nil); err != nil {
		t.Fatalf("%s: %v", username, err)
	}
	return sync.Login{Name: username, Client: c}
}

const revokePath = "/api/auth/revoke/"

func revokeRequests(sim *erpsim.Sim) []erpsim.Request {
	var out []erpsim.Request
	for _, r := range sim.Requests() {
		if r.Path == revokePath {
			out = append(out, r)
		}
	}
	return out
}
