package db

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/erpsync/erpsync/internal/model"
)

// The balance sheet: one snapshot of the tree per login and date read
// (erp.balance_sheet_snapshots).

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
func ClaimLegacySnapshots(ctx context.Context, tx Tx, sc model.Scope) error {
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
// one stored is the same, node for node: the same parents, depths, codes,
// names, balances, payloads and labels (content, never the payload_hash
// the daemon's role could have written beside another node). The table's
// trigger keeps a tree it replaces in erp.balance_sheet_snapshot_history.
// It returns whether it wrote.
func ReplaceBalanceSheet(ctx context.Context, tx Tx, sc model.Scope, asOf string, nodes []TreeNode) (bool, error) {
	n := len(nodes)
	names, parents, depths := make([]string, n), make([]*string, n), make([]int32, n)
	codes, labels, balances, payloads := make([]*string, n), make([]*string, n), make([]pgtype.Numeric, n), make([][]byte, n)
	for i, nd := range nodes {
		names[i], depths[i], codes[i], labels[i], payloads[i] = nd.Node, int32(nd.Depth), nd.Code, nd.Name, nd.Payload
		if nd.Parent != "" {
			parents[i] = &nd.Parent
		}
		if b, ok := nd.Balance.(pgtype.Numeric); ok {
			balances[i] = b
		}
	}
	var same bool
	err := tx.QueryRow(ctx, `
WITH stored AS (
    SELECT node, parent, depth, company_id, branch_id, code, name, balance, payload FROM erp.balance_sheet_snapshots
    WHERE source = $1 AND login = $3 AND as_of = $2
), listed AS (
    SELECT u.node, u.parent, u.depth, $4::text, $5::text, u.code, u.name, u.balance, u.payload
    FROM unnest($6::text[], $7::text[], $8::int[], $9::text[], $10::text[], $11::numeric[], $12::jsonb[])
        AS u(node, parent, depth, code, name, balance, payload)
)
SELECT NOT EXISTS (SELECT * FROM stored EXCEPT ALL SELECT * FROM listed)
   AND NOT EXISTS (SELECT * FROM listed EXCEPT ALL SELECT * FROM stored)`,
		sc.Source, asOf, sc.Login, sc.CompanyID, sc.BranchID, names, parents, depths, codes, labels, balances, payloads).Scan(&same)
	if err != nil {
		return false, fmt.Errorf("reading balance sheet of %s: %w", asOf, Describe(err))
	}
	if same {
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
	_, err = copyInto(ctx, tx, pgx.Identifier{"erp", "balance_sheet_snapshots"},
		[]string{"source", "login", "as_of", "node", "parent", "depth", "company_id", "branch_id", "code", "name", "balance", "payload", "payload_hash"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return false, fmt.Errorf("writing balance sheet of %s: %w", asOf, Describe(err))
	}
	return true, nil
}
