package db

import (
	"context"
	"fmt"

	"github.com/erpsync/erpsync/internal/model"
)

// RecordLogin records the company and branch a login reads in, as the
// ERP gave them, in erp.sync_logins: what the login's bookkeeping is of
// (a scoped login reads the checkpoints and runs of the logins its grants
// cover). A context that did not change writes nothing.
func RecordLogin(ctx context.Context, q Querier, sc model.Scope) error {
	if sc.Login == "" {
		return nil
	}
	_, err := q.Exec(ctx, `
INSERT INTO erp.sync_logins AS l (source, login, company_id, branch_id) VALUES ($1, $2, $3, $4)
ON CONFLICT (source, login) DO UPDATE SET company_id = EXCLUDED.company_id, branch_id = EXCLUDED.branch_id, seen_at = now()
WHERE (l.company_id, l.branch_id) IS DISTINCT FROM (EXCLUDED.company_id, EXCLUDED.branch_id)`,
		sc.Source, sc.Login, sc.CompanyID, sc.BranchID)
	if err != nil {
		return fmt.Errorf("recording the context of login %s: %w", sc.Login, Describe(err))
	}
	return nil
}
