package db

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/erpsync/erpsync/internal/model"
)

// ChildTable is a table whose rows are the children of a parent, keyed by
// (source, parent, child), with company_id, branch_id, listed_by and
// deleted_at as entity tables have them: a read of every parent's list
// writes it, and ends by marking deleted the children of the login's rows
// it no longer listed (a cashbox's grants).
type ChildTable struct {
	Name          string // schema-qualified
	Parent, Child string // the key's columns besides source
}

// ChildrenListed is what a complete read of the parents' lists found:
// each child listed (Parents[i], Children[i]), and the parents whose
// children are kept as they are (their list could not be read).
type ChildrenListed struct {
	Parents, Children []string
	Kept              []string
}

// Add records the children a parent listed, or that they are kept.
func (l *ChildrenListed) Add(parent string, children []string, kept bool) {
	if kept {
		l.Kept = append(l.Kept, parent)
		return
	}
	for _, c := range children {
		l.Parents, l.Children = append(l.Parents, parent), append(l.Children, c)
	}
}

// ChildKey names one child for the deletion decision: its parent and its
// own key, joined by a byte no text in Postgres holds.
func ChildKey(parent, child string) string { return parent + "\x00" + child }

// goneSQL selects, with t the table, the scope's live children the read
// did not list ($4, $5) whose parent's children are not kept ($6).
func (c *ChildTable) goneSQL(decided string) string {
	p, ch := pgx.Identifier{c.Parent}.Sanitize(), pgx.Identifier{c.Child}.Sanitize()
	return fmt.Sprintf(`t.source = $1 AND t.deleted_at IS NULL AND %s
  AND t.%s <> ALL (coalesce($6::text[], '{}'))
  AND NOT EXISTS (SELECT 1 FROM unnest($4::text[], $5::text[]) AS k(parent, child) WHERE k.parent = t.%s AND k.child = t.%s)`,
		decided, p, p, ch)
}

// ChildEvidence is what the warehouse says that a read's deletions of
// children are decided on: the gone children (ChildKey), the live ones the
// login decides, gone included, and the deletion the guard holds.
type ChildEvidence struct {
	Gone []string
	Live int64
	Held Held
}

// DeletionEvidence reads, in one round trip, what the deletions of a
// read of sc's login that found l are decided on.
func (c *ChildTable) DeletionEvidence(ctx context.Context, tx Tx, sc model.Scope, l ChildrenListed) (ChildEvidence, error) {
	var ev ChildEvidence
	table := pgx.Identifier(strings.Split(c.Name, ".")).Sanitize()
	p, ch := pgx.Identifier{c.Parent}.Sanitize(), pgx.Identifier{c.Child}.Sanitize()
	b := &pgx.Batch{}
	// One aggregate's rows come in the same order as the other's: the two
	// arrays pair each gone child with its parent.
	b.Queue(fmt.Sprintf(`
SELECT count(*), coalesce(array_agg(t.%[1]s) FILTER (WHERE %[3]s), '{}'), coalesce(array_agg(t.%[2]s) FILTER (WHERE %[3]s), '{}')
FROM %[4]s t WHERE t.source = $1 AND t.deleted_at IS NULL AND %[5]s`, p, ch, c.goneSQL("true"), table, decidedBy("t", "$2", "$3", "$7")),
		sc.Source, sc.CompanyID, sc.BranchID, l.Parents, l.Children, l.Kept, listedBy(sc)).QueryRow(func(r pgx.Row) error {
		var parents, children []string
		if err := r.Scan(&ev.Live, &parents, &children); err != nil {
			return err
		}
		for i := range parents {
			ev.Gone = append(ev.Gone, ChildKey(parents[i], children[i]))
		}
		return nil
	})
	queueLoadHeld(b, sc.Key, model.KindSweep, &ev.Held)
	if err := sendBatch(ctx, tx, b, c.Name+": what its deletions are decided on"); err != nil {
		return ev, err
	}
	return ev, nil
}

// ApplyDeletions marks deleted the children d names (ChildKey) and
// records the deletion the guard holds, in one round trip; it returns how
// many it marked.
func (c *ChildTable) ApplyDeletions(ctx context.Context, tx Tx, sc model.Scope, d Deletions) (int64, error) {
	b := &pgx.Batch{}
	if d.SetHeld {
		queueSetHeld(b, sc.Key, model.KindSweep, d.Held)
	}
	var marked int64
	if len(d.Mark) > 0 {
		parents, children := make([]string, len(d.Mark)), make([]string, len(d.Mark))
		for i, k := range d.Mark {
			parents[i], children[i], _ = strings.Cut(k, "\x00")
		}
		p, ch := pgx.Identifier{c.Parent}.Sanitize(), pgx.Identifier{c.Child}.Sanitize()
		b.Queue(fmt.Sprintf(`UPDATE %s t SET deleted_at = now() FROM unnest($2::text[], $3::text[]) AS k(parent, child)
WHERE t.source = $1 AND t.%s = k.parent AND t.%s = k.child AND t.deleted_at IS NULL`,
			pgx.Identifier(strings.Split(c.Name, ".")).Sanitize(), p, ch), sc.Source, parents, children).Exec(func(tag pgconn.CommandTag) error {
			marked = tag.RowsAffected()
			return nil
		})
	}
	if err := sendBatch(ctx, tx, b, c.Name+": marking deletions"); err != nil {
		return 0, err
	}
	return marked, nil
}
