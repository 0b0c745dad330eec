#!/usr/bin/env bash
# Measures kcap-watch against the baselines of issue "6/6 Performance", each baseline measured
# in the same run (these machines are shared and noisy), and prints a table of medians and
# ratios plus every command it ran. With --baseline, an earlier commit of kcap-watch itself is
# built and measured side by side in the same run (before/after).
#
#   benches/compare.sh [--quick] [--keep] [--size 500MB] [--baseline REV [--keep-baseline]]
#                      [--supervise-only]
#
# --quick:      a 50 MB file, fewer runs and shorter windows (a few minutes).
# --keep:       keep the work directory (rollouts, logs, latency samples) and print its path.
# --baseline:   build REV (e.g. dfbcf0f, the last round-1 commit) in a temporary git worktree
#               under ${TMPDIR:-/tmp} with its own target directory, and measure its binary
#               beside this one; both are deleted afterwards unless --keep-baseline.
# --supervise-only: run only the supervise scenario (50 `watch` vs one `supervise`).
#
# Needs bash, git, GNU coreutils, /usr/bin/time, jq and curl. Builds the binary and the two
# examples it uses (examples/gen_rollout.rs, examples/sink_server.rs) itself; the baseline
# binary is driven with this tree's examples.
set -euo pipefail

QUICK=0
KEEP=0
SIZE_OVERRIDE=""
BASE_REV=""
KEEP_BASE=0
SUPERVISE_ONLY=0
while (($#)); do
    case "$1" in
    --quick) QUICK=1 ;;
    --keep) KEEP=1 ;;
    --supervise-only) SUPERVISE_ONLY=1 ;;
    --size)
        SIZE_OVERRIDE="$2"
        shift
        ;;
    --baseline)
        BASE_REV="$2"
        shift
        ;;
    --keep-baseline) KEEP_BASE=1 ;;
    -h | --help)
        sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "compare.sh: unknown argument $1" >&2
        exit 2
        ;;
    esac
    shift
done

if ((QUICK)); then
    SIZE=50MB RUNS=3 JQ_RUNS=2 CPU_SECS=15 LAT_N=200 LAT_INTERVAL=20ms
    IDLE_N=20 IDLE_SIZE=2MB IDLE_SECS=15
else
    SIZE=500MB RUNS=5 JQ_RUNS=3 CPU_SECS=60 LAT_N=1000 LAT_INTERVAL=20ms
    IDLE_N=20 IDLE_SIZE=20MB IDLE_SECS=60
fi
[[ -n $SIZE_OVERRIDE ]] && SIZE=$SIZE_OVERRIDE

for tool in jq curl /usr/bin/time; do
    command -v "$tool" >/dev/null || {
        echo "compare.sh: $tool is required" >&2
        exit 2
    }
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
echo "== building (cargo build --release --bin kcap-watch --example gen_rollout --example sink_server)" >&2
cargo build --release --quiet --bin kcap-watch --example gen_rollout --example sink_server
TARGET=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
BIN=$TARGET/release/kcap-watch
GEN=$TARGET/release/examples/gen_rollout
SINK=$TARGET/release/examples/sink_server

# The earlier build to compare with: its own worktree and target directory, so nothing of
# this tree's build is touched (a round-1 target directory is a full release build).
BASE_BIN=""
BASE_TREE=""
if [[ -n $BASE_REV ]]; then
    BASE_SHORT=$(git -C "$ROOT" rev-parse --short "$BASE_REV^{commit}")
    BASE_TREE=${TMPDIR:-/tmp}/kcap-baseline-$BASE_SHORT
    BASE_TARGET=$BASE_TREE-target
    if [[ ! -d $BASE_TREE ]]; then
        git -C "$ROOT" worktree add --detach --quiet "$BASE_TREE" "$BASE_SHORT"
    fi
    echo "== building the baseline $BASE_SHORT in $BASE_TREE (cargo build --release --bin kcap-watch --target-dir $BASE_TARGET)" >&2
    (cd "$BASE_TREE" && cargo build --release --quiet --bin kcap-watch --target-dir "$BASE_TARGET")
    BASE_BIN=$BASE_TARGET/release/kcap-watch
fi
remove_baseline() {
    [[ -n $BASE_TREE ]] || return 0
    if ((KEEP_BASE)); then
        echo "baseline kept: $BASE_TREE (target $BASE_TARGET)" >&2
    else
        git -C "$ROOT" worktree remove --force "$BASE_TREE" 2>/dev/null || rm -rf "$BASE_TREE"
        git -C "$ROOT" worktree prune
        rm -rf "$BASE_TARGET"
    fi
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kcap-compare.XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    if ((KEEP)); then
        echo "work directory kept: $WORK" >&2
    else
        rm -rf "$WORK"
    fi
    remove_baseline
}
trap cleanup EXIT

CMDS=()
cmd() { CMDS+=("$*"); }
log() { echo "== $*" >&2; }

# --- helpers -------------------------------------------------------------------------------

now_us() { echo "${EPOCHREALTIME/./}"; }

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "nan"; exit} if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# percentile P (0-100) of the numbers on stdin, nearest-rank.
percentile() { sort -g | awk -v p="$1" '{a[NR]=$1} END {if (NR==0) {print "nan"; exit} r=int((p/100)*NR+0.999999); if (r<1) r=1; if (r>NR) r=NR; print a[r]}'; }

