package db

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/erpsync/erpsync/internal/model"
)

// Who may use each cashbox: one row per (cashbox, user) grant
// (erp.cashbox_access).

// AccessRow is one (cashbox, user) grant.
type AccessRow struct {
	User    string
	Payload []byte
	Hash    [sha256.Size]byte
}

// UpsertCashboxAccess writes the grants of one cashbox, labelled as the
// cashbox is (lb: its own labels, or the login's context): new ones are
// inserted, and ones whose content differs from what is stored (payload,
// labels, listed_by, as for entity rows: see Table.differs) or that are
// marked deleted are written again. Unchanged grants are not touched.
// Grants no longer listed are marked at the end of the read, through the
// deletion decision (CashboxAccess, a ChildTable).
func UpsertCashboxAccess(ctx context.Context, tx Tx, sc model.Scope, cashbox string, lb Labels, rows []AccessRow) (UpsertResult, error) {
	users := make([]string, len(rows))
	payloads := make([][]byte, len(rows))
	hashes := make([][]byte, len(rows))
	for i, r := range rows {
		users[i], payloads[i], hashes[i] = r.User, r.Payload, r.Hash[:]
	}
	company, branch := labelsOf(sc, lb)
	var res UpsertResult
	err := tx.QueryRow(ctx, `
WITH up AS (
    INSERT INTO erp.cashbox_access AS t (source, cashbox_id, "user", company_id, branch_id, payload, payload_hash, listed_by, first_listed_by)
    SELECT $1, $4, s.usr, n.company_id, n.branch_id, s.payload, s.hash, n.listed_by, $8
    FROM unnest($5::text[], $6::jsonb[], $7::bytea[]) AS s(usr, payload, hash)
    LEFT JOIN erp.cashbox_access cur ON cur.source = $1 AND cur.cashbox_id = $4 AND cur."user" = s.usr
    CROSS JOIN LATERAL (SELECT
        CASE WHEN `+takesLabels("cur", `cur."user"`, "$9", "$8")+` THEN $2 ELSE cur.company_id END AS company_id,
        CASE WHEN `+takesLabels("cur", `cur."user"`, "$9", "$8")+` THEN $3 ELSE cur.branch_id END AS branch_id,
        `+listerOf("cur", `cur."user"`, "$8")+` AS listed_by) n
    WHERE cur."user" IS NULL OR cur.deleted_at IS NOT NULL
       OR (cur.company_id, cur.branch_id, cur.payload, cur.payload_hash) IS DISTINCT FROM (n.company_id, n.branch_id, s.payload, s.hash)
       OR (cur.listed_by IS NOT NULL AND cur.listed_by IS DISTINCT FROM n.listed_by)
    ON CONFLICT (source, cashbox_id, "user") DO UPDATE SET payload = EXCLUDED.payload,
        payload_hash = EXCLUDED.payload_hash, company_id = EXCLUDED.company_id,
        branch_id = EXCLUDED.branch_id, listed_by = EXCLUDED.listed_by, deleted_at = NULL
    RETURNING (xmax = 0) AS inserted
)
SELECT count(*) FILTER (WHERE inserted), count(*) FILTER (WHERE NOT inserted) FROM up`,
		sc.Source, company, branch, cashbox, users, payloads, hashes, listedBy(sc), lb.Own).Scan(&res.Inserted, &res.Updated)
	if err != nil {
		return res, fmt.Errorf("cashbox_access of %s: %w", cashbox, Describe(err))
	}
	res.Unchanged = int64(len(rows)) - res.Inserted - res.Updated
	return res, nil
}

// CashboxAccess is erp.cashbox_access as a table of children: each
// cashbox's grants, keyed by the user they grant.
var CashboxAccess = &ChildTable{Name: "erp.cashbox_access", Parent: "cashbox_id", Child: "user"}
