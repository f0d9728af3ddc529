package db

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/erpsync/erpsync/internal/model"
)

// Table is one mirrored entity table: the shared columns (source, id,
// company_id, branch_id, payload, payload_hash, listed_by,
// first_listed_by, first_seen_at, synced_at, deleted_at) plus the typed
// columns a stream extracts from each record.
// The SQL is built once from the column list, which comes from code,
// never from input.
type Table struct {
	Name    string   // schema-qualified, e.g. erp.invoices
	Columns []string // typed columns, in the order of Row.Values

	ident     pgx.Identifier
	stage     string
	copyCols  []string
	stageCols []string // copyCols and own_labels
	createSQL string
	upsertSQL string
	// changedSQL compares a page's rows without their payloads (see
	// changedQuery); fromStage is what a listed row becomes, by column.
	changedMu   sync.Mutex
	changedSQL  string
	columnTypes []string // of Columns, as the table has them
	fromStage   func(col string) string
	deleteSQL   string
	goneSQL     string
	storedSQL   string
	sameSQL     string
	hasRowsSQL  string
	othersSQL   string
}

// NewTable prepares the statements of a table.
func NewTable(name string, columns ...string) *Table {
	t := &Table{Name: name, Columns: columns}
	t.ident = pgx.Identifier(strings.Split(name, "."))
	t.stage = "stage_" + strings.ReplaceAll(name, ".", "_")
	t.copyCols = append([]string{"source", "id", "company_id", "branch_id"}, columns...)
	t.copyCols = append(t.copyCols, "payload", "payload_hash", "listed_by", "first_listed_by")
	t.stageCols = append(slices.Clone(t.copyCols), "own_labels")

	// ON COMMIT DELETE ROWS keeps one staging table per connection instead
	// of creating one per page: catalog churn costs WAL and time.
	// own_labels: the record carries its company and branch itself.
	t.createSQL = fmt.Sprintf(`CREATE TEMP TABLE IF NOT EXISTS %s (LIKE %s INCLUDING DEFAULTS, own_labels boolean) ON COMMIT DELETE ROWS`, t.stage, name)

	// What a listed row becomes (cur: the row stored, its columns NULL
	// when there is none; s: the record as listed, labelled with the
	// login's context when it carries no labels of its own).
	becomes := map[string]string{
		"company_id": "CASE WHEN " + takesLabels("cur", "cur.id", "s.own_labels", "s.listed_by") + " THEN s.company_id ELSE cur.company_id END",
		"branch_id":  "CASE WHEN " + takesLabels("cur", "cur.id", "s.own_labels", "s.listed_by") + " THEN s.branch_id ELSE cur.branch_id END",
		"listed_by":  listerOf("cur", "cur.id", "s.listed_by"),
	}
	var sel, set []string
	for _, c := range t.copyCols {
		if e, ok := becomes[c]; ok {
			sel = append(sel, e)
		} else if c == "first_listed_by" {
			sel = append(sel, "s.listed_by")
		} else {
			sel = append(sel, "s."+c)
		}
		if c != "source" && c != "id" && c != "first_listed_by" {
			set = append(set, fmt.Sprintf("%s = EXCLUDED.%s", c, c))
		}
	}
	t.fromStage = func(c string) string {
		if e, ok := becomes[c]; ok {
			return e
		}
		return "s." + c
	}
	// The staging table has no statistics, so the rows it meets are named
	// by id ($1 the source, $2 the ids): a join the planner could only
	// guess at turns into a scan of the whole table on every page.
	// The rows staged (those changedQuery found different) are compared
	// with the rows stored by their content (differs), never by a hash the
	// daemon's role could have written back: the LEFT JOIN drops unchanged
	// rows before they reach ON CONFLICT (DO UPDATE ... WHERE false still
	// locks and WAL-logs the row, and an unchanged re-sync must write
	// nothing), and the DO UPDATE WHERE tests the same on the row as it is
	// when the insert meets it.
	// The table's trigger (erp.guard_rows) keeps the version an update
	// replaces in the table's history and stamps synced_at: whoever
	// changes a row leaves that trace, the sync included.
	t.upsertSQL = fmt.Sprintf(`
INSERT INTO %[1]s AS t (%[2]s)
SELECT %[3]s
FROM %[4]s s
LEFT JOIN (SELECT * FROM %[1]s WHERE source = $1 AND id = ANY($2::text[])) cur ON cur.id = s.id
WHERE cur.id IS NULL OR %[5]s
ON CONFLICT (source, id) DO UPDATE SET %[6]s, deleted_at = NULL
WHERE %[7]s
RETURNING id, xmax = 0`,
		name, strings.Join(t.copyCols, ", "), strings.Join(sel, ", "), t.stage,
		t.differs("cur", t.fromStage, "cur.payload IS DISTINCT FROM s.payload"), strings.Join(set, ", "),
		t.differs("t", func(c string) string { return "EXCLUDED." + c }, "t.payload IS DISTINCT FROM EXCLUDED.payload"))

	t.hasRowsSQL = fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE source = $1)`, name)
	t.othersSQL = fmt.Sprintf(`SELECT count(*) FROM %s WHERE source = $1 AND id = ANY($2::text[]) AND listed_by <> $3`, name)

	// The live rows the sweep's login decides whose ids the sweep did not
	// see: rows listed by the login, and rows from before logins that
	// carry its company and branch; not a row written since the sweep
	// began ($6), which a follow run, or anyone, wrote meanwhile. EXCEPT
	// hashes both sides whatever the planner knows: sweep_seen rarely has
	// statistics, and a NOT EXISTS planned as a nested loop over it is
	// quadratic.
	// A window run ($7, the lowest id it read) judges only the rows from
	// there on, in the order of ids (erp.id_key).
	gone := fmt.Sprintf(`
    SELECT id FROM %s t
    WHERE source = $1 AND deleted_at IS NULL AND synced_at < $6 AND %s
      AND ($7 = '' OR erp.id_key(id) >= erp.id_key($7))
    EXCEPT
    SELECT id FROM erp.sweep_seen WHERE sweep_id = $4`, name, decidedBy("t", "$2", "$3", "$5"))
	t.goneSQL = gone
	// A row the ERP no longer lists is marked, never removed: finance
	// wants to see what disappeared.
	t.deleteSQL = fmt.Sprintf(`UPDATE %s SET deleted_at = now() WHERE source = $1 AND id = ANY($2) AND deleted_at IS NULL`, name)
	t.storedSQL = fmt.Sprintf(`SELECT u.id FROM unnest($2::text[]) AS u(id) WHERE EXISTS (SELECT 1 FROM %s t WHERE t.source = $1 AND t.id = u.id)`, name)
	// Rows stored as they are listed (the same hash), written by a time:
	// a page of them is one the warehouse had then.
	t.sameSQL = fmt.Sprintf(`