# CPU nanoseconds a process has used (all threads), from the scheduler's own accounting.
cpu_ns() {
    local pid=$1 total=0 t v
    for t in /proc/"$pid"/task/*/schedstat; do
        read -r v _ <"$t" 2>/dev/null || continue
        total=$((total + v))
    done
    echo "$total"
}

rss_kib() { awk '/^VmRSS:/ {print $2}' /proc/"$1"/status 2>/dev/null || echo 0; }
anon_kib() { awk '/^RssAnon:/ {print $2}' /proc/"$1"/status 2>/dev/null || echo 0; }
# Proportional set size: shared pages (the binary's text, libc) divided among their users.
pss_kib() { awk '/^Pss:/ {print $2}' /proc/"$1"/smaps_rollup 2>/dev/null || echo 0; }

wait_for_file() { # path timeout_s
    local deadline=$(($(now_us) + $2 * 1000000))
    while [[ ! -s $1 ]]; do
        if (($(now_us) > deadline)); then
            echo "compare.sh: timed out waiting for $1" >&2
            return 1
        fi
        sleep 0.05
    done
}

wait_for_grep() { # pattern file timeout_s
    local deadline=$(($(now_us) + $3 * 1000000))
    until grep -q "$1" "$2" 2>/dev/null; do
        if (($(now_us) > deadline)); then
            echo "compare.sh: timed out waiting for '$1' in $2" >&2
            tail -n 20 "$2" >&2 || true
            return 1
        fi
        sleep 0.05
    done
}

start_sink() { # name extra-args... ; sets SINK_PID and SINK_URL
    local name=$1
    shift
    rm -f "$WORK/$name.addr"
    "$SINK" --addr-file "$WORK/$name.addr" "$@" >"$WORK/$name.sink.log" 2>&1 &
    SINK_PID=$!
    PIDS+=("$SINK_PID")
    wait_for_file "$WORK/$name.addr" 20
    SINK_URL=$(cat "$WORK/$name.addr")
}

stop_pid() { # pid: SIGTERM, then wait
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# Watcher settings for every benchmark run: nothing may end it early (the generated files
# end with an open turn; reap and stall timers count from the file's mtime).
WATCH_FLAGS=(--reap-after 10h --idle-end 10h --stall-after 0 --poll-interval 1s)

start_watcher() { # name rollout [binary] ; sets WATCHER_PID (uses SINK_URL)
    local name=$1 rollout=$2 bin=${3:-$BIN}
    mkdir -p "$WORK/$name.cfg"
    KCAP_URL=$SINK_URL KCAP_CONFIG_DIR=$WORK/$name.cfg KCAP_LOG=info \
        "$bin" watch "$rollout" "${WATCH_FLAGS[@]}" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    WATCHER_PID=$!
    PIDS+=("$WATCHER_PID")
}

mb_of() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
mib_of_kib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

# --- machine --------------------------------------------------------------------------------

CPU_MODEL=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
MACHINE="$(nproc) cores ($CPU_MODEL), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, Linux $(uname -r), $(jq --version), $(tail --version | head -1)"
REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
log "machine: $MACHINE; commit $REV; work dir $WORK${BASE_BIN:+; baseline $BASE_SHORT}"

# === supervise scenario (issue 14): 50 `watch` processes vs one `supervise` ==================
#
# One session with SUP_N live children (open turns, nothing ends them) under a real
# CODEX_HOME/sessions/YYYY/MM/DD. Side by side, at the same time, on the same files: SUP_N
# separate `watch` processes (one per child, as the kcap CLI spawns them) and one `supervise`
# process, each set with its own config directory (so neither sees the other's key files)
# and its own loopback sink. Both ship every child from line 0; then `gen_rollout append`
# writes SUP_RATE lines/s in total to random children for SUP_ACTIVE s, then nothing for
# SUP_IDLE s. Measured per set: VmRSS and PSS (summed over the 50 watchers), threads,
# inotify instances (`anon_inode:inotify` fds), utime+stime (/proc/PID/stat) over the idle
# phase, voluntary+nonvoluntary context switches (every thread's /proc/PID/task/TID/status)
# over the active phase per appended line, and append -> sink latency per line (the line
# carries its write time and sequence number; the appender logs which child got each
# sequence number, the sink its arrival), as p99 over all lines and the worst child's p99.

if ((QUICK)); then
    SUP_N=50 SUP_RATE=250 SUP_ACTIVE=20 SUP_IDLE=20 SUP_CHILD_SIZE=32KB
else
    SUP_N=50 SUP_RATE=250 SUP_ACTIVE=60 SUP_IDLE=60 SUP_CHILD_SIZE=32KB
fi

CLK_TCK=$(getconf CLK_TCK)
# utime + stime of a process (every thread, ended ones included), in clock ticks.
sup_ticks() { awk '{sub(/^.*\) /, ""); print $12 + $13}' /proc/"$1"/stat 2>/dev/null || echo 0; }
# Context switches of every live thread of a process.
sup_ctxt() {
    cat /proc/"$1"/task/*/status 2>/dev/null |
        awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ {n += $2} END {print n + 0}'
}
sup_inotify() { find /proc/"$1"/fd -lname 'anon_inode:inotify' 2>/dev/null | wc -l; }
sup_threads() { awk '/^Threads:/ {print $2}' /proc/"$1"/status 2>/dev/null || echo 0; }
sup_sum() { # function pid... : the sum of function over the pids
    local f=$1 p t=0
    shift
    for p in "$@"; do t=$((t + $($f "$p"))); done
    echo "$t"
}
sup_alive() {
    local p n=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done
    echo "$n"
}
# Nearest-rank p99 of "child ms" lines per child, then the largest of them.
sup_worst_child_p99() {
    sort -k1,1n -k2,2g | awk '
        function flush() { if (n) { r = int(0.99 * n + 0.999999); if (r < 1) r = 1; if (r > n) r = n; if (v[r] > worst) worst = v[r] } n = 0 }
        $1 != cur { flush(); cur = $1 }
        { v[++n] = $2 }
        END { flush(); printf "%.2f", worst }'
}

