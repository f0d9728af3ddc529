#!/usr/bin/env bash
# Dashboards on a Postgres hot standby: a worked example of docs/scaling.md.
#
# Builds erpsync, starts a private primary and a streaming hot standby of it, syncs the ERP
# simulator into the primary, and then, on the standby, runs what readers run: every panel of
# deploy/grafana/warehouse.json as a login scoped to one company and as a plain analyst, the
# as-of function and the views, and `erpsync status`. It shows that `erpsync verify` stays on
# the primary. Every expectation is checked; the script exits 1 if one fails.
#
#   scripts/standby-demo.sh            # from anywhere in the repository
#
# Needs Go, python3 and the Postgres server binaries (PGBIN, default /usr/lib/postgresql/15/bin).
# Everything lives in a temporary directory and on loopback ports of its own (settings below);
# on exit, however it ends, the simulators and both clusters are stopped and the directory is
# removed. The shared Postgres on 5432, if there is one, is never touched.
#
# initdb and postgres refuse to run as root. Run as root, the script runs them (and
# pg_basebackup, pg_ctl) as an unprivileged user, STANDBY_DEMO_OS_USER (default nobody), which
# owns the temporary directory (under TMPDIR, default /tmp: that user must be able to reach it);
# everything else, psql and erpsync included, runs as the caller and reaches the clusters over TCP.
#
# Settings (environment):
#   ERPSYNC_SOURCE             the source's name, as for erpsync (default: default)
#   STANDBY_DEMO_INVOICES      invoices in the simulated ERP (default 3000)
#   STANDBY_DEMO_PRIMARY_PORT  the primary's port (default 55432)
#   STANDBY_DEMO_STANDBY_PORT  the standby's port (default 55433)
#   STANDBY_DEMO_ERP_PORT      the simulator's port; a second simulator takes the next one (default 58090)
#   STANDBY_DEMO_OS_USER       the user that runs Postgres when the script runs as root (default nobody)
#   PGBIN                      where initdb, pg_ctl, pg_basebackup, postgres and psql are
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
SOURCE=${ERPSYNC_SOURCE:-default}
SOURCE2="${SOURCE}-second"          # a second installation, so that scoping has something to hide
COMPANY=1                           # the simulator's company
INVOICES=${STANDBY_DEMO_INVOICES:-3000}
INVOICES2=1200
PRIMARY_PORT=${STANDBY_DEMO_PRIMARY_PORT:-55432}
STANDBY_PORT=${STANDBY_DEMO_STANDBY_PORT:-55433}
ERP_PORT=${STANDBY_DEMO_ERP_PORT:-58090}
ERP_PORT2=$((ERP_PORT + 1))
RANGE_FROM='2026-01-01T00:00:00Z'   # the dashboard's time range: the simulator's invoices are dated in 2026
RANGE_TO='2027-01-01T00:00:00Z'
SCOPED=accountant_a                 # a login limited to (SOURCE, company 1) with erp.grant_company
ANALYST=alice                       # a login IN ROLE erpsync_analyst: every row
RUNTIME=erpsync_app                 # the daemon's login (erpsync_runtime, BYPASSRLS), as in docs/deployment.md
REPL_PASSWORD=standby-demo-replication

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dashboard="$repo/deploy/grafana/warehouse.json"

if [[ ! $SOURCE =~ ^[A-Za-z0-9_.-]{1,57}$ ]]; then
    echo "ERPSYNC_SOURCE=$SOURCE: a source name is 1 to 64 letters, digits, _, . or - (at most 57 here)" >&2
    exit 2
fi
for tool in initdb pg_ctl pg_basebackup postgres psql; do
    if [[ ! -x $PGBIN/$tool ]]; then
        echo "$PGBIN/$tool not found: set PGBIN to the Postgres server binaries" >&2
        exit 2
    fi
done
for tool in go python3; do
    command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 2; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/standby-demo.XXXXXX")
bg_pids=()

