package db

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/jackc/pgx/v5"

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
// cashbox is (lb: its own labels, or the login's context): new or changed
// ones are upserted, and ones marked deleted that are listed again are
// revived. Unchanged grants are not touched. As for entity rows, labels
// change only with a cashbox's own, or when the row is marked stale (see
// stale). Grants no longer listed are marked at the end of the read,
// through the deletion guard (CashboxAccessGone).
func UpsertCashboxAccess(ctx context.Context, tx pgx.Tx, sc model.Scope, cashbox string, lb Labels, rows []AccessRow) (UpsertResult, error) {
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
    INSERT INTO erp.cashbox_access AS t (source, cashbox_id, "user", company_id, branch_id, payload, payload_hash, listed_by)
    SELECT $1, $4, s.usr,
           CASE WHEN cur."user" IS NULL OR $9 OR `+stale("cur")+` THEN $2 ELSE cur.company_id END,
           CASE WHEN cur."user" IS NULL OR $9 OR `+stale("cur")+` THEN $3 ELSE cur.branch_id END,
           s.payload, s.hash,
           CASE WHEN cur."user" IS NULL OR cur.deleted_at IS NOT NULL OR cur.listed_by IS NULL OR `+stale("cur")+` THEN $8 ELSE cur.listed_by END
    FROM unnest($5::text[], $6::jsonb[], $7::bytea[]) AS s(usr, payload, hash)
    LEFT JOIN erp.cashbox_access cur ON cur.source = $1 AND cur.cashbox_id = $4 AND cur."user" = s.usr
    WHERE cur."user" IS NULL OR cur.payload_hash <> s.hash OR cur.deleted_at IS NOT NULL
       OR ($9 AND (cur.company_id <> $2 OR cur.branch_id <> $3))
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

// AccessListed is what a complete read of the access lists found: each
// grant listed (Cashboxes[i], Users[i]), and the cashboxes whose grants
// are kept as they are (their access route answered 404).
type AccessListed struct {
	Cashboxes, Users []string
	Kept             []string
}

// accessGone is the scope's live grants a read no longer listed.
const accessGone = `t.source = $1 AND t.deleted_at IS NULL AND %s
  AND t.cashbox_id <> ALL (coalesce($6::text[], '{}'))
  AND NOT EXISTS (SELECT 1 FROM unnest($4::text[], $5::text[]) AS k(cashbox_id, usr) WHERE k.cashbox_id = t.cashbox_id AND k.usr = t."user")`

// CashboxAccessGone counts the scope's live grants the read did not list,
// and all its live grants; with digest, it names the gone ones by a
// digest of their (cashbox, user) pairs.
func CashboxAccessGone(ctx context.Context, tx pgx.Tx, sc model.Scope, l AccessListed, digest bool) (gone, live int64, d []byte, err error) {
	err = tx.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE gone), count(*),
       CASE WHEN $8 THEN sha256(convert_to(string_agg(cashbox_id || E'\t' || "user", E'\n' ORDER BY cashbox_id COLLATE "C", "user" COLLATE "C")
           FILTER (WHERE gone), 'UTF8')) END
FROM (SELECT t.cashbox_id, t."user", (`+fmt.Sprintf(accessGone, "true")+`) AS gone
      FROM erp.cashbox_access t
      WHERE t.source = $1 AND t.deleted_at IS NULL AND `+decidedBy("t", "$2", "$3", "$7")+`) x`,
		sc.Source, sc.CompanyID, sc.BranchID, l.Cashboxes, l.Users, l.Kept, listedBy(sc), digest).Scan(&gone, &live, &d)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("cashbox_access no longer listed: %w", Describe(err))
	}
	return gone, live, d, nil
}

// MarkCashboxAccessGone marks deleted the scope's live grants the read
// did not list.
func MarkCashboxAccessGone(ctx context.Context, tx pgx.Tx, sc model.Scope, l AccessListed) (int64, error) {
	tag, err := tx.Exec(ctx, `UPDATE erp.cashbox_access t SET deleted_at = now() WHERE `+
		fmt.Sprintf(accessGone, decidedBy("t", "$2", "$3", "$7")),
		sc.Source, sc.CompanyID, sc.BranchID, l.Cashboxes, l.Users, l.Kept, listedBy(sc))
	if err != nil {
		return 0, fmt.Errorf("cashbox_access no longer listed: %w", Describe(err))
	}
	return tag.RowsAffected(), nil
}
