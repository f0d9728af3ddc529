package db

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/model"
)

// SQL of the streams that are not one (source, id) list.

// TreeNode is one node of a balance-sheet snapshot.
type TreeNode struct {
	Node, Parent string
	Depth        int
	Code, Name   *string
	Balance      any // pgtype.Numeric or nil
	Payload      []byte
	Hash         [sha256.Size]byte
}

// TreeDigest is what tells two trees apart: every node with the digest of
// its bytes, in node order. nodes is sorted.
func TreeDigest(nodes []TreeNode) string {
	slices.SortFunc(nodes, func(a, b TreeNode) int { return strings.Compare(a.Node, b.Node) })
	var want strings.Builder
	for i, n := range nodes {
		if i > 0 {
			want.WriteByte(',')
		}
		want.WriteString(n.Node + ":" + hex.EncodeToString(n.Hash[:]))
	}
	return want.String()
}

// ClaimLegacySnapshots hands the snapshots written before logins (login
// empty) to the first login of their source that runs the stream.
func ClaimLegacySnapshots(ctx context.Context, tx pgx.Tx, sc model.Scope) error {
	_, err := tx.Exec(ctx, `
UPDATE erp.balance_sheet_snapshots SET login = $2
WHERE source = $1 AND login = '' AND $2 <> ''
  AND NOT EXISTS (SELECT 1 FROM erp.balance_sheet_snapshots WHERE source = $1 AND login = $2)`, sc.Source, sc.Login)
	if err != nil {
		return fmt.Errorf("claiming the balance sheets of before logins: %w", Describe(err))
	}
	return nil
}

// BalanceSheetDates lists the dates of the login's snapshots kept.
func BalanceSheetDates(ctx context.Context, q Reader, sc model.Scope) (map[string]bool, error) {
	rows, err := q.Query(ctx, `SELECT DISTINCT as_of::text FROM erp.balance_sheet_snapshots WHERE source = $1 AND login = $2`, sc.Source, sc.Login)
	if err != nil {
		return nil, fmt.Errorf("balance sheets kept: %w", Describe(err))
	}
	dates, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("balance sheets kept: %w", Describe(err))
	}
	out := make(map[string]bool, len(dates))
	for _, d := range dates {
		out[d] = true
	}
	return out, nil
}

