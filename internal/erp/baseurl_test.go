package erp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBaseURL documents the ERP's base URL: what ValidateBaseURL and New take,
// and the paths sent under it.
func TestBaseURL(t *testing.T) {
	t.Parallel()
	t.Run("IsHTTPSUnlessItIsLoopback", func(t *testing.T) {
		ok := []string{"https://erp.example.com", "https://erp.example.com:8443/base/", "http://127.0.0.1:8080", "http://localhost", "http://[::1]:1", "HTTP://localhost"}
		for _, u := range ok {
			if err := ValidateBaseURL(u); err != nil {
				t.Errorf("ValidateBaseURL(%q): %v", u, err)
			}
		}
		bad := map[string]string{
			"http://erp.example.com":          "HTTPS is required",
			"http://localhost.evil.com":       "HTTPS is required",
			"http://127.0.0.1.nip.io":         "HTTPS is required",
			"http://[::ffff:10.0.0.1]:80":     "HTTPS is required",
			"http://0.0.0.0:8080":             "HTTPS is required",
			"ftp://erp.example.com":           "scheme must be https",
			"erp.example.com":                 "no host",
			"https://":                        "no host",
			"":                                "no host",
			"https://erp.example.com:port/%%": "not a URL",
		}
		for u, want := range bad {
			err := ValidateBaseURL(u)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ValidateBaseURL(%q) = %v, want error containing %q", u, err, want)
			}
		}
	})

	// What a base URL's user information, query or fragment carries would
	// be dropped from every request, and may be a secret: each is refused,
	// by an error that quotes the URL with it masked.
	t.Run("RefusesUserInformationAQueryOrAFragmentWithoutQuotingThem", func(t *testing.T) {
		const secret = "Zk9-pw"
		for raw, want := range map[string]string{
			"https://sync:" + secret + "@erp.example.com/base/":  `"https://[redacted]@erp.example.com/base/": user information`,
			"https://" + secret + "@erp.example.com":             `"https://[redacted]@erp.example.com": user information`,
			"http://u:" + secret + "@erp.example.com":            `"http://[redacted]@erp.example.com": user information`,
			"https://erp.example.com/?key=" + secret:             `"https://erp.example.com/?key=[redacted]": a query`,
			"https://erp.example.com?api_key=" + secret + "&x=1": `"https://erp.example.com?api_key=[redacted]&x=[redacted]": a query`,
			"https://erp.example.com/?" + secret:                 `"https://erp.example.com/?[redacted]": a query`,
			"https://erp.example.com/?":                          `"https://erp.example.com/?": a query`,
			"http://127.0.0.1:8080/?token=" + secret:             `"http://127.0.0.1:8080/?token=[redacted]": a query`,
			"https://erp.example.com/#" + secret:                 `"https://erp.example.com/#[redacted]": a fragment`,
			"https://u:" + secret + "@erp.example.com:port/%%":   `"https://[redacted]@erp.example.com:port/%%": user information`,
			"https://u:a/" + secret + "@erp.example.com/base":    `"https://[redacted]@erp.example.com/base": user information`,
		} {
			err := ValidateBaseURL(raw)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ValidateBaseURL(%q) = %v, want an error containing %s", raw, err, want)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("ValidateBaseURL(%q) quotes the secret: %v", raw, err)
			}
			if _, err := New(Options{BaseURL: raw}); err == nil || strings.Contains(err.Error(), secret) {
				t.Errorf("New(%q) = %v, want an error without the secret", raw, err)
			}
		}
	})

	t.Run("IsLoopbackOnlyForLocalhostOrALoopbackIP", func(t *testing.T) {
		for host, want := range map[string]bool{
			"localhost": true, "LocalHost": true, "127.0.0.1": true, "127.255.0.9": true, "::1": true,
			"": false, "10.0.0.1": false, "erp.example.com": false, "localhost.example.com": false, "0.0.0.0": false, "[::1]": false,
		} {
			if got := isLoopback(host); got != want {
				t.Errorf("isLoopback(%q) = %v, want %v", host, got, want)
			}
		}
	})

	t.Run("IsCheckedByNew", func(t *testing.T) {
		t.Parallel()
		for _, u := range []string{"https://erp.example.com", "https://erp.example.com/prefix/", "http://127.0.0.1:8080", "http://localhost", "http://[::1]:1"} {
			if _, err := New(Options{BaseURL: u}); err != nil {
				t.Errorf("New(%q): %v", u, err)
			}
		}
		for _, u := range []string{"http://erp.example.com", "http://10.0.0.1:8080", "http://localhost.example.com"} {
			_, err := New(Options{BaseURL: u, Password: testPassword})
			if err == nil || !strings.Contains(err.Error(), "HTTPS is required") {
				t.Errorf("New(%q) error = %v, want 'HTTPS is required'", u, err)
			}
		}
		for _, u := range []string{"", "ftp://erp.example.com", "erp.example.com", "https://"} {
			if _, err := New(Options{BaseURL: u}); err == nil {
				t.Errorf("New(%q) succeeded, want error", u)
			}
		}
	})

	// An id holding '/' is one path segment: escaped once, never twice.
	t.Run("CarriesADetailPathsIDEscapedOnce", func(t *testing.T) {
		t.Parallel()
		got := make(chan string, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got <- r.URL.EscapedPath()
			w.Write([]byte(`{"ok":true,"data":[]}`))
		}))
		defer srv.Close()
		c := newTestClient(t, srv.URL+"/base", func(o *Options) { o.Auth, o.ClientID, o.ClientSecret = "plugin", "id", "secret" })
		path := DetailPath("/accounts/api/journal-entries/", "JE/2026/1", "/journal-preview/")
		if _, err := c.Get(testCtx(t), path, nil); err != nil {
			t.Fatal(err)
		}
		if p := <-got; p != "/base/accounts/api/journal-entries/JE%2F2026%2F1/journal-preview/" {
			t.Errorf("path sent = %s", p)
		}
		if l := RouteLabel(path); l != "/accounts/api/journal-entries/{pk}/journal-preview/" {
			t.Errorf("RouteLabel = %s", l)
		}
	})
}
