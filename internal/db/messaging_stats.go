package db

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/erpsync/erpsync/internal/model"
)

// The messaging statistics: a snapshot per login whenever it changes
// (erp.messaging_stats).

// AppendMessagingStats adds a statistics snapshot unless the latest one
// holds the same payload with the same labels; it returns whether it
// wrote. The latest is compared by content, never by its payload_hash,
// which the daemon's role could have written beside another payload.
func AppendMessagingStats(ctx context.Context, tx Tx, sc model.Scope, payload []byte, hash [sha256.Size]byte) (bool, error) {
	tag, err := tx.Exec(ctx, `
INSERT INTO erp.messaging_stats (source, login, company_id, branch_id, payload, payload_hash)
SELECT $1, $6, $2, $3, $4, $5
WHERE ($2::text, $3::text, $4::jsonb) IS DISTINCT FROM (
    SELECT (company_id, branch_id, payload) FROM erp.messaging_stats WHERE source = $1 AND login = $6 ORDER BY taken_at DESC LIMIT 1)`,
		sc.Source, sc.CompanyID, sc.BranchID, payload, hash[:], sc.Login)
	if err != nil {
		return false, fmt.Errorf("messaging stats: %w", Describe(err))
	}
	return tag.RowsAffected() == 1, nil
}