bench_supervise() {
    local dir day date_dir session root i f tmp id parent kids=() total=0 appended
    log "supervise: one session, $SUP_N live children; $SUP_N x watch vs 1 x supervise, side by side"
    dir=$WORK/sup
    day=$(date -u +%Y/%m/%d)
    date_dir=$dir/codex/sessions/$day
    mkdir -p "$date_dir" "$dir/cfg.watch" "$dir/cfg.supervise"
    tmp=$dir/gen.tmp
    "$GEN" --size 64KB --seed 900 --role session --end open --out "$tmp"
    root=$(head -n1 "$tmp" | jq -r .payload.id)
    session=$date_dir/rollout-$(date -u +%Y-%m-%dT%H-%M-%S)-$root.jsonl
    mv "$tmp" "$session"
    for ((i = 0; i < SUP_N; i++)); do
        "$GEN" --size "$SUP_CHILD_SIZE" --seed $((1000 + i)) --role child --end open --out "$tmp"
        id=$(head -n1 "$tmp" | jq -r .payload.id)
        parent=$(head -n1 "$tmp" | jq -r .payload.parent_thread_id)
        f=$date_dir/rollout-$(date -u +%Y-%m-%dT%H-%M-%S)-$id.jsonl
        # The generator names a random parent; make it the session's thread.
        sed "s/$parent/$root/g" "$tmp" >"$f"
        kids+=("$f")
        total=$((total + $(wc -l <"$f")))
    done
    rm -f "$tmp"
    cmd "$GEN --size 64KB --seed 900 --role session --end open   # the session, in <CODEX_HOME>/sessions/$day"
    cmd "$GEN --size $SUP_CHILD_SIZE --seed 1000..$((1000 + SUP_N - 1)) --role child --end open   # $SUP_N children of it (parent id set to the session's), same directory"

    start_sink sup-watch --latency-log "$dir/watch.lat" --done-after-lines "$total" --done-file "$dir/watch.done"
    local sink_w=$SINK_PID url_w=$SINK_URL
    start_sink sup-supervise --latency-log "$dir/supervise.lat" --done-after-lines "$total" --done-file "$dir/supervise.done"
    local sink_s=$SINK_PID url_s=$SINK_URL

    cmd "KCAP_URL=<sink 1> KCAP_CONFIG_DIR=<tmp 1> $BIN supervise <session rollout> --codex-home <CODEX_HOME> ${WATCH_FLAGS[*]}"
    KCAP_URL=$url_s KCAP_CONFIG_DIR=$dir/cfg.supervise KCAP_LOG=info \
        "$BIN" supervise "$session" --codex-home "$dir/codex" "${WATCH_FLAGS[@]}" \
        >"$dir/supervise.out" 2>"$dir/supervise.err" &
    local sup_pid=$!
    PIDS+=("$sup_pid")
    cmd "$SUP_N x KCAP_URL=<sink 2> KCAP_CONFIG_DIR=<tmp 2> $BIN watch $root <child rollout> ${WATCH_FLAGS[*]}   # alongside, as the kcap CLI spawns them"
    local wpids=()
    for ((i = 0; i < SUP_N; i++)); do
        KCAP_URL=$url_w KCAP_CONFIG_DIR=$dir/cfg.watch KCAP_LOG=info \
            "$BIN" watch "$root" "${kids[$i]}" "${WATCH_FLAGS[@]}" >"$dir/watch-$i.out" 2>"$dir/watch-$i.err" &
        wpids+=($!)
        PIDS+=($!)
    done
    wait_for_file "$dir/watch.done" 300
    wait_for_file "$dir/supervise.done" 300
    sleep 3

    # Active phase.
    appended=$((SUP_RATE * SUP_ACTIVE))
    local interval_us=$((1000000 / SUP_RATE))
    cmd "$GEN append <the $SUP_N child rollouts> --count $appended --interval ${interval_us}us --first-seq 500000 --targets-log targets.txt"
    local xw0 xs0 xw1 xs1
    xw0=$(sup_sum sup_ctxt "${wpids[@]}")
    xs0=$(sup_ctxt "$sup_pid")
    "$GEN" append "${kids[@]}" --count "$appended" --interval "${interval_us}us" --first-seq 500000 \
        --targets-log "$dir/targets.txt"
    local deadline=$(($(now_us) + 30000000))
    while (($(now_us) < deadline)); do
        (($(wc -l <"$dir/watch.lat") >= appended && $(wc -l <"$dir/supervise.lat") >= appended)) && break
        sleep 0.1
    done
    sleep 1
    xw1=$(sup_sum sup_ctxt "${wpids[@]}")
    xs1=$(sup_ctxt "$sup_pid")

    # Idle phase.
    sleep 2
    local tw0 ts0 tw1 ts1
    tw0=$(sup_sum sup_ticks "${wpids[@]}")
    ts0=$(sup_ticks "$sup_pid")
    sleep "$SUP_IDLE"
    tw1=$(sup_sum sup_ticks "${wpids[@]}")
    ts1=$(sup_ticks "$sup_pid")

    SUP_W_ALIVE=$(sup_alive "${wpids[@]}")
    SUP_S_ALIVE=$(sup_alive "$sup_pid")
    SUP_W_RSS=$(sup_sum rss_kib "${wpids[@]}")
    SUP_S_RSS=$(rss_kib "$sup_pid")
    SUP_W_PSS=$(sup_sum pss_kib "${wpids[@]}")
    SUP_S_PSS=$(pss_kib "$sup_pid")
    SUP_W_THREADS=$(sup_sum sup_threads "${wpids[@]}")
    SUP_S_THREADS=$(sup_threads "$sup_pid")
    SUP_W_INOTIFY=$(sup_sum sup_inotify "${wpids[@]}")
    SUP_S_INOTIFY=$(sup_inotify "$sup_pid")
    SUP_W_CPU=$(awk -v a="$tw0" -v b="$tw1" -v hz="$CLK_TCK" -v s="$SUP_IDLE" 'BEGIN {printf "%.3f", (b-a)/hz * 60/s}')
    SUP_S_CPU=$(awk -v a="$ts0" -v b="$ts1" -v hz="$CLK_TCK" -v s="$SUP_IDLE" 'BEGIN {printf "%.3f", (b-a)/hz * 60/s}')
    SUP_W_CTX=$(awk -v a="$xw0" -v b="$xw1" -v n="$appended" 'BEGIN {printf "%.2f", (b-a)/n}')
    SUP_S_CTX=$(awk -v a="$xs0" -v b="$xs1" -v n="$appended" 'BEGIN {printf "%.2f", (b-a)/n}')
    SUP_W_LINES=$(curl -fsS "$url_w/stats" | jq .lines)
    SUP_S_LINES=$(curl -fsS "$url_s/stats" | jq .lines)
    SUP_TOTAL=$((total + appended))
    SUP_APPENDED=$appended
    local which
    for which in watch supervise; do
        awk '$1 >= 500000 {print $2/1000}' "$dir/$which.lat" >"$dir/$which.lat.ms"
        printf -v "SUP_${which}_GOT" %s "$(wc -l <"$dir/$which.lat.ms")"
        printf -v "SUP_${which}_P50" %s "$(percentile 50 <"$dir/$which.lat.ms")"
        printf -v "SUP_${which}_P99" %s "$(percentile 99 <"$dir/$which.lat.ms")"
        printf -v "SUP_${which}_MAX" %s "$(percentile 100 <"$dir/$which.lat.ms")"
        printf -v "SUP_${which}_WORST" %s "$(awk 'NR == FNR {child[$1] = $2; next} $1 in child {print child[$1], $2/1000}' \
            "$dir/targets.txt" "$dir/$which.lat" | sup_worst_child_p99)"
    done

    for i in "${wpids[@]}"; do stop_pid "$i"; done
    stop_pid "$sup_pid"
    stop_pid "$sink_w"
    stop_pid "$sink_s"
    SUP_ERRORS=$(cat "$dir"/watch-*.err "$dir/supervise.err" | grep -c '"level":"ERROR"\| ERROR ' || true)
    # The generated session tree is only needed with --keep.
    ((KEEP)) || rm -rf "$dir/codex"
}