// ReplaceBalanceSheet stores the login's snapshot as of a date unless the
// one stored is the same, node for node; the table's trigger keeps a tree
// it replaces in erp.balance_sheet_snapshot_history. It returns whether
// it wrote.
func ReplaceBalanceSheet(ctx context.Context, tx pgx.Tx, sc model.Scope, asOf string, nodes []TreeNode) (bool, error) {
	want := TreeDigest(nodes)
	var have string
	err := tx.QueryRow(ctx, `
SELECT coalesce(string_agg(node || ':' || encode(payload_hash, 'hex'), ',' ORDER BY node COLLATE "C"), '')
FROM erp.balance_sheet_snapshots WHERE source = $1 AND login = $3 AND as_of = $2`, sc.Source, asOf, sc.Login).Scan(&have)
	if err != nil {
		return false, fmt.Errorf("reading balance sheet of %s: %w", asOf, Describe(err))
	}
	if have == want {
		return false, nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM erp.balance_sheet_snapshots WHERE source = $1 AND login = $3 AND as_of = $2`,
		sc.Source, asOf, sc.Login); err != nil {
		return false, fmt.Errorf("replacing balance sheet of %s: %w", asOf, Describe(err))
	}
	rows := make([][]any, len(nodes))
	for i, n := range nodes {
		var parent *string
		if n.Parent != "" {
			parent = &n.Parent
		}
		rows[i] = []any{sc.Source, sc.Login, asOf, n.Node, parent, n.Depth, sc.CompanyID, sc.BranchID, n.Code, n.Name, n.Balance, n.Payload, n.Hash[:]}
	}
	_, err = CopyInto(ctx, tx, pgx.Identifier{"erp", "balance_sheet_snapshots"},
		[]string{"source", "login", "as_of", "node", "parent", "depth", "company_id", "branch_id", "code", "name", "balance", "payload", "payload_hash"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return false, fmt.Errorf("writing balance sheet of %s: %w", asOf, Describe(err))
	}
	return true, nil
}

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
	company, branch := SweepScope{Scope: sc}.labels(Row{Labels: lb})
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

// listedBy is the login rows are listed by; NULL outside logins.
func listedBy(sc model.Scope) any { return SweepScope{Scope: sc}.listedBy() }

// Document is a journal entry or voucher whose lines are to be read, with
// its labels (which its lines take).
type Document struct {
	ID                  string
	Hash                []byte
	CompanyID, BranchID string
}

// DocumentsNeedingLines lists, in id order after after, up to limit live
// documents of a table whose journal lines were never read, or were read
// for another version: those the login of sc decides (see Table.Gone),
// so that each document is read by one login, one that lists it.
func DocumentsNeedingLines(ctx context.Context, q Reader, table, kind string, sc model.Scope, after string, limit int) ([]Document, error) {
	rows, err := q.Query(ctx, fmt.Sprintf(`
SELECT d.id, d.payload_hash, d.company_id, d.branch_id FROM %s d
LEFT JOIN erp.journal_line_documents l ON l.source = d.source AND l.document_kind = $2 AND l.document_id = d.id
WHERE d.source = $1 AND d.deleted_at IS NULL AND (l.document_hash IS NULL OR l.document_hash <> d.payload_hash)
  AND `+decidedBy("d", "$6", "$7", "$5")+`
  AND d.id > $3
ORDER BY d.id LIMIT $4`, pgx.Identifier(strings.Split(table, ".")).Sanitize()), sc.Source, kind, after, limit, listedBy(sc), sc.CompanyID, sc.BranchID)
	if err != nil {
		return nil, fmt.Errorf("documents of %s: %w", table, Describe(err))
	}
	docs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Document, error) {
		var d Document
		return d, r.Scan(&d.ID, &d.Hash, &d.CompanyID, &d.BranchID)
	})
	if err != nil {
		return nil, fmt.Errorf("documents of %s: %w", table, Describe(err))
	}
	return docs, nil
}

// ForgetJournalLines forgets which documents of a table the login of sc
// read the journal lines of (those it decides, see DocumentsNeedingLines):
// their lines are read again, and kept meanwhile.
func ForgetJournalLines(ctx context.Context, tx pgx.Tx, table, kind string, sc model.Scope) (int64, error) {
	tag, err := tx.Exec(ctx, fmt.Sprintf(`
DELETE FROM erp.journal_line_documents l USING %s d
WHERE l.source = $1 AND l.document_kind = $2 AND d.source = l.source AND d.id = l.document_id
  AND `+decidedBy("d", "$4", "$5", "$3"), pgx.Identifier(strings.Split(table, ".")).Sanitize()), sc.Source, kind, listedBy(sc), sc.CompanyID, sc.BranchID)
	if err != nil {
		return 0, fmt.Errorf("forgetting the journal lines read of %s: %w", table, Describe(err))
	}
	return tag.RowsAffected(), nil
}

// JournalLine is one line of a document's journal preview.
type JournalLine struct {
	Line          string
	AccountCode   *string
	Debit, Credit any // pgtype.Numeric or nil
	Payload       []byte
}

// ReplaceJournalLines stores the lines of one document version; the
// table's trigger keeps the lines it replaces in erp.journal_lines_history.
func ReplaceJournalLines(ctx context.Context, tx pgx.Tx, sc model.Scope, kind string, doc Document, lines []JournalLine) error {
	if _, err := tx.Exec(ctx, `DELETE FROM erp.journal_lines WHERE source = $1 AND document_kind = $2 AND document_id = $3`,
		sc.Source, kind, doc.ID); err != nil {
		return fmt.Errorf("journal lines of %s %s: %w", kind, doc.ID, Describe(err))
	}
	rows := make([][]any, len(lines))
	for i, l := range lines {
		rows[i] = []any{sc.Source, kind, doc.ID, l.Line, doc.CompanyID, doc.BranchID, l.AccountCode, l.Debit, l.Credit, l.Payload}
	}
	if _, err := CopyInto(ctx, tx, pgx.Identifier{"erp", "journal_lines"},
		[]string{"source", "document_kind", "document_id", "line", "company_id", "branch_id", "account_code", "debit", "credit", "payload"},
		pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("journal lines of %s %s: %w", kind, doc.ID, Describe(err))
	}
	if _, err := tx.Exec(ctx, `
INSERT INTO erp.journal_line_documents (source, document_kind, document_id, document_hash) VALUES ($1, $2, $3, $4)
ON CONFLICT (source, document_kind, document_id) DO UPDATE SET document_hash = EXCLUDED.document_hash`,
		sc.Source, kind, doc.ID, doc.Hash); err != nil {
		return fmt.Errorf("journal lines of %s %s: %w", kind, doc.ID, Describe(err))
	}
	return nil
}

// AppendMessagingStats adds a statistics snapshot unless it equals the
// latest one; it returns whether it wrote.
func AppendMessagingStats(ctx context.Context, tx pgx.Tx, sc model.Scope, payload []byte, hash [sha256.Size]byte) (bool, error) {
	tag, err := tx.Exec(ctx, `
INSERT INTO erp.messaging_stats (source, login, company_id, branch_id, payload, payload_hash)
SELECT $1, $6, $2, $3, $4, $5
WHERE $5 IS DISTINCT FROM (SELECT payload_hash FROM erp.messaging_stats WHERE source = $1 AND login = $6 ORDER BY taken_at DESC LIMIT 1)`,
		sc.Source, sc.CompanyID, sc.BranchID, payload, hash[:], sc.Login)
	if err != nil {
		return false, fmt.Errorf("messaging stats: %w", Describe(err))
	}
	return tag.RowsAffected() == 1, nil
}
