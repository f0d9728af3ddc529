// Package streams defines the streams erpsync mirrors, one file per family,
// each built on the exported machinery of package sync. Default builds
// the catalog the commands use; nothing registers itself.
package streams

import "github.com/erpsync/erpsync/internal/sync"

// Default is the catalog of every stream erpsync knows.
func Default() (*sync.Catalog, error) {
	all := []sync.Stream{Invoices(), Currencies(), Cashboxes(), CashboxReconciliations()}
	for _, d := range documents {
		all = append(all, d.list())
	}
	all = append(all, JournalLines(), BalanceSheet(), CashboxAccess())
	all = append(all, Messaging()...)
	return sync.NewCatalog(all...)
}

// MustDefault is Default for callers that cannot go on without it; the
// catalog is code, so an error there is a bug caught by every test.
func MustDefault() *sync.Catalog {
	c, err := Default()
	if err != nil {
		panic(err)
	}
	return c
}