# as_pg runs a Postgres server program: as the caller, or as an unprivileged user when the
# caller is root (initdb and postgres refuse root). Its working directory is the temporary one,
# which that user can read.
if [[ $EUID -eq 0 ]]; then
    pg_os_user=${STANDBY_DEMO_OS_USER:-nobody}
    chown "$pg_os_user" "$tmp"
    as_pg() { (cd "$tmp" && runuser -u "$pg_os_user" -- "$@"); }
else
    pg_os_user=$(id -un)
    as_pg() { (cd "$tmp" && "$@"); }
fi

cleanup() {
    local rc=$?
    set +e
    echo
    echo "== Cleaning up: simulators, standby, primary, $tmp"
    for pid in "${bg_pids[@]}"; do
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    for cluster in standby primary; do
        if [[ -f $tmp/$cluster/postmaster.pid ]]; then
            as_pg "$PGBIN/pg_ctl" -D "$tmp/$cluster" -m fast -w stop >/dev/null
        fi
    done
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n== %s\n' "$*"; }
note() { printf '   %s\n' "$@"; }

checks=0
failed=0
# expect DESCRIPTION GOT WANT: one expectation, counted; a failure is reported and the script
# goes on, so that one run shows every failure. The exit status says whether all held.
expect() {
    checks=$((checks + 1))
    if [[ $2 == "$3" ]]; then
        printf '   ok    %s: %s\n' "$1" "$2"
    else
        printf '   FAIL  %s: got %s, want %s\n' "$1" "$2" "$3"
        failed=$((failed + 1))
    fi
}

# q PORT USER SQL: one value (or rows of |-separated values), unaligned.
q() {
    local port=$1 user=$2
    shift 2
    "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -At -F '|' -h 127.0.0.1 -p "$port" -U "$user" -d warehouse -c "$*"
}
# table PORT USER SQL: rows as psql prints them, indented.
table() {
    local port=$1 user=$2
    shift 2
    "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -P pager=off -P footer=off -h 127.0.0.1 -p "$port" -U "$user" -d warehouse -c "$*" | sed -e '/^$/d' -e 's/^/   /'
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
    local i
    for ((i = 0; i < 100; i++)); do
        port_free "$1" || return 0
        sleep 0.1
    done
    echo "nothing answers on 127.0.0.1:$1" >&2
    return 1
}

for port in "$PRIMARY_PORT" "$STANDBY_PORT" "$ERP_PORT" "$ERP_PORT2"; do
    if ! port_free "$port"; then
        echo "port $port is in use: choose others (STANDBY_DEMO_*_PORT, see the head of this script)" >&2
        exit 2
    fi
done

echo "standby-demo: primary on 127.0.0.1:$PRIMARY_PORT, hot standby on 127.0.0.1:$STANDBY_PORT, in $tmp"
echo "              Postgres runs as $pg_os_user; source $SOURCE (company $COMPANY) with $INVOICES invoices, and $SOURCE2 with $INVOICES2"

# ---------------------------------------------------------------------------------------------
step "1. Build erpsync"
(cd "$repo" && go build -o "$tmp/erpsync" ./cmd/erpsync)
erpsync="$tmp/erpsync"
note "$("$erpsync" version)"

# ---------------------------------------------------------------------------------------------
step "2. Primary: initdb, wal_level = replica, a replication role, pg_hba for replication over loopback"
as_pg "$PGBIN/initdb" -D "$tmp/primary" -U postgres --auth=trust -E UTF8 --locale=C >"$tmp/initdb.log"
cat >>"$tmp/primary/postgresql.conf" <<EOF

# standby-demo: the primary
listen_addresses = '127.0.0.1'
port = $PRIMARY_PORT
unix_socket_directories = '$tmp'
wal_level = replica            # enough WAL for a physical standby (the default, said out loud)
max_wal_senders = 4            # one per standby, plus pg_basebackup's WAL stream
max_replication_slots = 4      # the standby's slot keeps the WAL it has not received yet
EOF
# Ordinary sessions: trust, on loopback only; this is a private cluster that lives as long as the
# script. Replication: only the role made for it, with a password.
cat >"$tmp/primary/pg_hba.conf" <<EOF
# TYPE  DATABASE     USER        ADDRESS        METHOD
local   all          all                        trust
host    all          all         127.0.0.1/32   trust
host    replication  replicator  127.0.0.1/32   scram-sha-256
EOF
as_pg "$PGBIN/pg_ctl" -D "$tmp/primary" -l "$tmp/primary.log" -w start >/dev/null
"$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -d postgres <<EOF
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD '$REPL_PASSWORD';
CREATE DATABASE warehouse;
EOF
note "primary up: $(q "$PRIMARY_PORT" postgres "SELECT 'wal_level=' || current_setting('wal_level') || ', in recovery: ' || pg_is_in_recovery()")"

# ---------------------------------------------------------------------------------------------
step "3. Hot standby: pg_basebackup -R from the primary, with a replication slot"
# -R writes standby.signal and primary_conninfo (with the password given here) into the copy;
# -C -S creates the slot on the primary; -X stream copies the WAL of the backup's own duration.
as_pg env PGPASSWORD="$REPL_PASSWORD" "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$PRIMARY_PORT" -U replicator \
    -D "$tmp/standby" -R -X stream -C -S standby_demo -c fast
cat >>"$tmp/standby/postgresql.conf" <<EOF

# standby-demo: the hot standby (later lines win over the primary's copied above)
port = $STANDBY_PORT
hot_standby = on               # read-only queries while it replays the primary's WAL

# What a long analyst query needs. On a standby, replaying the primary's WAL can conflict with
# a query that is running: VACUUM on the primary removes row versions the query's snapshot still
# sees, and when that cleanup record arrives, the startup process either waits or cancels the
# query ("canceling statement due to conflict with recovery").
#
# hot_standby_feedback: the standby tells the primary the oldest transaction its queries still
# need (the slot's xmin), so VACUUM on the primary keeps those row versions and most conflicts
# never arise. The cost is on the primary: dead rows stay until the longest standby query ends
# (bloat, as if that query ran on the primary itself).
hot_standby_feedback = on

# The conflicts feedback cannot prevent (an ACCESS EXCLUSIVE lock from the primary, e.g. a
# migration or a VACUUM truncating a table's end; a snapshot taken before feedback reached the
# primary): how long replay waits for the query before cancelling it. Generous, so that a panel
# over a year of invoices finishes; meanwhile replay is held back and the standby's data age
# grows by as much. The same for WAL read from an archive.
max_standby_streaming_delay = 15min
max_standby_archive_delay = 15min

# How often the standby reports its position and its oldest xmin to the primary (default 10s):
# every second here, so that step 7 need not wait.
wal_receiver_status_interval = 1s
EOF
as_pg "$PGBIN/pg_ctl" -D "$tmp/standby" -l "$tmp/standby.log" -w start >/dev/null
expect "the standby is in recovery (a hot standby)" "$(q "$STANDBY_PORT" postgres "SELECT pg_is_in_recovery()")" t
expect "the primary streams to it" \
    "$(q "$PRIMARY_PORT" postgres "SELECT application_name || ' ' || state FROM pg_stat_replication")" "walreceiver streaming"
note "standby settings: $(q "$STANDBY_PORT" postgres "SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', ' ORDER BY name) FROM pg_settings WHERE name IN ('hot_standby', 'hot_standby_feedback', 'max_standby_streaming_delay', 'max_standby_archive_delay')")"