SELECT count(*) FROM unnest($2::text[], $3::bytea[]) AS s(id, hash)
JOIN %s t ON t.source = $1 AND t.id = s.id AND t.payload_hash = s.hash AND t.deleted_at IS NULL AND t.synced_at <= $4`, name)
	return t
}

// differs is the one test of whether a stored row (alias old) is written
// again as a listed record makes it (the SQL of each of its columns,
// from new; payloads, the SQL of whether the payloads differ): it is
// marked deleted, or its payload, typed columns, labels or payload_hash
// differ, or its listed_by, once set, does. Content is compared, never a
// hash alone: the daemon's role can write a hash back over a changed
// row. A hash that differs is written again, so that it stays the hash
// of the bytes last written; a listed_by not set yet (rows from before
// logins) is no reason to write.
func (t *Table) differs(old string, new func(col string) string, payloads string) string {
	cols := append([]string{"company_id", "branch_id"}, t.Columns...)
	cols = append(cols, "payload_hash")
	var o, n []string
	for _, c := range cols {
		o = append(o, old+"."+c)
		n = append(n, new(c))
	}
	return fmt.Sprintf(`(%[1]s.deleted_at IS NOT NULL
       OR (%[2]s) IS DISTINCT FROM (%[3]s)
       OR %[5]s
       OR (%[1]s.listed_by IS NOT NULL AND %[1]s.listed_by IS DISTINCT FROM %[4]s))`,
		old, strings.Join(o, ", "), strings.Join(n, ", "), new("listed_by"), payloads)
}

// takesLabels tests whether a listed record gives a row (alias cur, its
// columns NULL when there is none; key, a column of its key) its labels:
// when the row is new, when the record carries its own (own), and when
// the login listing it (lister) is the row's first lister (the context of
// its first lister labels a record that carries none). Another login
// listing it changes none: a record listed by several logins is stored
// once, and its labels never flip.
func takesLabels(cur, key, own, lister string) string {
	return fmt.Sprintf("(%s IS NULL OR %s OR %s = %s)", key, own, firstLister(cur), lister)
}

// listerOf is the listed_by a row (alias cur, key a column of its key)
// keeps when lister lists it: lister when the row is new, deleted,
// written before logins, or first listed by lister; else its own.
func listerOf(cur, key, lister string) string {
	return fmt.Sprintf("CASE WHEN %[2]s IS NULL OR %[1]s.deleted_at IS NOT NULL OR %[1]s.listed_by IS NULL OR %[3]s = %[4]s THEN %[4]s ELSE %[1]s.listed_by END",
		cur, key, firstLister(cur), lister)
}

// firstLister is the login that first listed a row (alias t), which
// nobody changes (erp.guard_rows): first_listed_by, or, for a row not
// written since before that column was kept, its listed_by, which the
// trigger copies to first_listed_by on the row's first update.
func firstLister(t string) string {
	return fmt.Sprintf("coalesce(%[1]s.first_listed_by, %[1]s.listed_by)", t)
}

// decidedBy is the one rule of which rows a login's complete read decides
// the deletion of (alias t; the other arguments are the SQL of the
// login's company, branch and name): the rows it listed first, and rows
// written before logins that carry its company and branch. A row another
// login listed first is never marked deleted because this one did not
// list it.
func decidedBy(t, company, branch, login string) string {
	return fmt.Sprintf("(%[1]s.listed_by = %[4]s OR (%[1]s.listed_by IS NULL AND %[1]s.company_id = %[2]s AND %[1]s.branch_id = %[3]s))",
		t, company, branch, login)
}

// PayloadHash is what a payload_hash column holds for a record's bytes:
// a record whose hash is its row's is unchanged, and is not written.
func PayloadHash(raw []byte) [sha256.Size]byte { return sha256.Sum256(raw) }

// Row is one record ready to write.
type Row struct {
	ID      string
	Values  []any // one per Table.Columns: pgtype.Numeric, string, bool, pgtype.Date or nil
	Payload []byte
	Hash    [sha256.Size]byte
	// Labels are the company and branch the record carries, if it does.
	Labels Labels
}

// Labels are the company and branch a record carries itself. A record
// without (Own false) is labelled with the context of the login that
// first listed it, and keeps those labels.
type Labels struct {
	CompanyID, BranchID string
	Own                 bool
}

// Numeric converts a decimal exactly, digit for digit.
func Numeric(d decimal.Decimal) pgtype.Numeric {
	return pgtype.Numeric{Int: d.Coefficient(), Exp: d.Exponent(), Valid: true}
}

// UpsertResult counts what an upsert did.
type UpsertResult struct {
	Inserted, Updated, Unchanged int64
	// Changed are the ids of the rows written (inserted or updated).
	Changed []string
	// New are the ids of the rows inserted (a subset of Changed).
	New []string
	// OthersListed counts rows another login listed first (CountOthers).
	OthersListed int64
}

// UpsertOptions say what an upsert does besides writing rows.
type UpsertOptions struct {
	// SeenBy is the sweep that records the ids as seen (0: none).
	SeenBy int64
	// CountOthers counts the rows another login listed first
	// (UpsertResult.OthersListed): logins of different branches listing
	// the same records read company-wide lists.
	CountOthers bool
}

// Upsert writes rows (ids unique within the slice) in bulk: the rows are
// compared with the warehouse's by content, their payloads by digest, in
// one round trip (see changedQuery); the rows that differ are COPYed into
// the connection's staging table and written by one INSERT ... SELECT ...
// ON CONFLICT, which compares them exactly.
func (t *Table) Upsert(ctx context.Context, tx Tx, sc model.Scope, rows []Row, opts UpsertOptions) (UpsertResult, error) {
	var res UpsertResult
	if len(rows) == 0 {
		return res, nil
	}
	query, err := t.changedQuery(ctx, tx)
	if err != nil {
		return res, err
	}
	args := t.changedArgs(sc, rows)
	ids := args[1].([]string)
	var changedIDs []string
	batch := &pgx.Batch{}
	batch.Queue(query, args...).Query(func(found pgx.Rows) error {
		var err error
		changedIDs, err = pgx.CollectRows(found, pgx.RowTo[string])
		return err
	})
	if opts.SeenBy != 0 {
		batch.Queue(seenSQL, opts.SeenBy, ids)
	}
	if opts.CountOthers {
		batch.Queue(t.othersSQL, sc.Source, ids, sc.Login).QueryRow(func(r pgx.Row) error { return r.Scan(&res.OthersListed) })
	}
	if err := sendBatch(ctx, tx, batch, t.Name+" compare with warehouse"); err != nil {
		return res, err
	}
	res.Unchanged = int64(len(rows) - len(changedIDs))
	if len(changedIDs) == 0 {
		return res, nil
	}
	if len(changedIDs) < len(rows) {
		keep := make(map[string]bool, len(changedIDs))
		for _, id := range changedIDs {
			keep[id] = true
		}
		changed := make([]Row, 0, len(changedIDs))
		for _, r := range rows {
			if keep[r.ID] {
				changed = append(changed, r)
			}
		}
		rows = changed
	}
	if _, err := tx.Exec(ctx, t.createSQL); err != nil {
		return res, fmt.Errorf("%s staging table: %w", t.Name, Describe(err))
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{t.stage}, t.stageCols, &rowSource{rows: rowsOf(rows), sc: sc, stage: true}); err != nil {
		return res, fmt.Errorf("%s copy to staging: %w", t.Name, Describe(err))
	}
	written, err := tx.Query(ctx, t.upsertSQL, sc.Source, changedIDs)
	if err == nil {
		var id string
		var inserted bool
		_, err = pgx.ForEachRow(written, []any{&id, &inserted}, func() error {
			res.Changed = append(res.Changed, id)
			if inserted {
				res.New = append(res.New, id)
				res.Inserted++
			} else {
				res.Updated++
			}
			return nil
		})
	}
	if err != nil {
		return res, fmt.Errorf("%s upsert: %w", t.Name, Describe(err))
	}
	res.Unchanged += int64(len(rows)) - res.Inserted - res.Updated
	return res, nil
}

// RowStream yields rows one at a time: Next advances, Row returns the
// current one. It lets one COPY span several pages.
type RowStream interface {
	Next() bool
	Row() *Row
}

// rowsOf streams a slice.
func rowsOf(rows []Row) RowStream { return &sliceStream{rows: rows, i: -1} }

type sliceStream struct {
	rows []Row
	i    int
}

func (s *sliceStream) Next() bool { s.i++; return s.i < len(s.rows) }
func (s *sliceStream) Row() *Row  { return &s.rows[s.i] }

// CopyNew writes rows that are new to the table straight into it with
// COPY: the initial load. A row that exists after all fails the COPY
// with a unique violation (IsUniqueViolation); the caller then upserts.
func (t *Table) CopyNew(ctx context.Context, tx Tx, sc model.Scope, rows RowStream) (int64, error) {
	n, err := copyInto(ctx, tx, t.ident, t.copyCols, &rowSource{rows: rows, sc: sc})
	if err != nil {
		return 0, fmt.Errorf("%s copy: %w", t.Name, Describe(err))
	}
	return n, nil
}

// Analyze refreshes the table's statistics after loaded rows were added,
// unless the planner already knows most of the table (the load is under
// a tenth of what it counts), or another session is analyzing it right
// now (SKIP_LOCKED): two ANALYZEs of a table wait for each other, and a
// fleet of sources loading one table would queue behind them.
func (t *Table) Analyze(ctx context.Context, q Querier, loaded int64) error {
	var known float64
	if err := q.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, t.Name).Scan(&known); err != nil {
		return fmt.Errorf("%s: statistics: %w", t.Name, Describe(err))
	}
	if known >= 0 && float64(loaded)*10 < known {
		return nil
	}
	if _, err := q.Exec(ctx, "ANALYZE (SKIP_LOCKED) "+t.ident.Sanitize()); err != nil {
		return fmt.Errorf("%s: analyze: %w", t.Name, Describe(err))
	}
	return nil
}

// hasRows reports whether the table holds any row of the source.
func (t *Table) hasRows(ctx context.Context, q Querier, source string) (bool, error) {
	var ok bool
	if err := q.QueryRow(ctx, t.hasRowsSQL, source).Scan(&ok); err != nil {
		return false, fmt.Errorf("%s: %w", t.Name, Describe(err))
	}
	return ok, nil
}

// Stored lists which of ids the table holds a row of for the source.
func (t *Table) Stored(ctx context.Context, q Querier, source string, ids []string) (map[string]bool, error) {
	rows, err := q.Query(ctx, t.storedSQL, source, ids)
	if err != nil {
		return nil, fmt.Errorf("%s rows stored: %w", t.Name, Describe(err))
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("%s rows stored: %w", t.Name, Describe(err))
	}
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// SameBy counts the rows among ids (with their hashes) that the table
// holds live, as listed, written by a time.
func (t *Table) SameBy(ctx context.Context, q Querier, source string, ids []string, hashes [][]byte, by time.Time) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, t.sameSQL, source, ids, hashes, by).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s rows unchanged: %w", t.Name, Describe(err))
	}
	return n, nil
}

// labelsOf are the company and branch a row is written with: the
// record's own (lb), else the login's context.
func labelsOf(sc model.Scope, lb Labels) (company, branch string) {
	if lb.Own {
		return lb.CompanyID, lb.BranchID
	}
	return sc.CompanyID, sc.BranchID
}

// listedBy is the login a row written now is listed by; NULL outside
// logins (the rows then keep the rule of before logins).
func listedBy(sc model.Scope) any {
	if sc.Login == "" {
		return nil
	}
	return sc.Login
}

// rowSource feeds CopyFrom without building an intermediate [][]any; for
// the staging table (stage) with own_labels.
type rowSource struct {
	rows  RowStream
	sc    model.Scope
	stage bool
	buf   []any
	// The scope's values, boxed once: a string put in an interface is
	// an allocation, and these are the same on every row.
	source, company, branch, listedBy any
	boxed                             bool
}

func (s *rowSource) Next() bool { return s.rows.Next() }
func (s *rowSource) Err() error { return nil }
func (s *rowSource) Values() ([]any, error) {
	if !s.boxed {
		s.source, s.company, s.branch, s.listedBy, s.boxed = s.sc.Source, s.sc.CompanyID, s.sc.BranchID, listedBy(s.sc), true
	}
	r := s.rows.Row()
	company, branch := s.company, s.branch
	if r.Labels.Own {
		company, branch = labelsOf(s.sc, r.Labels)
	}
	s.buf = append(s.buf[:0], s.source, r.ID, company, branch)
	s.buf = append(s.buf, r.Values...)
	s.buf = append(s.buf, r.Payload, r.Hash[:], s.listedBy, s.listedBy)
	if s.stage {
		s.buf = append(s.buf, r.Labels.Own)
	}
	return s.buf, nil
}

// changedSince lists the ids of the source's rows that something other
// than the page transactions of sweep sweepID (of k) changed since that
// sweep began. A page the ERP answers as it answered that sweep is
// skipped without comparing its rows ("known"): that holds only while
// its rows are as that sweep left them, and these are the rows that may
// not be. The sweep's own writes are told apart by transaction (the
// versions its pages wrote carry the transaction ids of the pages'
// digests), not by time: a sweep writes in every page it changes, and
// counting those would compare again every page after a sweep that
// changed one row in a hundred. Changes are read from the table's
// history, which its trigger writes for every update whoever makes it
// (an index on valid_to); a table without one is read by synced_at.
//
// Both the digests and the sweep's start are bookkeeping the daemon's
// role writes: a login of that role that forges them after changing a
// row keeps the row from this shortcut (not from its history, nor from
// erpsync verify).
func (t *Table) changedSince(ctx context.Context, q Querier, k model.Key, sweepID int64) ([]string, error) {
	var hist bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t.Name+"_history").Scan(&hist); err != nil {
		return nil, fmt.Errorf("%s: rows changed since sweep %d: %w", t.Name, sweepID, Describe(err))
	}
	changed := fmt.Sprintf(`SELECT t.id FROM %s t WHERE t.source = $1 AND t.synced_at >= (SELECT began FROM sweep)`, t.ident.Sanitize())
	if hist {
		h := slices.Clone(t.ident)
		h[len(h)-1] += "_history"
		changed = fmt.Sprintf(`SELECT DISTINCT t.id FROM %s t WHERE t.source = $1 AND t.valid_to >= (SELECT began FROM sweep)`, h.Sanitize())
	}
	rows, err := q.Query(ctx, `
WITH sweep AS (
    SELECT coalesce(max(last_sweep_started_at), '-infinity') AS began FROM erp.sync_checkpoints
    WHERE source = $1 AND stream = $2 AND login = $3 AND last_sweep_id = $4),
pages AS (SELECT xmin AS tx FROM erp.sweep_pages WHERE source = $1 AND stream = $2 AND login = $3 AND sweep_id = $4)
`+changed+` AND t.xmin NOT IN (SELECT tx FROM pages)`, k.Source, k.Stream, k.Login, sweepID)
	if err != nil {
		return nil, fmt.Errorf("%s: rows changed since sweep %d: %w", t.Name, sweepID, Describe(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("%s: rows changed since sweep %d: %w", t.Name, sweepID, Describe(err))
	}
	return ids, nil
}
