package db_test

import (
	"testing"

	"github.com/erpsync/erpsync/internal/db"
)

func TestRedactURL(t *testing.T) {
	// A connection URL is shown without its password, and one that cannot be
	// parsed is not shown at all.
	t.Run("HidesThePasswordAndAURLThatCannotBeParsed", func(t *testing.T) {
		for in, want := range map[string]string{
			"postgres://erp:s3cret@db:5432/w?sslmode=require": "postgres://erp:xxxxx@db:5432/w?sslmode=require",
			"postgres://postgres@127.0.0.1:5432/erpsync_demo": "postgres://postgres@127.0.0.1:5432/erpsync_demo",
			"postgres://erp:s3cret@db:5432/w%zz":              "(a database URL that cannot be parsed)",
		} {
			if got := db.RedactURL(in); got != want {
				t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
			}
		}
	})
}