# ---------------------------------------------------------------------------------------------
step "4. The simulated ERP, migrated and synced into the primary (the four core streams)"
"$erpsync" simulate --addr "127.0.0.1:$ERP_PORT" --invoices "$INVOICES" >"$tmp/simulator.log" 2>&1 &
bg_pids+=($!)
"$erpsync" simulate --addr "127.0.0.1:$ERP_PORT2" --invoices "$INVOICES2" >"$tmp/simulator2.log" 2>&1 &
bg_pids+=($!)
wait_port "$ERP_PORT"
wait_port "$ERP_PORT2"
note "simulators: http://127.0.0.1:$ERP_PORT ($SOURCE), http://127.0.0.1:$ERP_PORT2 ($SOURCE2)"

export ERPSYNC_ERP_USERNAME=erpsync ERPSYNC_ERP_PASSWORD=erpsync-demo-password
primary_url() { echo "postgres://$1@127.0.0.1:$PRIMARY_PORT/warehouse?sslmode=disable"; }
standby_url() { echo "postgres://$1@127.0.0.1:$STANDBY_PORT/warehouse?sslmode=disable"; }
erp_main() { env ERPSYNC_SOURCE="$SOURCE" ERPSYNC_ERP_BASE_URL="http://127.0.0.1:$ERP_PORT" "$@"; }
erp_second() { env ERPSYNC_SOURCE="$SOURCE2" ERPSYNC_ERP_BASE_URL="http://127.0.0.1:$ERP_PORT2" "$@"; }

