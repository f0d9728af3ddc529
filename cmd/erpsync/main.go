// Command erpsync mirrors an ERP's HTTP API into a Postgres warehouse.
// Everything but argument and process wiring lives in internal/cli.
package main

import (
	"os"

	"github.com/erpsync/erpsync/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr))
}
