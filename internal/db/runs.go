package db

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/erpsync/erpsync/internal/model"
)

// lockClass is the first key of erpsync's two-key advisory locks ("ERPS"),
// so they never collide with goose's one-key migration lock.
const lockClass = 0x45525053

// lockKey is the second key of a stream's lock of a kind of run: complete
// sweeps (and resets) take the stream's own, as every release did; follow
// runs take one of their own, so that a long sweep does not hold them up.
func lockKey(source, stream string, kind model.RunKind) int32 {
	h := fnv.New32a()
	h.Write([]byte(source + "\x00" + stream))
	if kind == model.KindFollow {
		h.Write([]byte("\x00follow"))
	}
	return int32(h.Sum32())
}

// LockStream takes the session advisory lock of a (source, stream) for a
// kind of run on conn and returns its release, or nil when another
// session holds it. The caller keeps conn out of the pool until it
// releases. A release that fails closes the session, the other way to
// drop the lock (a pool discards a closed connection).
func LockStream(ctx context.Context, conn *pgx.Conn, source, stream string, kind model.RunKind) (release func(), err error) {
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, lockClass, lockKey(source, stream, kind)).Scan(&ok); err != nil {
		return nil, fmt.Errorf("advisory lock %s/%s: %w", source, stream, Describe(err))
	}
	if !ok {
		return nil, nil
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		var held bool
		if err := conn.QueryRow(uctx, `SELECT pg_advisory_unlock($1, $2)`, lockClass, lockKey(source, stream, kind)).Scan(&held); err != nil || !held {
			conn.Close(uctx)
		}
	}, nil
}

// runsOf is the kinds of run a kind's lock covers: a sweep's lock is held
// by sweeps and resets.
func runsOf(kind model.RunKind) []string {
	if kind == model.KindFollow {
		return []string{string(model.KindFollow)}
	}
	return []string{string(model.KindSweep), string(model.KindReset)}
}

// CloseAbandonedRuns marks runs of the kinds a lock covers left 'running'
// by a process that died as failed. Only the holder of that lock may call
// it.
func CloseAbandonedRuns(ctx context.Context, q Querier, source, stream string, kind model.RunKind) (int64, error) {
	tag, err := q.Exec(ctx, `
UPDATE erp.sync_runs SET status = $3, finished_at = now(),
    error = 'abandoned: the process running it stopped without finishing (crash, kill or lost database connection)'
WHERE source = $1 AND stream = $2 AND status = $4 AND kind = ANY($5)`, source, stream, model.StatusFailed, model.StatusRunning, runsOf(kind))
	if err != nil {
		return 0, fmt.Errorf("closing abandoned runs: %w", Describe(err))
	}
	return tag.RowsAffected(), nil
}

// StartRun records a run of k by this process as running and returns its
// id. It refuses a schema this binary may not write (checkWritable), and
// lets k's login first claim a checkpoint written before logins
// (claimLegacyCheckpoint).
func StartRun(ctx context.Context, q Querier, k model.Key, kind model.RunKind) (int64, error) {
	if err := checkWritable(ctx, q); err != nil {
		return 0, err
	}
	if err := claimLegacyCheckpoint(ctx, q, k); err != nil {
		return 0, err
	}
	host, _ := os.Hostname()
	pid := os.Getpid()
	var id int64
	err := q.QueryRow(ctx, `
INSERT INTO erp.sync_runs (source, stream, login, status, host, pid, kind) VALUES ($1, $2, nullif($6, ''), $3, $4, $5, $7) RETURNING id`,
		k.Source, k.Stream, model.StatusRunning, host, pid, k.Login, kind).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("recording run start: %w", Describe(err))
	}
	return id, nil
}

// FinishRun records the outcome of a run.
func FinishRun(ctx context.Context, q Querier, id int64, status model.RunStatus, sweepID int64, s model.RunStats, errText, note string) error {
	var sweepArg *int64
	if sweepID != 0 {
		sweepArg = &sweepID
	}
	_, err := q.Exec(ctx, `
UPDATE erp.sync_runs SET status = $2, finished_at = now(), sweep_id = coalesce($3, sweep_id), pages = $4, rows_seen = $5,
    rows_inserted = $6, rows_updated = $7, rows_unchanged = $8, rows_rejected = $9, rows_deleted = $10,
    error = nullif($11, ''), note = nullif($12, '')
WHERE id = $1`, id, status, sweepArg, s.Pages, s.Seen, s.Inserted, s.Updated, s.Unchanged, s.Rejected, s.Deleted, errText, note)
	if err != nil {
		return fmt.Errorf("recording run %d outcome: %w", id, Describe(err))
	}
	return nil
}

// Holder is the run that holds a stream's lock, as its row tells.
type Holder struct {
	Since time.Time
	Host  string
	PID   int32
}

// RunningRun returns the run of (source, stream) of the kinds a lock
// covers recorded as running, if any: whoever holds that lock wrote it.
func RunningRun(ctx context.Context, q Querier, source, stream string, kind model.RunKind) (Holder, bool, error) {
	var h Holder
	var host *string
	var pid *int32
	err := q.QueryRow(ctx, `SELECT started_at, host, pid FROM erp.sync_runs
WHERE source = $1 AND stream = $2 AND status = $3 AND kind = ANY($4) ORDER BY id DESC LIMIT 1`,
		source, stream, model.StatusRunning, runsOf(kind)).Scan(&h.Since, &host, &pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, false, nil
	}
	if err != nil {
		return h, false, fmt.Errorf("reading the running run of %s/%s: %w", source, stream, Describe(err))
	}
	h.Host, h.PID = deref(host), deref(pid)
	return h, true, nil
}

// Prune removes bookkeeping older than retention: runs that finished
// before it, except the last keep runs of each (source, stream) and kind
// (follow runs are many, and must not push out the last sweeps), and
// rejected records not rejected again since. It returns the rows removed
// from each table.
func Prune(ctx context.Context, q Querier, retention time.Duration, keep int) (runs, rejected int64, err error) {
	// For each stream with old runs, the id of its keep-th newest run:
	// older runs than that, and older than the retention, go.
	tag, err := q.Exec(ctx, `
WITH old AS (
    SELECT DISTINCT source, stream, kind FROM erp.sync_runs WHERE finished_at < now() - $1::interval
), keep_from AS (
    SELECT o.source, o.stream, o.kind, (SELECT id FROM erp.sync_runs k WHERE k.source = o.source AND k.stream = o.stream
                                        AND k.kind = o.kind ORDER BY started_at DESC LIMIT 1 OFFSET $2 - 1) AS id
    FROM old o
)
DELETE FROM erp.sync_runs r USING keep_from kf
WHERE r.source = kf.source AND r.stream = kf.stream AND r.kind = kf.kind AND r.id < kf.id
  AND r.finished_at < now() - $1::interval AND r.status <> $3`,
		retention, keep, model.StatusRunning)
	if err != nil {
		return 0, 0, fmt.Errorf("pruning sync_runs: %w", Describe(err))
	}
	runs = tag.RowsAffected()
	tag, err = q.Exec(ctx, `DELETE FROM erp.rejected_records WHERE last_seen < now() - $1::interval`, retention)
	if err != nil {
		return runs, 0, fmt.Errorf("pruning rejected_records: %w", Describe(err))
	}
	return runs, tag.RowsAffected(), nil
}
