package podmove

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// copyScope copies scope's rows of tables (name → the column naming the
// scope) from src to dst. It reads them in one snapshot of src, and
// writes them in one transaction of dst, which first deletes what dst
// held of the scope: a copy left by an attempt that was undone. Rows are
// copied as stored, so a replay from dst gives the bytes src gave.
func copyScope(ctx context.Context, src, dst *pgxpool.Pool, scope string, tables map[string]string) (rows int64, err error) {
	read, err := src.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, fmt.Errorf("reading the source: %w", err)
	}
	defer read.Rollback(ctx)
	write, err := dst.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("writing the target: %w", err)
	}
	defer write.Rollback(ctx)
	for _, table := range slices.Sorted(maps.Keys(tables)) {
		n, err := copyTable(ctx, read, write, table, tables[table], scope)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", table, err)
		}
		rows += n
	}
	if err := write.Commit(ctx); err != nil {
		return 0, fmt.Errorf("committing the copy: %w", err)
	}
	return rows, nil
}

// copyTable copies one table's rows of scope.
func copyTable(ctx context.Context, read, write pgx.Tx, table, column, scope string) (int64, error) {
	name, col := pgx.Identifier{table}.Sanitize(), pgx.Identifier{column}.Sanitize()
	rows, err := read.Query(ctx, `SELECT * FROM `+name+` WHERE `+col+` = $1`, scope)
	if err != nil {
		return 0, err
	}
	var columns []string
	for _, f := range rows.FieldDescriptions() {
		columns = append(columns, f.Name)
	}
	values, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
	if err != nil {
		return 0, err
	}
	if _, err := write.Exec(ctx, `DELETE FROM `+name+` WHERE `+col+` = $1`, scope); err != nil {
		return 0, err
	}
	return write.CopyFrom(ctx, pgx.Identifier{table}, columns, pgx.CopyFromRows(values))
}

// digest is scope's rows of tables as a database holds them: each
// table's count and the MD5 of its rows' text, in order. Two databases
// holding the same rows give the same digest.
func digest(ctx context.Context, db *pgxpool.Pool, scope string, tables map[string]string) (string, error) {
	var out string
	for _, table := range slices.Sorted(maps.Keys(tables)) {
		var n int64
		var sum string
		err := db.QueryRow(ctx, `SELECT count(*), coalesce(md5(string_agg(t::text, E'\n' ORDER BY t::text)), '') FROM `+
			pgx.Identifier{table}.Sanitize()+` t WHERE `+pgx.Identifier{tables[table]}.Sanitize()+` = $1`, scope).Scan(&n, &sum)
		if err != nil {
			return "", fmt.Errorf("%s: %w", table, err)
		}
		out += fmt.Sprintf("%s:%d:%s ", table, n, sum)
	}
	return out, nil
}

// deleteScope deletes scope's rows of tables from db, in one transaction.
func deleteScope(ctx context.Context, db *pgxpool.Pool, scope string, tables map[string]string) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		for _, table := range slices.Sorted(maps.Keys(tables)) {
			if _, err := tx.Exec(ctx, `DELETE FROM `+pgx.Identifier{table}.Sanitize()+` WHERE `+pgx.Identifier{tables[table]}.Sanitize()+` = $1`, scope); err != nil {
				return fmt.Errorf("%s: %w", table, err)
			}
		}
		return nil
	})
}