# Migrations as the schema's owner (here the superuser), the sync as the daemon's login.
erp_main ERPSYNC_DATABASE_URL="$(primary_url postgres)" "$erpsync" migrate 2>&1 | tail -n 1 | sed 's/^/   migrate: /'
q "$PRIMARY_PORT" postgres "CREATE ROLE $RUNTIME LOGIN BYPASSRLS IN ROLE erpsync_runtime"
erp_main ERPSYNC_DATABASE_URL="$(primary_url "$RUNTIME")" "$erpsync" sync 2>&1 | sed 's/^/   /'
erp_second ERPSYNC_DATABASE_URL="$(primary_url "$RUNTIME")" "$erpsync" sync 2>&1 | sed 's/^/   /'
table "$PRIMARY_PORT" postgres "SELECT source, company_id, count(*) AS invoices, sum(total_bc) AS sum_total_bc FROM erp.invoices WHERE deleted_at IS NULL GROUP BY 1, 2 ORDER BY 1, 2"
expect "invoices of $SOURCE in the primary" \
    "$(q "$PRIMARY_PORT" postgres "SELECT count(*) FROM erp.invoices WHERE source = '$SOURCE' AND deleted_at IS NULL")" "$INVOICES"

# ---------------------------------------------------------------------------------------------
step "5. Logins, created on the primary: $SCOPED (scoped to $SOURCE company $COMPANY) and $ANALYST (analyst)"
q "$PRIMARY_PORT" postgres "CREATE ROLE $SCOPED LOGIN" >/dev/null
q "$PRIMARY_PORT" postgres "SELECT erp.grant_company('$SCOPED', '$SOURCE', '$COMPANY')" >/dev/null
q "$PRIMARY_PORT" postgres "CREATE ROLE $ANALYST LOGIN IN ROLE erpsync_analyst" >/dev/null
table "$PRIMARY_PORT" postgres "SELECT role::text, source, company_id, branch_id FROM erp.company_grants ORDER BY 1"
note "Roles, grants and policies live in the catalog, which the standby replays like any table."

# ---------------------------------------------------------------------------------------------
step "6. Wait until the standby has replayed the primary's current WAL position"
target=$(q "$PRIMARY_PORT" postgres "SELECT pg_current_wal_lsn()")
replayed=f
for ((i = 0; i < 300; i++)); do
    replayed=$(q "$STANDBY_PORT" postgres "SELECT pg_last_wal_replay_lsn() >= '$target'::pg_lsn")
    [[ $replayed == t ]] && break
    sleep 0.1
done
note "primary at $target; standby replayed $(q "$STANDBY_PORT" postgres "SELECT pg_last_wal_replay_lsn()")"
expect "the standby has replayed the primary's LSN $target" "$replayed" t
table "$PRIMARY_PORT" postgres "SELECT application_name, state, sent_lsn, replay_lsn, replay_lag FROM pg_stat_replication"

