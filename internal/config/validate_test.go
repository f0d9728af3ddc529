package config

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestIsConfigError(t *testing.T) {
	if IsConfigError(nil) || IsConfigError(os.ErrNotExist) || IsConfigError(fmt.Errorf("x: %w", os.ErrNotExist)) {
		t.Error("IsConfigError true for a non-config error")
	}
	e := &configError{problems: []problem{{msg: "boom"}}}
	if !IsConfigError(e) || !IsConfigError(fmt.Errorf("a: %w", fmt.Errorf("b: %w", e))) || e.Error() != "boom" {
		t.Error("IsConfigError false for a config error")
	}
}

func TestNearest(t *testing.T) {
	keys := []string{"logins", "log_level", "password_file", "schedule", "drift", "invoices", "invoice_lines"}
	t.Run("FindsTheWordATypoMeant", func(t *testing.T) {
		for typo, want := range map[string]string{"login": "logins", "log_levle": "log_level", "pasword_file": "password_file",
			"schedul": "schedule", "dirft": "drift", "invoicez": "invoices"} {
			if got := nearest(typo, keys); got != want {
				t.Errorf("nearest(%q) = %q, want %q", typo, got, want)
			}
		}
	})
	t.Run("SuggestsNothingForAWordNoneIsNear", func(t *testing.T) {
		for _, word := range []string{"cron", "x", "base", "color", "lg"} {
			if got := nearest(word, keys); got != "" {
				t.Errorf("nearest(%q) = %q, want none", word, got)
			}
		}
	})
}

// TestAMissingPassword is the error of a login without a password: it
// names every place the password may be given, as the operator would
// write it, and those places only.
func TestAMissingPassword(t *testing.T) {
	t.Run("NamesTheVariableAndItsFileWhenTheLoginIsOfTheVariables", func(t *testing.T) {
		_, err := Load([]string{"ERPSYNC_ERP_BASE_URL=https://erp.example.com", "ERPSYNC_ERP_USERNAME=integration"}, Options{Streams: testSpecs, NeedERP: true})
		wantConfigError(t, err, "login integration has no password: set ERPSYNC_ERP_PASSWORD or ERPSYNC_ERP_PASSWORD_FILE")
		if strings.Contains(err.Error(), ", or") {
			t.Errorf("%v: the variable named twice", err)
		}
	})
	t.Run("NamesTheKeyAndTheVariablesWhenTheLoginIsOfTheFile", func(t *testing.T) {
		file := writeFile(t, "c.yaml", "sources:\n  - base_url: https://erp.example.com\n    username: u\n")
		_, err := Load([]string{"ERPSYNC_CONFIG=" + file}, Options{Streams: testSpecs, NeedERP: true})
		wantConfigError(t, err, "login u has no password: set sources[0].password_file, or ERPSYNC_ERP_PASSWORD / ERPSYNC_ERP_PASSWORD_FILE")
	})
}
