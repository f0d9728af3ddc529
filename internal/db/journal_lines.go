package db

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/model"
)

// The journal lines of documents: each journal entry's or voucher's
// journal preview (erp.journal_lines), and which version of each document
// they were read for (erp.journal_line_documents).

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
func ForgetJournalLines(ctx context.Context, tx Tx, table, kind string, sc model.Scope) (int64, error) {
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
func ReplaceJournalLines(ctx context.Context, tx Tx, sc model.Scope, kind string, doc Document, lines []JournalLine) error {
	if _, err := tx.Exec(ctx, `DELETE FROM erp.journal_lines WHERE source = $1 AND document_kind = $2 AND document_id = $3`,
		sc.Source, kind, doc.ID); err != nil {
		return fmt.Errorf("journal lines of %s %s: %w", kind, doc.ID, Describe(err))
	}
	rows := make([][]any, len(lines))
	for i, l := range lines {
		rows[i] = []any{sc.Source, kind, doc.ID, l.Line, doc.CompanyID, doc.BranchID, l.AccountCode, l.Debit, l.Credit, l.Payload}
	}
	if _, err := copyInto(ctx, tx, pgx.Identifier{"erp", "journal_lines"},
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
