package config

import (
	"fmt"
	"os"
	"testing"
)

func TestIsConfigError(t *testing.T) {
	if IsConfigError(nil) || IsConfigError(os.ErrNotExist) || IsConfigError(fmt.Errorf("x: %w", os.ErrNotExist)) {
		t.Error("IsConfigError true for a non-config error")
	}
	e := &configError{msg: "boom"}
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