# ---------------------------------------------------------------------------------------------
step "7. A long query on the standby, and what it costs the primary (hot_standby_feedback)"
# The scratch table is in a database of its own, so the warehouse stays as erpsync wrote it.
# The horizon a standby reports is its whole cluster's: a query in any database of the standby
# holds back VACUUM in every database of the primary.
"$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -d postgres -c "CREATE DATABASE scratch"
scratch() { "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -At -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -d scratch -c "$*"; }
scratch "CREATE TABLE t AS SELECT i FROM generate_series(1, 1000) AS i"
# vacuum_removed: VACUUM the scratch table until it removes the 1000 row versions the last UPDATE
# left dead (the slot's xmin moves on within a feedback interval), and print how many it removed.
vacuum_removed() {
    local removed='' i
    for ((i = 0; i < 50; i++)); do
        removed=$(scratch "VACUUM (VERBOSE) t" 2>&1 | grep -o 'tuples: [0-9]* removed' | grep -o '[0-9][0-9]*' || true)
        [[ $removed == 1000 ]] && break
        sleep 0.2
    done
    echo "${removed:-none}"
}
scratch "UPDATE t SET i = i + 1"
removed=$(vacuum_removed)
note "no query on the standby: 1000 rows updated on the primary, VACUUM removes $removed dead row versions"
expect "with no standby query, VACUUM on the primary removes the dead rows" "$removed" 1000
# A reader's long panel, stood in for by a transaction that reads, sleeps and reads again.
"$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -At -h 127.0.0.1 -p "$STANDBY_PORT" -U "$ANALYST" -d warehouse \
    >"$tmp/long.out" 2>&1 <<'SQL' &
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT 'first read: ' || count(*) || ' invoices' FROM erp.invoices_current;
SELECT 'sleeping 5 s' FROM pg_sleep(5);
SELECT 'second read: ' || count(*) || ' invoices, sum(total_bc) ' || sum(total_bc) FROM erp.invoices_current;
COMMIT;
SQL
long_pid=$!
bg_pids+=("$long_pid")
# The query's snapshot on the standby, then the primary's slot once feedback has carried it there.
query_xmin=
for ((i = 0; i < 100; i++)); do
    query_xmin=$(q "$STANDBY_PORT" postgres "SELECT backend_xmin FROM pg_stat_activity WHERE usename = '$ANALYST' AND backend_xmin IS NOT NULL")
    [[ -n $query_xmin ]] && break
    sleep 0.1
done
held=f
for ((i = 0; i < 100; i++)); do
    [[ -n $query_xmin ]] || break
    held=$(q "$PRIMARY_PORT" postgres "SELECT coalesce(age(xmin) >= age('$query_xmin'::xid), false) FROM pg_replication_slots WHERE slot_name = 'standby_demo'")
    [[ $held == t ]] && break
    sleep 0.1
done
note "a 5-second REPEATABLE READ transaction on the standby holds xmin ${query_xmin:-?}; the primary's slot:"
table "$PRIMARY_PORT" postgres "SELECT slot_name, active, xmin, restart_lsn FROM pg_replication_slots"
expect "the primary's slot xmin is no newer than the standby query's" "$held" t
scratch "UPDATE t SET i = i + 1"
dead_kept=$(scratch "VACUUM (VERBOSE) t" 2>&1 | grep -o '[0-9]* are dead but not yet removable' | grep -o '^[0-9]*' || true)
note "1000 rows updated on the primary, then VACUUM: ${dead_kept:-?} dead row versions kept for the standby's query (the bloat)"
expect "VACUUM on the primary keeps the dead rows the standby's query may need" "${dead_kept:-none}" 1000
if wait "$long_pid"; then long_rc=0; else long_rc=$?; fi
sed 's/^/   standby query: /' "$tmp/long.out"
expect "the long query on the standby was not cancelled" "$long_rc" 0
removed=$(vacuum_removed)
note "once the query ended and the standby reported it, VACUUM removed $removed dead row versions"
expect "after the query, VACUUM on the primary removes them" "$removed" 1000

# ---------------------------------------------------------------------------------------------
step "8. The finance dashboard on the standby: every panel of deploy/grafana/warehouse.json"
note "range $RANGE_FROM .. $RANGE_TO, \$source = ('$SOURCE'); rows per panel, as each login, standby and primary"
mkdir "$tmp/panels"
# Each target's rawSql with Grafana's variables and macros expanded as Grafana would send them:
# $source as a quoted list, $__timeFilter(col) as col BETWEEN from AND to, $__timeFrom() and
# $__timeTo() as quoted timestamps. Anything else that looks like a macro or variable stops it.
python3 - "$dashboard" "$tmp/panels" "$SOURCE" "$RANGE_FROM" "$RANGE_TO" <<'EOF'
import json, re, sys

path, out, source, frm, to = sys.argv[1:]
with open(path) as f:
    dash = json.load(f)

def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get("panels") or [])