print_supervise_table() {
    local r=$(awk -v a="$SUP_S_RSS" -v b="$SUP_W_RSS" 'BEGIN {printf "%.3f", a/b}')
    local p=$(awk -v a="$SUP_S_PSS" -v b="$SUP_W_PSS" 'BEGIN {printf "%.3f", a/b}')
    echo
    echo "supervise: one session, $SUP_N live children ($SUP_CHILD_SIZE each, shipped from line 0 first), $SUP_RATE lines/s to random children for $SUP_ACTIVE s ($SUP_APPENDED lines), then $SUP_IDLE s idle; $SUP_N \`watch\` and one \`supervise\` side by side on the same files, each with its own sink and config dir"
    echo
    echo "| what | $SUP_N × \`watch\` (summed) | 1 × \`supervise\` | target (supervise) | holds |"
    echo "|---|---|---|---|---|"
    echo "| processes alive at the end | $SUP_W_ALIVE | $SUP_S_ALIVE | — | — |"
    echo "| lines at the sink (of $SUP_TOTAL) | $SUP_W_LINES | $SUP_S_LINES | all | $(holds "$SUP_S_LINES >= $SUP_TOTAL") |"
    echo "| VmRSS after the idle phase | $(mib_of_kib "$SUP_W_RSS") MiB | $(mib_of_kib "$SUP_S_RSS") MiB ($r×) | ≤ 1/10 and < 24 MiB | $(holds "$r <= 0.1 && $SUP_S_RSS < 24576") |"
    echo "| PSS (smaps_rollup) | $(mib_of_kib "$SUP_W_PSS") MiB | $(mib_of_kib "$SUP_S_PSS") MiB ($p×) | — | — |"
    echo "| threads | $SUP_W_THREADS | $SUP_S_THREADS | — | — |"
    echo "| inotify instances | $SUP_W_INOTIFY | $SUP_S_INOTIFY | 1 | $(holds "$SUP_S_INOTIFY == 1") |"
    echo "| idle CPU (utime+stime), s per minute | $SUP_W_CPU | $SUP_S_CPU | ≤ 0.05 | $(holds "$SUP_S_CPU <= 0.05") |"
    echo "| append → sink, all lines ($SUP_watch_GOT / $SUP_supervise_GOT of $SUP_APPENDED arrived) | p50 $(r2 "$SUP_watch_P50") ms, p99 $(r2 "$SUP_watch_P99") ms, max $(r2 "$SUP_watch_MAX") ms | p50 $(r2 "$SUP_supervise_P50") ms, p99 $(r2 "$SUP_supervise_P99") ms, max $(r2 "$SUP_supervise_MAX") ms | — | — |"
    echo "| append → sink, worst child's p99 | $SUP_watch_WORST ms | $SUP_supervise_WORST ms | < 20 ms | $(holds "$SUP_supervise_WORST < 20 && $SUP_supervise_GOT >= $SUP_APPENDED") |"
    echo "| context switches per appended line (active phase, every thread) | $SUP_W_CTX | $SUP_S_CTX | ≤ 2 | $(holds "$SUP_S_CTX <= 2") |"
    echo "| ERROR log lines | — | — | 0 (both sets: $SUP_ERRORS) | $(holds "$SUP_ERRORS == 0") |"
    echo
    echo "(CPU from /proc/PID/stat at $CLK_TCK ticks/s, scaled to a minute; context switches from the threads alive at each snapshot.)"
}

if ((SUPERVISE_ONLY)); then
    holds() { awk "BEGIN {exit !($1)}" && echo yes || echo "**no**"; }
    r2() { awk -v x="$1" 'BEGIN {printf "%.2f", x}'; }
    bench_supervise
    echo
    echo "kcap-watch supervise performance, $(date -u +%Y-%m-%dT%H:%MZ), commit $REV$( ((QUICK)) && echo ', QUICK mode')"
    echo "machine: $MACHINE"
    echo "load average (1/5/15 min) at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine shares its 2 cores)"
    print_supervise_table
    echo
    echo "Commands run (from $ROOT):"
    for c in "${CMDS[@]}"; do echo "  $c"; done
    exit 0
fi
# === end of the supervise scenario ===========================================================

# --- the corpus -----------------------------------------------------------------------------

BIG=$WORK/rollout-big.jsonl
log "generating a $SIZE rollout"
cmd "$GEN --size $SIZE --seed 7 --role child --end open --out $BIG"
"$GEN" --size "$SIZE" --seed 7 --role child --end open --out "$BIG"
BIG_BYTES=$(stat -c %s "$BIG")
BIG_LINES=$(wc -l <"$BIG")
cat "$BIG" >/dev/null # warm the page cache
log "corpus: $(mb_of "$BIG_BYTES") MiB, $BIG_LINES lines"

# --- 1. seeding: inspect --json vs wc -l vs jq ----------------------------------------------

