package sync

// Access is the rule by which a scoped login (one holding company grants,
// see docs/warehouse.md#access) reads a table's rows; sessions that read
// everything read every row whatever the rule. A stream declares the rule
// of its table (Info.Access), its history following it; the engine's own
// tables are declared in SideTables. The migrations put the rule on each
// table as the policy Policy() names (erp.apply_access, with the rule's
// text in erp.access_rule), and a catalog test holds the two equal.
type Access int

const (
	// ByCompany: the rows of its grants, per (source, company) or (source,
	// company, branch).
	ByCompany Access = iota
	// BySource: rows the companies of a source share, read with any grant
	// on the source.
	BySource
	// ByLogin: a login's bookkeeping, read with grants covering the
	// login's company and branch (erp.sync_logins).
	ByLogin
	// Withheld: no row.
	Withheld
)

// String is the rule's name in SQL (erp.apply_access).
func (a Access) String() string {
	return [...]string{"by_company", "by_source", "by_login", "withheld"}[a]
}

// Policy is the name of the policy through which the rule reads.
func (a Access) Policy() string { return "reads_" + a.String() }

// SideTables are the tables of erp that are no stream's Info.Table, with
// their rule: the engine's bookkeeping, and what streams write beside
// their table (currency_rates for currencies, journal_line_documents for
// journal lines). History tables (erp.<table>_history, and
// balance_sheet_snapshot_history) follow their table. erp.company_grants
// has rules of its own: each login reads its own grants.
var SideTables = map[string]Access{
	"sync_checkpoints":       ByLogin,
	"sync_runs":              ByLogin,
	"sync_follow":            ByLogin,
	"sync_window":            ByLogin,
	"change_positions":       Withheld,
	"sweep_bounds":           Withheld,
	"deletion_candidates":    Withheld,
	"sync_logins":            ByCompany,
	"sweep_pages":            Withheld,
	"sweep_seen":             Withheld,
	"rejected_records":       Withheld,
	"schema_drift":           Withheld,
	"journal_line_documents": Withheld,
	"currency_rates":         BySource,
	"full_comparisons":       ByLogin,
	"upgrade_findings":       Withheld,
}