variable = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(\w+)")
macro = re.compile(r"\$(__\w+)\(([^)]*)\)")
leftover = re.compile(r"\$\{?\w+|\[\[\w+")
quoted = lambda s: "'" + s.replace("'", "''") + "'"

def var(m):
    name, fmt = (m.group(1) or m.group(3)), m.group(2)
    if name != "source":
        return m.group(0)                      # a macro, handled below
    if fmt not in (None, "sqlstring"):
        sys.exit(f"${{source:{fmt}}}: format not handled")
    return quoted(source)

def mac(m):
    name, args = m.group(1), m.group(2).strip()
    if name == "__timeFilter":
        return f"{args} BETWEEN {quoted(frm)} AND {quoted(to)}"
    if name == "__timeFrom":
        return quoted(frm)
    if name == "__timeTo":
        return quoted(to)
    sys.exit(f"macro ${name}() not handled by this script")

n = 0
with open(f"{out}/index", "w") as index:
    for p in panels(dash["panels"]):
        for t in p.get("targets") or []:
            sql = t.get("rawSql")
            if not sql:
                continue
            sql = macro.sub(mac, variable.sub(var, sql)).strip().rstrip(";")
            left = leftover.findall(sql)
            if left:
                sys.exit(f"panel {p['title']!r}: left unexpanded: {left}")
            n += 1
            with open(f"{out}/{n:02d}.sql", "w") as f:
                f.write(sql + "\n")
            index.write(f"{n:02d}\t{p['title']}\n")
if n == 0:
    sys.exit("no panel SQL found")
EOF

panel_rows() { q "$1" "$2" "SELECT count(*) FROM ($(cat "$3")) AS panel"; }
printf '   %-38s %10s %10s %10s %10s\n' panel "$SCOPED" "$ANALYST" "(primary)" "(primary)"
panel_failures=0
revenue_sql=
while IFS=$'\t' read -r n title; do
    sql_file="$tmp/panels/$n.sql"
    [[ $title == "Revenue per month and currency" ]] && revenue_sql=$sql_file
    row=()
    for port in "$STANDBY_PORT" "$PRIMARY_PORT"; do
        for login in "$SCOPED" "$ANALYST"; do
            if ! count=$(panel_rows "$port" "$login" "$sql_file" 2>"$tmp/panel.err"); then
                count=ERROR
                sed "s/^/   $title as $login on port $port: /" "$tmp/panel.err"
            fi
            row+=("$count")
        done
    done
    printf '   %-38s %10s %10s %10s %10s\n' "$title" "${row[@]}"
    if [[ ${row[0]} == ERROR || ${row[1]} == ERROR || ${row[0]} != "${row[2]}" || ${row[1]} != "${row[3]}" ]]; then
        panel_failures=$((panel_failures + 1))
    fi