cat >"$WORK/fold.jq" <<'JQ'
# The fold kcap-watch does, in one pass: turn state and id, open call ids, line count.
reduce inputs as $l ({turn: "none", turn_id: null, pending: {}, lines: 0};
  .lines += 1
  | if $l.type == "event_msg" then
      ($l.payload.type) as $t
      | if $t == "task_started" or $t == "turn_started" then
          .turn = "open" | .turn_id = $l.payload.turn_id | .pending = {}
        elif $t == "task_complete" or $t == "turn_complete" then
          .turn = "completed" | .turn_id = ($l.payload.turn_id // .turn_id) | .pending = {}
        elif $t == "turn_aborted" then
          .turn = "aborted" | .turn_id = ($l.payload.turn_id // .turn_id) | .pending = {}
        else . end
    elif $l.type == "response_item" then
      .turn = "open"
      | ($l.payload.call_id) as $c
      | ($l.payload.type) as $p
      | if $c == null then .
        elif ($p | IN("function_call", "custom_tool_call", "local_shell_call", "tool_search_call")) then
          .pending[$c] = true
        elif ($p | IN("function_call_output", "custom_tool_call_output", "tool_search_output")) then
          del(.pending[$c])
        else . end
    else . end)
| {turn, turn_id, pending: (.pending | keys), lines}
JQ
INSPECT_VIEW='{turn: .turn.state, turn_id: .turn.turn_id, pending: ([.pending_tools[].call_id] | sort), lines: .lines.complete}'

check_jq_fold() { # rollout
    local ours theirs
    ours=$("$BIN" inspect --json "$1" | jq -c "$INSPECT_VIEW")
    theirs=$(jq -n -c -f "$WORK/fold.jq" <"$1")
    if [[ $ours != "$theirs" ]]; then
        echo "compare.sh: the jq fold disagrees with inspect on $1:" >&2
        echo "  inspect: $ours" >&2
        echo "  jq:      $theirs" >&2
        return 1
    fi
}
log "checking the jq fold against inspect --json"
for f in "$ROOT"/fixtures/codex/child-two-turns.jsonl "$ROOT"/fixtures/codex/child-aborted-pending.jsonl "$BIG"; do
    check_jq_fold "$f"
done
cmd "jq -n -c -f fold.jq < $BIG   # fold.jq: see benches/compare.sh; its answer matched inspect --json"

timed() { # out-file cmd... : appends "wall_s cpu_s maxrss_kib" to out-file
    local out=$1 t0 t1
    shift
    t0=$(now_us)
    /usr/bin/time -f '%U %S %M' -o "$WORK/time.tmp" "$@"
    t1=$(now_us)
    read -r u s m <"$WORK/time.tmp"
    awk -v w=$((t1 - t0)) -v u="$u" -v s="$s" -v m="$m" 'BEGIN {printf "%.4f %.2f %d\n", w/1e6, u+s, m}' >>"$out"
}

log "seeding: $RUNS x inspect --json, $RUNS x wc -l, $JQ_RUNS x jq (interleaved)"
cmd "$BIN inspect --json $BIG > /dev/null   # x$RUNS, wall clock via EPOCHREALTIME, CPU/RSS via /usr/bin/time"
cmd "wc -l $BIG   # x$RUNS"
[[ -n $BASE_BIN ]] && cmd "$BASE_BIN inspect --json $BIG > /dev/null   # x$RUNS, interleaved with ours"
: >"$WORK/seed.inspect" >"$WORK/seed.base" >"$WORK/seed.wc" >"$WORK/seed.jq"
for ((i = 0; i < RUNS; i++)); do
    timed "$WORK/seed.inspect" sh -c '"$0" inspect --json "$1" >/dev/null' "$BIN" "$BIG"
    if [[ -n $BASE_BIN ]]; then
        timed "$WORK/seed.base" sh -c '"$0" inspect --json "$1" >/dev/null' "$BASE_BIN" "$BIG"
    fi
    timed "$WORK/seed.wc" sh -c 'wc -l "$0" >/dev/null' "$BIG"
    if ((i < JQ_RUNS)); then
        timed "$WORK/seed.jq" sh -c 'jq -n -c -f "$0" <"$1" >/dev/null' "$WORK/fold.jq" "$BIG"
    fi
done
SEED_OURS=$(cut -d' ' -f1 "$WORK/seed.inspect" | median)
SEED_OURS_RSS=$(cut -d' ' -f3 "$WORK/seed.inspect" | median)
SEED_WC=$(cut -d' ' -f1 "$WORK/seed.wc" | median)
SEED_BASE=$(cut -d' ' -f1 "$WORK/seed.base" | median)
SEED_BASE_RSS=$(cut -d' ' -f3 "$WORK/seed.base" | median)
SEED_JQ=$(cut -d' ' -f1 "$WORK/seed.jq" | median)
SEED_JQ_RSS=$(cut -d' ' -f3 "$WORK/seed.jq" | median)

# --- 2 and 3. one appended line per second: CPU; then append -> arrival latency -------------

log "following: watcher on the $SIZE file, $CPU_SECS lines at 1 line/s, baseline re-reads the file every second"
if [[ -n $BASE_BIN ]]; then
    # The baseline follows the same file beside ours, with its own sink.
    start_sink follow-base --watermark $((BIG_LINES - 1)) --latency-log "$WORK/follow-base.lat"
    FOLLOW_BASE_SINK_PID=$SINK_PID
    FOLLOW_BASE_URL=$SINK_URL
fi
start_sink follow --watermark $((BIG_LINES - 1)) --latency-log "$WORK/follow.lat"
touch "$BIG"
cmd "KCAP_URL=<sink> KCAP_CONFIG_DIR=<tmp> $BIN watch $BIG ${WATCH_FLAGS[*]}   # sink: $SINK --watermark $((BIG_LINES - 1)) --latency-log follow.lat"
start_watcher follow "$BIG"
FOLLOW_PID=$WATCHER_PID
if [[ -n $BASE_BIN ]]; then
    cmd "KCAP_URL=<sink 2> KCAP_CONFIG_DIR=<tmp 2> $BASE_BIN watch $BIG ${WATCH_FLAGS[*]}   # alongside, its own sink as above"
    SINK_URL=$FOLLOW_BASE_URL start_watcher follow-base "$BIG" "$BASE_BIN"
    FOLLOW_BASE_PID=$WATCHER_PID
    wait_for_grep watching "$WORK/follow-base.err" 120
fi
wait_for_grep watching "$WORK/follow.err" 120
# Let the watermark answer arrive and the start-up settle.
sleep 2
cmd "$GEN append $BIG --count $CPU_SECS --interval 1s --first-seq 0"
cmd "bash -c 'for ((i = 0; i < $CPU_SECS; i++)); do wc -l < $BIG > /dev/null; sleep 1; done'   # baseline, under /usr/bin/time, alongside"
c0=$(cpu_ns "$FOLLOW_PID")
[[ -n $BASE_BIN ]] && b0=$(cpu_ns "$FOLLOW_BASE_PID")
/usr/bin/time -f '%U %S' -o "$WORK/reread.time" \
    bash -c 'for ((i = 0; i < $1; i++)); do wc -l <"$0" >/dev/null; sleep 1; done' "$BIG" "$CPU_SECS" &
REREAD_PID=$!
"$GEN" append "$BIG" --count "$CPU_SECS" --interval 1s --first-seq 0
wait "$REREAD_PID"
sleep 1
c1=$(cpu_ns "$FOLLOW_PID")
FOLLOW_CPU_MS=$(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.1f", (b-a)/1e6}')
if [[ -n $BASE_BIN ]]; then
    b1=$(cpu_ns "$FOLLOW_BASE_PID")
    FOLLOW_BASE_CPU_MS=$(awk -v a="$b0" -v b="$b1" 'BEGIN {printf "%.1f", (b-a)/1e6}')
fi
REREAD_CPU_MS=$(awk '{printf "%.1f", ($1+$2)*1000}' "$WORK/reread.time")
FOLLOW_GOT=$(curl -fsS "$SINK_URL/stats" | jq .lines)

log "latency: $LAT_N appends every $LAT_INTERVAL, watcher -> sink and tail -F, simultaneously"
cmd "tail -F -n0 $BIG | $GEN stamp --count $LAT_N --out tail.lat   # baseline, alongside"
cmd "$GEN append $BIG --count $LAT_N --interval $LAT_INTERVAL --first-seq 100000"
mkfifo "$WORK/tail.fifo"
"$GEN" stamp --count "$LAT_N" --out "$WORK/tail.lat" <"$WORK/tail.fifo" &
STAMP_PID=$!
tail -F -n0 "$BIG" >"$WORK/tail.fifo" 2>/dev/null &
TAIL_PID=$!
PIDS+=("$STAMP_PID" "$TAIL_PID")
sleep 1
"$GEN" append "$BIG" --count "$LAT_N" --interval "$LAT_INTERVAL" --first-seq 100000
deadline=$(($(now_us) + 20000000))
while (($(awk '$1 >= 100000' "$WORK/follow.lat" | wc -l) < LAT_N)) && (($(now_us) < deadline)); do
    sleep 0.1
done
while [[ -n $BASE_BIN ]] && (($(awk '$1 >= 100000' "$WORK/follow-base.lat" | wc -l) < LAT_N)) && (($(now_us) < deadline)); do
    sleep 0.1
done
# stamp exits after LAT_N lines.
for ((i = 0; i < 50; i++)); do kill -0 "$STAMP_PID" 2>/dev/null || break; sleep 0.1; done
stop_pid "$STAMP_PID"
stop_pid "$TAIL_PID"
awk '$1 >= 100000 {print $2/1000}' "$WORK/follow.lat" >"$WORK/ours.lat.ms"
awk '{print $2/1000}' "$WORK/tail.lat" >"$WORK/tail.lat.ms"
LAT_GOT=$(wc -l <"$WORK/ours.lat.ms")
LAT_P50=$(percentile 50 <"$WORK/ours.lat.ms")
LAT_P99=$(percentile 99 <"$WORK/ours.lat.ms")
LAT_MAX=$(percentile 100 <"$WORK/ours.lat.ms")
TAIL_P50=$(percentile 50 <"$WORK/tail.lat.ms")
TAIL_P99=$(percentile 99 <"$WORK/tail.lat.ms")
stop_pid "$FOLLOW_PID"
stop_pid "$SINK_PID"
if [[ -n $BASE_BIN ]]; then
    awk '$1 >= 100000 {print $2/1000}' "$WORK/follow-base.lat" >"$WORK/base.lat.ms"
    LAT_BASE_GOT=$(wc -l <"$WORK/base.lat.ms")
    LAT_BASE_P50=$(percentile 50 <"$WORK/base.lat.ms")
    LAT_BASE_P99=$(percentile 99 <"$WORK/base.lat.ms")
    LAT_BASE_MAX=$(percentile 100 <"$WORK/base.lat.ms")
    stop_pid "$FOLLOW_BASE_PID"
    stop_pid "$FOLLOW_BASE_SINK_PID"
fi

# --- 4. idle: 20 watchers ---------------------------------------------------------------------

log "idle: $IDLE_N watchers on $IDLE_SIZE rollouts (one directory): (a) ship everything then $IDLE_SECS s idle; (b) restarted, seed only (the sink holds every line), then $IDLE_SECS s idle"
mkdir -p "$WORK/idle"
IDLE_LINES=0
for ((i = 0; i < IDLE_N; i++)); do
    f=$WORK/idle/rollout-$i.jsonl
    "$GEN" --size "$IDLE_SIZE" --seed $((100 + i)) --role child --end open --out "$f"
    IDLE_LINES=$((IDLE_LINES + $(wc -l <"$f")))
done
cmd "$GEN --size $IDLE_SIZE --seed 100..$((100 + IDLE_N - 1)) --role child --end open --out idle/rollout-N.jsonl"
cmd "$IDLE_N x KCAP_URL=<sink> KCAP_CONFIG_DIR=<tmp> $BIN watch idle/rollout-N.jsonl ${WATCH_FLAGS[*]}   # (a) sink: $SINK --done-after-lines <all lines>; (b) the same command again after SIGTERM, the sink now answering each stream's watermark"

start_idle_watchers() { # phase [binary]
    local bin=${2:-$BIN}
    IDLE_PIDS=()
    for ((i = 0; i < IDLE_N; i++)); do
        KCAP_URL=$SINK_URL KCAP_CONFIG_DIR=$WORK/idle-$1.cfg \
            "$bin" watch "$WORK/idle/rollout-$i.jsonl" "${WATCH_FLAGS[@]}" >"$WORK/idle-$1-$i.out" 2>"$WORK/idle-$1-$i.err" &
        IDLE_PIDS+=($!)
        PIDS+=($!)
    done
}
idle_cpu_total() {
    local p t=0
    for p in "${IDLE_PIDS[@]}"; do t=$((t + $(cpu_ns "$p"))); done
    echo "$t"
}
measure_idle() { # phase: sets IDLE_<phase>_* (CPU s, VmRSS median/max, RssAnon median, PSS median, alive)
    local phase=$1 alive=0 p c0 c1
    for p in "${IDLE_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
    c0=$(idle_cpu_total)
    sleep "$IDLE_SECS"
    c1=$(idle_cpu_total)
    : >"$WORK/idle-$phase.rss"
    for p in "${IDLE_PIDS[@]}"; do echo "$(rss_kib "$p") $(anon_kib "$p") $(pss_kib "$p")" >>"$WORK/idle-$phase.rss"; done
    printf -v "IDLE_${phase}_ALIVE" %s "$alive"
    printf -v "IDLE_${phase}_CPU" %s "$(awk -v a="$c0" -v b="$c1" 'BEGIN {printf "%.3f", (b-a)/1e9}')"
    printf -v "IDLE_${phase}_RSS_MED" %s "$(cut -d' ' -f1 "$WORK/idle-$phase.rss" | median)"
    printf -v "IDLE_${phase}_RSS_MAX" %s "$(cut -d' ' -f1 "$WORK/idle-$phase.rss" | sort -g | tail -1)"
    printf -v "IDLE_${phase}_ANON_MED" %s "$(cut -d' ' -f2 "$WORK/idle-$phase.rss" | median)"
    printf -v "IDLE_${phase}_PSS_MED" %s "$(cut -d' ' -f3 "$WORK/idle-$phase.rss" | median)"
    printf -v "IDLE_${phase}_PSS_MAX" %s "$(cut -d' ' -f3 "$WORK/idle-$phase.rss" | sort -g | tail -1)"
}

run_idle() { # tag binary: phases <tag>a (ship from line 0, then idle) and <tag>b (restart, seed only)
    local tag=$1 bin=$2
    rm -f "$WORK/idle.done"
    start_sink "idle$tag" --done-after-lines "$IDLE_LINES" --done-file "$WORK/idle.done"
    touch "$WORK"/idle/*.jsonl
    mkdir -p "$WORK/idle-${tag}a.cfg"
    start_idle_watchers "${tag}a" "$bin"
    wait_for_file "$WORK/idle.done" 600
    sleep 2
    measure_idle "${tag}a"
    for p in "${IDLE_PIDS[@]}"; do stop_pid "$p"; done
    # The restarted watchers share the first phase's config dir (its locks are released).
    mv "$WORK/idle-${tag}a.cfg" "$WORK/idle-${tag}b.cfg"
    start_idle_watchers "${tag}b" "$bin"
    for ((i = 0; i < IDLE_N; i++)); do
        wait_for_grep "resume at line" "$WORK/idle-${tag}b-$i.err" 120
    done
    sleep 2
    measure_idle "${tag}b"
    for p in "${IDLE_PIDS[@]}"; do stop_pid "$p"; done
    stop_pid "$SINK_PID"
}
run_idle "" "$BIN"
[[ -n $BASE_BIN ]] && run_idle base_ "$BASE_BIN"

# --- 5. throughput: ship the whole file to the loopback sink ---------------------------------

log "throughput: $RUNS x ship the $SIZE file from line 0 (fresh sink and config each run), $RUNS x cat"
cmd "KCAP_URL=<sink> KCAP_CONFIG_DIR=<tmp> $BIN watch $BIG ${WATCH_FLAGS[*]}   # x$RUNS, sink: $SINK --done-after-lines <lines>; time from spawn to the last line's arrival"
cmd "cat $BIG > /dev/null   # x$RUNS"
THRU_LINES=$(wc -l <"$BIG")
THRU_BYTES=$(stat -c %s "$BIG")
: >"$WORK/thru.ours" >"$WORK/thru.ship" >"$WORK/thru.cat" >"$WORK/thru.busy"
: >"$WORK/thru.base" >"$WORK/thru.baseship" >"$WORK/thru.basebusy"
ship_once() { # binary out-spawn out-ship out-busy
    rm -f "$WORK/thru.done"
    start_sink "thru$i" --done-after-lines "$THRU_LINES" --done-file "$WORK/thru.done"
    rm -rf "$WORK/thru.cfg"
    t0=$(now_us)
    start_watcher thru "$BIG" "$1"
    wait_for_file "$WORK/thru.done" 900
    read -r first_ns last_ns < <(jq -r '"\(.first_ns) \(.last_ns)"' "$WORK/thru.done")
    awk -v b="$THRU_BYTES" -v t0="$t0" -v l="$last_ns" 'BEGIN {printf "%.1f\n", b/1048576 / ((l/1000 - t0)/1e6)}' >>"$2"
    awk -v b="$THRU_BYTES" -v f="$first_ns" -v l="$last_ns" 'BEGIN {printf "%.1f\n", b/1048576 / ((l - f)/1e9)}' >>"$3"
    # How busy the watcher was: its CPU (all threads) over the wall time to the last line.
    awk -v c="$(cpu_ns "$WATCHER_PID")" -v t0="$t0" -v l="$last_ns" 'BEGIN {printf "%.2f\n", (c/1e9) / ((l/1000 - t0)/1e6)}' >>"$4"
    stop_pid "$WATCHER_PID"
    stop_pid "$SINK_PID"
}
[[ -n $BASE_BIN ]] && cmd "KCAP_URL=<sink> KCAP_CONFIG_DIR=<tmp> $BASE_BIN watch $BIG ${WATCH_FLAGS[*]}   # x$RUNS, interleaved with ours"
for ((i = 0; i < RUNS; i++)); do
    ship_once "$BIN" "$WORK/thru.ours" "$WORK/thru.ship" "$WORK/thru.busy"
    if [[ -n $BASE_BIN ]]; then
        ship_once "$BASE_BIN" "$WORK/thru.base" "$WORK/thru.baseship" "$WORK/thru.basebusy"
    fi
    c0=$(now_us)
    cat "$BIG" >/dev/null
    c1=$(now_us)
    awk -v b="$THRU_BYTES" -v w=$((c1 - c0)) 'BEGIN {printf "%.1f\n", b/1048576 / (w/1e6)}' >>"$WORK/thru.cat"
done
THRU_OURS=$(median <"$WORK/thru.ours")
THRU_SHIP=$(median <"$WORK/thru.ship")
THRU_CAT=$(median <"$WORK/thru.cat")
THRU_BASE=$(median <"$WORK/thru.base")
THRU_BASE_SHIP=$(median <"$WORK/thru.baseship")

bench_supervise # the supervise scenario (defined above)

# --- the table ------------------------------------------------------------------------------

holds() { awk "BEGIN {exit !($1)}" && echo yes || echo "**no**"; }
r2() { awk -v x="$1" 'BEGIN {printf "%.2f", x}'; }

SEED_RATIO=$(awk -v a="$SEED_OURS" -v b="$SEED_WC" 'BEGIN {printf "%.2f", a/b}')
JQ_RATIO=$(awk -v a="$SEED_OURS" -v b="$SEED_JQ" 'BEGIN {printf "%.1f", b/a}')
CPU_PCT=$(awk -v a="$FOLLOW_CPU_MS" -v b="$REREAD_CPU_MS" 'BEGIN {printf "%.2f", 100*a/b}')
SIZE_MB=$(mb_of "$BIG_BYTES")

# The "before" column: the baseline build's figure, or a dash without --baseline.
before() { if [[ -n $BASE_BIN ]]; then echo "$1"; else echo "—"; fi; }
if [[ -n $BASE_BIN ]]; then
    SEED_BASE_RATIO=$(awk -v a="$SEED_BASE" -v b="$SEED_WC" 'BEGIN {printf "%.2f", a/b}')
    JQ_BASE_RATIO=$(awk -v a="$SEED_BASE" -v b="$SEED_JQ" 'BEGIN {printf "%.1f", b/a}')
    CPU_BASE_PCT=$(awk -v a="$FOLLOW_BASE_CPU_MS" -v b="$REREAD_CPU_MS" 'BEGIN {printf "%.2f", 100*a/b}')
fi

echo
echo "kcap-watch performance, $(date -u +%Y-%m-%dT%H:%MZ), commit $REV$( ((QUICK)) && echo ', QUICK mode')$([[ -n $BASE_BIN ]] && echo ", before = commit $BASE_SHORT built in the same run")"
echo "machine: $MACHINE"
echo "load average (1/5/15 min) at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine shares its 2 cores)"
echo "corpus: $SIZE_MB MiB, $BIG_LINES lines (gen_rollout --seed 7); medians of $RUNS runs unless noted"
echo
echo "| what | after: $REV | before: $([[ -n $BASE_BIN ]] && echo "$BASE_SHORT" || echo "(no --baseline)") | tool baseline (same run) | target | after holds |"
echo "|---|---|---|---|---|---|"
echo "| seed a $SIZE_MB MiB rollout, warm cache (\`inspect --json\`) | $(r2 "$SEED_OURS") s = $SEED_RATIO× \`wc -l\`, $JQ_RATIO× faster than \`jq\` (max RSS $(mib_of_kib "$SEED_OURS_RSS") MiB) | $(before "$(r2 "$SEED_BASE") s = $SEED_BASE_RATIO× \`wc -l\`, $JQ_BASE_RATIO× faster than \`jq\` (max RSS $(mib_of_kib "$SEED_BASE_RSS") MiB)") | \`wc -l\` $(r2 "$SEED_WC") s; \`jq\` fold $(r2 "$SEED_JQ") s (median of $JQ_RUNS; max RSS $(mib_of_kib "$SEED_JQ_RSS") MiB) | ≤ 4× \`wc -l\`; ≥ 12× faster than \`jq\` | $(holds "$SEED_RATIO <= 4"); $(holds "$JQ_RATIO >= 12") |"
echo "| notice 1 appended line/s on the $SIZE_MB MiB file, $CPU_SECS s | CPU $FOLLOW_CPU_MS ms = $CPU_PCT % ($FOLLOW_GOT lines shipped) | $(before "CPU $FOLLOW_BASE_CPU_MS ms = $CPU_BASE_PCT %") | re-read with \`wc -l\` every second: $REREAD_CPU_MS ms | ≤ 1 % | $(holds "$CPU_PCT <= 1") |"
echo "| append → line at the loopback sink, $LAT_N appends every $LAT_INTERVAL (both watchers at once) | p50 $(r2 "$LAT_P50") ms, p99 $(r2 "$LAT_P99") ms (max $(r2 "$LAT_MAX"); $LAT_GOT arrived) | $(before "p50 $(r2 "${LAT_BASE_P50:-0}") ms, p99 $(r2 "${LAT_BASE_P99:-0}") ms (max $(r2 "${LAT_BASE_MAX:-0}"); ${LAT_BASE_GOT:-0} arrived)") | \`tail -F\`: p50 $(r2 "$TAIL_P50") ms, p99 $(r2 "$TAIL_P99") ms | p50 ≤ 20 ms, p99 ≤ 100 ms | $(holds "$LAT_P50 <= 20 && $LAT_P99 <= 100 && $LAT_GOT >= $LAT_N") |"
idle_cell() { # phase
    local p=$1 alive cpu rmed rmax pmed pmax
    alive=IDLE_${p}_ALIVE cpu=IDLE_${p}_CPU rmed=IDLE_${p}_RSS_MED rmax=IDLE_${p}_RSS_MAX
    pmed=IDLE_${p}_PSS_MED pmax=IDLE_${p}_PSS_MAX
    echo "CPU ${!cpu} s ($((${!alive})) alive); VmRSS median $(mib_of_kib "${!rmed}"), max $(mib_of_kib "${!rmax}") MiB; PSS median $(mib_of_kib "${!pmed}"), max $(mib_of_kib "${!pmax}") MiB"
}
idle_row() { # phase label
    local p=$1 alive cpu rmax pmax
    alive=IDLE_${p}_ALIVE cpu=IDLE_${p}_CPU rmax=IDLE_${p}_RSS_MAX pmax=IDLE_${p}_PSS_MAX
    echo "| idle: $IDLE_N watchers $2, $IDLE_SECS s | $(idle_cell "$p") | $(before "$(idle_cell "base_$p")") | — | CPU ≤ 0.2 s total; ≤ 10 MiB each | CPU $(holds "${!cpu} <= 0.2 && ${!alive} == $IDLE_N"); VmRSS $(holds "${!rmax} <= 10240"); PSS $(holds "${!pmax} <= 10240") |"
}
idle_row b "after seeding $IDLE_SIZE each (restarted; the server held every line)"
idle_row a "after shipping $IDLE_SIZE each from line 0"
echo "| throughput: ship all $BIG_LINES lines from line 0 | $THRU_OURS MB/s spawn → last line (shipping alone $THRU_SHIP MB/s) | $(before "$THRU_BASE MB/s (shipping alone $THRU_BASE_SHIP MB/s)") | \`cat > /dev/null\` $THRU_CAT MB/s | ≥ 100 MB/s | $(holds "$THRU_OURS >= 100") |"
echo
echo "(MB = MiB = 2^20 bytes. CPU is the scheduler's per-thread accounting (/proc/PID/task/*/schedstat); baselines' CPU and max RSS come from /usr/bin/time.)"
print_supervise_table
echo
echo "Raw samples:"
echo "  inspect --json wall s: $(cut -d' ' -f1 "$WORK/seed.inspect" | tr '\n' ' ')"
[[ -n $BASE_BIN ]] && echo "  before: inspect --json wall s: $(cut -d' ' -f1 "$WORK/seed.base" | tr '\n' ' ')"
echo "  wc -l wall s:          $(cut -d' ' -f1 "$WORK/seed.wc" | tr '\n' ' ')"
echo "  jq fold wall s:        $(cut -d' ' -f1 "$WORK/seed.jq" | tr '\n' ' ')"
echo "  ship MB/s (spawn→last): $(tr '\n' ' ' <"$WORK/thru.ours")"
echo "  ship MB/s (first→last): $(tr '\n' ' ' <"$WORK/thru.ship")"
[[ -n $BASE_BIN ]] && echo "  before: ship MB/s (spawn→last): $(tr '\n' ' ' <"$WORK/thru.base"); (first→last): $(tr '\n' ' ' <"$WORK/thru.baseship")"
echo "  cat MB/s:               $(tr '\n' ' ' <"$WORK/thru.cat")"
echo "  idle after seeding, VmRSS/RssAnon/Pss KiB per watcher: $(tr '\n' ';' <"$WORK/idle-b.rss")"
echo "  idle after shipping, VmRSS/RssAnon/Pss KiB per watcher: $(tr '\n' ';' <"$WORK/idle-a.rss")"
if [[ -n $BASE_BIN ]]; then
    echo "  before: idle after seeding, VmRSS/RssAnon/Pss KiB: $(tr '\n' ';' <"$WORK/idle-base_b.rss")"
    echo "  before: idle after shipping, VmRSS/RssAnon/Pss KiB: $(tr '\n' ';' <"$WORK/idle-base_a.rss")"
fi
echo "  shipping: watcher CPU / wall time per run: $(tr '\n' ' ' <"$WORK/thru.busy")$([[ -n $BASE_BIN ]] && echo "; before: $(tr '\n' ' ' <"$WORK/thru.basebusy")")"
echo
echo "Commands run (from $ROOT):"
for c in "${CMDS[@]}"; do echo "  $c"; done
