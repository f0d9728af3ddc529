package streams

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/erpsync/erpsync/internal/sync"
	"github.com/erpsync/erpsync/internal/testdb"
	"github.com/erpsync/erpsync/migrations"
)

// TestMigrations documents that a stream's table is what its declaration
// says: the migrations make every entity table of the catalog with the
// shared columns and the stream's typed columns, of their types, and its
// history when it keeps one. With -update, the migration of a stream of
// the catalog whose table the schema does not have yet is written from its
// declaration (sync.Migration), as the next migration.
func TestMigrations(t *testing.T) {
	catalog := MustDefault()
	pool, _ := testdb.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	columns := func(table string) (map[string]string, error) {
		rows, err := pool.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
			WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, table)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var name, typ string
			if err := rows.Scan(&name, &typ); err != nil {
				return nil, err
			}
			out[name] = typ
		}
		return out, rows.Err()
	}
	// sqlType is how Postgres names a declared type.
	sqlType := func(declared string) string {
		typ, _, _ := strings.Cut(declared, " ")
		return map[string]string{"timestamptz": "timestamp with time zone"}[typ] + map[bool]string{true: typ}[typ != "timestamptz"]
	}

	t.Run("MakeEveryEntityTableAsItsStreamDeclaresIt", func(t *testing.T) {
		var missing []sync.Stream
		for _, name := range catalog.Names() {
			s, _ := catalog.Lookup(name)
			info := s.Declared()
			if info.Table == nil || info.Table.Own {
				continue
			}
			got, err := columns(info.TableName())
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				missing = append(missing, s)
				continue
			}
			want := map[string]string{}
			for _, c := range append(slices.Clone(sync.SharedColumns.Before), sync.SharedColumns.After...) {
				want[c[0]] = sqlType(c[1])
			}
			for _, c := range info.Table.Columns {
				want[c.Name] = sqlType(c.Type.SQLType())
			}
			if !maps.Equal(got, want) {
				t.Errorf("%s: the table's columns are %v, its stream declares %v", info.TableName(), got, want)
			}
			hist, err := columns(info.TableName() + "_history")
			if err != nil {
				t.Fatal(err)
			}
			if (len(hist) > 0) != (info.History == sync.HistoryOn) {
				t.Errorf("%s: history table present %t, its stream declares history %v", info.TableName(), len(hist) > 0, info.History == sync.HistoryOn)
			}
		}
		if len(missing) == 0 {
			return
		}
		if !*update {
			for _, s := range missing {
				t.Errorf("stream %s: the schema has no table %s; run go test ./internal/sync/streams -run TestMigrations -update to write its migration",
					s.Declared().Name, s.Declared().TableName())
			}
			return
		}
		for _, s := range missing {
			path, err := writeMigration(s)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote %s", path)
		}
	})

	// An entity table's indexes besides its primary key are those its stream declares, as it
	// declares them: the declaration is what a new stream's migration is written from, what
	// the schema is held to, and what readers read to know what a question costs.
	t.Run("IndexEveryEntityTableAsItsStreamDeclares", func(t *testing.T) {
		for _, name := range catalog.Names() {
			s, _ := catalog.Lookup(name)
			info := s.Declared()
			if info.Table == nil || info.Table.Own {
				continue
			}
			rows, err := pool.Query(ctx, `SELECT c.relname::text, pg_get_indexdef(i.indexrelid), i.indisvalid FROM pg_index i
				JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = to_regclass($1) AND NOT i.indisprimary`, info.TableName())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for rows.Next() {
				var index, def string
				var valid bool
				if err := rows.Scan(&index, &def, &valid); err != nil {
					t.Fatal(err)
				}
				if !valid {
					t.Errorf("%s: index %s is not valid", info.TableName(), index)
				}
				got[index] = normalIndexDef(def)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for _, x := range info.Table.Indexes {
				want[x.Name] = normalIndexDef(x.SQL(info.TableName()))
			}
			if !maps.Equal(got, want) {
				t.Errorf("%s: the table's indexes are\n%v\nits stream declares\n%v", info.TableName(), got, want)
			}
		}
	})
}

// normalIndexDef is an index's definition as the stream declares it and as Postgres prints it
// (pg_get_indexdef): without the access method (btree, the default) and the parentheses
// around a predicate.
func normalIndexDef(def string) string {
	def = strings.Replace(def, " USING btree ", " ", 1)
	if head, pred, ok := strings.Cut(def, " WHERE "); ok {
		def = head + " WHERE " + strings.TrimSuffix(strings.TrimPrefix(pred, "("), ")")
	}
	return def
}

// writeMigration writes the migration of s as the next one in
// migrations/, and returns its path.
func writeMigration(s sync.Stream) (string, error) {
	sql, err := sync.Migration(s)
	if err != nil {
		return "", err
	}
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return "", err
	}
	last := 0
	for _, f := range files {
		n, err := strconv.Atoi(strings.SplitN(f, "_", 2)[0])
		if err == nil && n > last {
			last = n
		}
	}
	path := filepath.Join("..", "..", "..", "migrations", fmt.Sprintf("%05d_%s.sql", last+1, s.Declared().Name))
	return path, os.WriteFile(path, []byte(sql), 0o644)
}