done <"$tmp/panels/index"
note "(no invoice changed or disappeared after the first sync, so the changes panel has no row)"
expect "panels that fail on the standby or differ from the primary" "$panel_failures" 0
if [[ -n $revenue_sql ]]; then
    revenue_sum="SELECT sum(revenue_bc) FROM ($(cat "$revenue_sql")) AS panel"
    standby_revenue=$(q "$STANDBY_PORT" "$ANALYST" "$revenue_sum")
    note "revenue panel, sum of its bars as $ANALYST on the standby: $standby_revenue"
    expect "revenue panel: standby equals primary, to the digit" "$standby_revenue" "$(q "$PRIMARY_PORT" "$ANALYST" "$revenue_sum")"
    expect "revenue panel rows exist" "$(q "$STANDBY_PORT" "$ANALYST" "SELECT count(*) > 0 FROM ($(cat "$revenue_sql")) AS panel")" t
fi

# ---------------------------------------------------------------------------------------------
step "9. History and views on the standby"
as_of="SELECT count(*), sum(total_bc) FROM erp.invoices_as_of(now())"
note "$as_of"
for login in "$SCOPED" "$ANALYST"; do
    note "  as $login: $(q "$STANDBY_PORT" "$login" "$as_of")"
done
expect "as_of(now()) as $ANALYST: standby equals primary (count|sum)" \
    "$(q "$STANDBY_PORT" "$ANALYST" "$as_of")" "$(q "$PRIMARY_PORT" postgres "$as_of")"
expect "as_of(now()) as $SCOPED: standby equals the primary's rows of $SOURCE company $COMPANY" \
    "$(q "$STANDBY_PORT" "$SCOPED" "$as_of")" \
    "$(q "$PRIMARY_PORT" postgres "$as_of WHERE source = '$SOURCE' AND company_id = '$COMPANY'")"
note "erp.invoices_current as $ANALYST:"
table "$STANDBY_PORT" "$ANALYST" "SELECT source, count(*) AS invoices, sum(total_bc) AS sum_total_bc, max(seen_at) AS seen_at FROM erp.invoices_current GROUP BY 1 ORDER BY 1"
note "erp.stream_freshness as $SCOPED:"
table "$STANDBY_PORT" "$SCOPED" "SELECT source, stream, login, last_run_status, round(extract(epoch FROM age)) AS age_s, held_deletions FROM erp.stream_freshness ORDER BY 1, 2"
expect "erp.stream_freshness as $SCOPED: its source's four core streams, succeeded" \
    "$(q "$STANDBY_PORT" "$SCOPED" "SELECT string_agg(DISTINCT source || ':' || last_run_status, ',') || ' x' || count(*) FROM erp.stream_freshness")" "$SOURCE:succeeded x4"

# ---------------------------------------------------------------------------------------------
step "10. Who sees what, on the standby (row-level security, replayed from the primary's catalog)"
who="SELECT source, company_id, count(*) AS invoices, sum(total_bc) AS sum_total_bc FROM erp.invoices GROUP BY 1, 2 ORDER BY 1, 2"
for login in "$SCOPED" "$ANALYST"; do
    note "$login:"
    table "$STANDBY_PORT" "$login" "$who"
done
pairs="SELECT string_agg(DISTINCT source || '/' || company_id, ',') FROM erp.invoices"
expect "$SCOPED sees exactly its company" "$(q "$STANDBY_PORT" "$SCOPED" "$pairs")" "$SOURCE/$COMPANY"
expect "$SCOPED's invoices and sum equal the primary's for $SOURCE company $COMPANY" \
    "$(q "$STANDBY_PORT" "$SCOPED" "SELECT count(*) || ' ' || sum(total_bc) FROM erp.invoices")" \
    "$(q "$PRIMARY_PORT" postgres "SELECT count(*) || ' ' || sum(total_bc) FROM erp.invoices WHERE source = '$SOURCE' AND company_id = '$COMPANY'")"
