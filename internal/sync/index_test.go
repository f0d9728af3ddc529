package sync_test

import (
	"strings"
	"testing"

	"github.com/erpsync/erpsync/internal/erp"
	"github.com/erpsync/erpsync/internal/sync"
)

// TestIndexes documents a stream's declared indexes: a new stream's
// migration builds them with its table, and a declaration whose index
// reads a column the table does not have is refused before anything runs.
func TestIndexes(t *testing.T) {
	t.Parallel()
	list := func(indexes ...sync.Index) *sync.List {
		return &sync.List{Info: sync.Info{Name: "receipts", Table: &sync.Table{
			Columns: []sync.Column{{Name: "amount", Field: "amount", Type: sync.Money}, {Name: "receipt_date", Field: "date", Type: sync.Date, Lenient: true}},
			Indexes: indexes,
		}}, Path: "/receipts/", Paging: erp.CursorPaged}
	}
	byDate := sync.Index{Name: "receipts_source_date", Key: []string{"source", "receipt_date"},
		Include: []string{"amount", "company_id", "branch_id"}, Where: "deleted_at IS NULL"}

	t.Run("AreBuiltByTheMigrationOfANewStream", func(t *testing.T) {
		sql, err := sync.Migration(list(byDate))
		if err != nil {
			t.Fatal(err)
		}
		want := "CREATE INDEX receipts_source_date ON erp.receipts (source, receipt_date) INCLUDE (amount, company_id, branch_id) WHERE deleted_at IS NULL;\n"
		if !strings.Contains(sql, want) {
			t.Errorf("the migration does not build the declared index %q:\n%s", want, sql)
		}
		up, _, _ := strings.Cut(sql, "-- +goose Down")
		if strings.Index(up, want) < strings.Index(up, "CREATE TABLE erp.receipts") {
			t.Errorf("the index is built before its table:\n%s", sql)
		}
	})

	t.Run("RefuseAColumnTheTableDoesNotHave", func(t *testing.T) {
		for _, c := range []struct {
			name string
			x    sync.Index
			want string
		}{
			{"in the key", sync.Index{Name: "receipts_x", Key: []string{"source", "date"}}, "reads date"},
			{"included", sync.Index{Name: "receipts_x", Key: []string{"source"}, Include: []string{"payload_text"}}, "reads payload_text"},
			{"in the predicate", sync.Index{Name: "receipts_x", Key: []string{"source"}, Where: "removed_at IS NULL"}, "reads removed_at"},
			{"no key", sync.Index{Name: "receipts_x"}, "needs a name and a key"},
		} {
			_, err := sync.NewCatalog(list(c.x))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("an index with an unknown column %s: %v, want an error saying it %s", c.name, err, c.want)
			}
		}
		if _, err := sync.NewCatalog(list(byDate)); err != nil {
			t.Errorf("an index of the table's own and shared columns is refused: %v", err)
		}
	})
}
