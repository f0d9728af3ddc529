// Package migrations holds the warehouse schema as goose SQL files,
// embedded so the binary carries its own schema.
package migrations

import "embed"

//go:embed *.sql
var FS embed.FS