expect "$SCOPED sees the cashboxes of its company only" \
    "$(q "$STANDBY_PORT" "$SCOPED" "SELECT string_agg(DISTINCT source || '/' || company_id, ',') FROM erp.cashboxes")" "$SOURCE/$COMPANY"
expect "$ANALYST sees both installations" "$(q "$STANDBY_PORT" "$ANALYST" "$pairs")" \
    "$(q "$PRIMARY_PORT" postgres "$pairs")"
expect "$ANALYST's invoice sum on the standby equals the primary's" \
    "$(q "$STANDBY_PORT" "$ANALYST" "SELECT count(*) || ' ' || sum(total_bc) FROM erp.invoices")" \
    "$(q "$PRIMARY_PORT" postgres "SELECT count(*) || ' ' || sum(total_bc) FROM erp.invoices")"

# ---------------------------------------------------------------------------------------------
step "11. erpsync status against the standby (read-only: it only reads)"
if status_out=$(erp_main ERPSYNC_DATABASE_URL="$(standby_url "$RUNTIME")" "$erpsync" status 2>&1); then status_rc=0; else status_rc=$?; fi
printf '%s\n' "$status_out" | sed 's/^/   /'
expect "erpsync status on the standby exits" "$status_rc" 0
expect "erpsync status on the standby lists both sources' four streams" \
    "$(printf '%s\n' "$status_out" | grep -cE "^($SOURCE|$SOURCE2) +(invoices|currencies|cashboxes|cashbox_reconciliations) ")" 8

# ---------------------------------------------------------------------------------------------
step "12. erpsync verify is for the primary"
note "On a standby no transaction may write, not even a temporary table:"
if tmp_out=$(q "$STANDBY_PORT" "$RUNTIME" "CREATE TEMP TABLE probe (id text)" 2>&1); then tmp_rc=0; else tmp_rc=$?; fi
note "CREATE TEMP TABLE on the standby: ${tmp_out:-succeeded}"
expect "a temporary table on the standby is refused" "$tmp_rc" 1
# The sync's UNLOGGED scratch tables (the ids a sweep saw, the page digests) are not replicated;
# no view or panel reads them.
if unlogged_out=$(q "$STANDBY_PORT" postgres "SELECT count(*) FROM erp.sweep_seen" 2>&1); then unlogged_rc=0; else unlogged_rc=$?; fi
note "erp.sweep_seen (UNLOGGED) on the standby: ${unlogged_out}"
expect "the sync's UNLOGGED tables are not readable on the standby" "$unlogged_rc" 1
note "erpsync verify keeps each ERP page and the ids it has seen in temporary tables, so on the standby it fails:"
if verify_out=$(erp_main ERPSYNC_DATABASE_URL="$(standby_url "$RUNTIME")" timeout 300 "$erpsync" verify invoices 2>&1); then verify_rc=0; else verify_rc=$?; fi
printf '%s\n' "$verify_out" | tail -n 3 | sed 's/^/   standby: /'
expect "erpsync verify on the standby fails" "$((verify_rc != 0))" 1
says_why=no
if grep -q 'cannot execute CREATE TABLE in a read-only transaction' <<<"$verify_out"; then says_why=yes; fi
expect "and it says why (it cannot create a table)" "$says_why" yes
note "On the primary it creates its temporary tables, then makes its session read-only (writing only to them):"
if verify_out=$(erp_main ERPSYNC_DATABASE_URL="$(primary_url "$RUNTIME")" timeout 300 "$erpsync" verify 2>&1); then verify_rc=0; else verify_rc=$?; fi
printf '%s\n' "$verify_out" | sed 's/^/   primary: /'
expect "erpsync verify on the primary: the warehouse equals the ERP" "$verify_rc" 0

# ---------------------------------------------------------------------------------------------
step "Summary"
if ((failed > 0)); then
    note "$failed of $checks expectations failed (see FAIL above)"
    exit 1
fi
note "all $checks expectations held: the standby serves the dashboards, as-of, views and erpsync status"
note "with the same rows and the same per-company access as the primary; erpsync verify stays on the primary."
