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
// and window runs take one of their own each, so that a long sweep holds
// up neither.
func lockKey(source, stream string, kind model.RunKind) int32 {
	h := fnv.New32a()
	h.Write([]byte(source + "\x00" + stream))
	if kind == model.KindFollow || kind == model.KindWindow {
		h.Write([]byte("\x00" + string(kind)))
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

// LockHolder is the session that holds a stream's lock, as Postgres
// shows it to the session that asked.
type LockHolder struct {
	PID         int32
	Role        string // the role it logged in as
	Application string // its application_name, which any login may set
	// Connected is when its session began, or zero when the asking login
	// may not see it (it sees that of its own role's sessions only,
	// unless a superuser or a member of pg_read_all_stats).
	Connected time.Time
	// Erpsync: its role is one of erpsync's, judged by role alone: a
	// member of erpsync_runtime that is no superuser, the owner of schema
	// erp (or a member of it), or the asking session's own role.
	Erpsync bool
}

// LockHeldError is a stream's lock found taken, naming its holder when
// Postgres still showed one.
type LockHeldError struct {
	Holder *LockHolder // nil: it let go before it could be named, or it could not be read
	err    error       // why it could not be read
}

func (e *LockHeldError) Error() string {
	h := e.Holder
	switch {
	case e.err != nil:
		return "its holder could not be named: " + e.err.Error()
	case h == nil:
		return "its holder let go before it could be named"
	}
	what := "not an erpsync process (its role is neither erpsync's runtime role nor the schema's owner)"
	if h.Erpsync {
		what = "an erpsync process (by its role)"
	}
	since := ""
	if !h.Connected.IsZero() {
		since = ", connected since " + h.Connected.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("held by pid %d (role %s, application %q%s), %s", h.PID, h.Role, h.Application, since, what)
}

// LockHeld names the session that holds the lock of a kind of run of
// (source, stream), for a run that found it taken: its pid, role and
// application from pg_locks and pg_stat_activity, and whether its role
// is erpsync's.
func LockHeld(ctx context.Context, q Querier, source, stream string, kind model.RunKind) *LockHeldError {
	var h LockHolder
	var connected *time.Time
	// A two-key advisory lock shows its keys in classid and objid, as
	// unsigned 32-bit numbers, with objsubid 2.
	err := q.QueryRow(ctx, `
SELECT a.pid, coalesce(a.usename::text, ''), coalesce(a.application_name, ''), a.backend_start,
       coalesce(r.rolname = session_user OR (NOT r.rolsuper AND EXISTS (
           SELECT 1 FROM pg_roles g
           WHERE (g.rolname = 'erpsync_runtime' OR g.oid = (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'erp'))
             AND pg_has_role(r.oid, g.oid, 'MEMBER'))), false)
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid LEFT JOIN pg_roles r ON r.oid = a.usesysid
WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 2
LIMIT 1`, int64(lockClass), int64(uint32(lockKey(source, stream, kind)))).Scan(&h.PID, &h.Role, &h.Application, &connected, &h.Erpsync)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return &LockHeldError{}
	case err != nil:
		return &LockHeldError{err: fmt.Errorf("reading the holder of %s/%s's lock: %w", source, stream, Describe(err))}
	}
	h.Connected = deref(connected)
	return &LockHeldError{Holder: &h}
}

// runsOf is the kinds of run a kind's lock covers: a sweep's lock is held
// by sweeps and resets.
func runsOf(kind model.RunKind) []string {
	if kind == model.KindFollow || kind == model.KindWindow {
		return []string{string(kind)}
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

// runGone reports whether the run id of (source, stream), recorded as
// running, has lost its process: nothing holds the lock of its kind,
// which its process took before it recorded the run and holds until it
// records its end, and its row still says running (it did not end between
// the two looks).
func runGone(ctx context.Context, q Querier, source, stream string, kind model.RunKind, id int64) (bool, error) {
	held := LockHeld(ctx, q, source, stream, kind)
	if held.err != nil {
		return false, held.err
	}
	if held.Holder != nil {
		return false, nil
	}
	var running bool
	err := q.QueryRow(ctx, `SELECT status = $2 FROM erp.sync_runs WHERE id = $1`, id, model.StatusRunning).Scan(&running)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading run %d: %w", id, Describe(err))
	}
	return running, nil
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
