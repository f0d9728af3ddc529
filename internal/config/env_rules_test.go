package config

import "testing"

// TestVariablesAloneMakeASourceOnlyWithAURLOrALogin: with no file
// source to go to, the ERPSYNC_ERP_* variables make a source when they
// give its URL or a login; source-wide settings alone (a page size) make
// none, so that no source without a URL appears.
func TestVariablesAloneMakeASourceOnlyWithAURLOrALogin(t *testing.T) {
	for _, tt := range []struct {
		name    string
		env     []string
		sources int
	}{
		{"a URL alone makes a source", []string{"ERPSYNC_ERP_BASE_URL=https://erp.example.com"}, 1},
		{"a login alone makes a source", []string{"ERPSYNC_ERP_USERNAME=integration"}, 1},
		{"a password file alone makes a source", []string{"ERPSYNC_ERP_PASSWORD_FILE=/nonexistent"}, -1},
		{"a page size alone makes none", []string{"ERPSYNC_ERP_PAGE_SIZE=50"}, 0},
		{"a source name alone makes none", []string{"ERPSYNC_SOURCE=branch"}, 0},
		{"nothing makes none", nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Load(tt.env, Options{Streams: testSpecs})
			if tt.sources < 0 {
				// The file is read only for a source: its error says one was made.
				wantConfigError(t, err, "ERPSYNC_ERP_PASSWORD_FILE")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Sources) != tt.sources {
				t.Errorf("%d sources (%+v), want %d", len(cfg.Sources), cfg.Sources, tt.sources)
			}
		})
	}
}
