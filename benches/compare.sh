#!/usr/bin/env bash
# Measures kcap-watch against the round-3 targets of docs/performance.md (and the older ones of
# round 1), each baseline measured in the same run (these machines are shared and
# noisy), and prints one table with every figure beside its target, medians and ratios, plus
# every command it ran: one file (seeding vs `wc -l`, one line per second with the one-time
# rule compilation apart, latency, idle memory, throughput, CPU per shipped MiB and peak RSS
# against round 1 and Fluent Bit), many files (`supervise` with 50 and 200 children beside two
# Fluent Bits, 1 s and 10 ms flush) and the machine (the daemon with 10 sessions of 10 children, each session under
# a stand-in for the kcap CLI's session watcher, examples/kcap_session.rs). With --baseline,
# an earlier commit of kcap-watch itself is built and measured side by side (before/after).
#
#   benches/compare.sh [--quick] [--keep] [--size 500MB] [--baseline REV [--keep-baseline]]
#                      [--supervise-only | --daemon-only] [--fluent-bit PATH] [--children "50 200"]
#
# --quick:      a 50 MB file, fewer runs and shorter windows (a few minutes).
# --keep:       keep the work directory (rollouts, logs, latency samples) and print its path.
# --baseline:   build REV (e.g. dfbcf0f, the last round-1 commit) in a temporary git worktree
#               under ${TMPDIR:-/tmp} with its own target directory, and measure its binary
#               beside this one; both are deleted afterwards unless --keep-baseline.
# --supervise-only: run only the many-files scenarios (supervise, Fluent Bit, the daemon).
# --daemon-only: run only the daemon scenario (the machine).
# --fluent-bit PATH: the Fluent Bit binary to compare with (default: $FLUENT_BIT, else
#               `fluent-bit` on PATH; docs/performance.md says how to build it). Without one,
#               its columns say "not built" and the targets are checked against round 1 where
#               the issue allows it.
# --children "50 200": the supervise scenario's child counts (one scenario each).
# DAEMON_SETTLE=S (environment, default 5): seconds between the last line at the sink and the
#               daemon scenario's idle window; 45 measures the machine's steady idle, after
#               every process's 30 s hand-back of memory and its safety net's stretch.
#
# Load: the 1-minute load average is sampled every 2 s; every timing verdict names the highest
# seen over its scenario ("yes (load 0.42)") and none is given above 1 ("no verdict (load 3.10
# > 1)"): on a shared machine such a figure is the other work's as much as the tool's. Counts
# (lines at the sink, errors) get their verdict whatever the load.
#
# Needs bash, git, GNU coreutils, /usr/bin/time, jq and curl. Builds the binary and the three
# examples it uses (examples/gen_rollout.rs, examples/sink_server.rs, examples/kcap_session.rs)
# itself; the baseline binary is driven with this tree's examples.
set -euo pipefail

QUICK=0
KEEP=0
SIZE_OVERRIDE=""
BASE_REV=""
KEEP_BASE=0
SUPERVISE_ONLY=0
DAEMON_ONLY=0
FLUENT_BIT=${FLUENT_BIT:-}
SUP_SIZES="50 200"
while (($#)); do
    case "$1" in
    --quick) QUICK=1 ;;
    --keep) KEEP=1 ;;
    --supervise-only) SUPERVISE_ONLY=1 ;;
    --daemon-only) SUPERVISE_ONLY=1 DAEMON_ONLY=1 ;;
    --size)
        SIZE_OVERRIDE="$2"
        shift
        ;;
    --baseline)
        BASE_REV="$2"
        shift
        ;;
    --keep-baseline) KEEP_BASE=1 ;;
    --fluent-bit)
        FLUENT_BIT="$2"
        shift
        ;;
    --children)
        SUP_SIZES="$2"
        shift
        ;;
    -h | --help)
        sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
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
    SIZE=500MB RUNS=5 JQ_RUNS=3 CPU_SECS=15 LAT_N=1000 LAT_INTERVAL=20ms
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
# The dist profile: what `cargo install --profile dist` installs (fat LTO), so the figures are the
# installed binary's.
echo "== building (cargo build --profile dist --bin kcap-watch --example gen_rollout --example sink_server --example kcap_session)" >&2
cargo build --profile dist --quiet --bin kcap-watch --example gen_rollout --example sink_server --example kcap_session
TARGET=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
BIN=$TARGET/dist/kcap-watch
GEN=$TARGET/dist/examples/gen_rollout
SINK=$TARGET/dist/examples/sink_server
KSESSION=$TARGET/dist/examples/kcap_session

# Fluent Bit, for the round-3 comparisons (tail -> http, same files, same sink).
if [[ -z $FLUENT_BIT ]] && command -v fluent-bit >/dev/null; then
    FLUENT_BIT=$(command -v fluent-bit)
fi
if [[ -n $FLUENT_BIT && ! -x $FLUENT_BIT ]]; then
    echo "compare.sh: --fluent-bit $FLUENT_BIT is not executable" >&2
    exit 2
fi
FB_VERSION=$([[ -n $FLUENT_BIT ]] && "$FLUENT_BIT" --version 2>/dev/null | head -1 || echo "not built")

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

# Fluent Bit tailing PATH-GLOB from the head into the sink's /records (json_lines), with
# what it needs to ship every line of a rollout (lines of several MB) and nothing else: no
# offset database, memory buffering, its default 1 s flush (or FLUSH seconds). Sets FB_PID.
start_fluent_bit() { # name path-glob [excluded path] [flush seconds] (uses SINK_URL)
    local name=$1 glob=$2 exclude=${3:-/nonexistent} flush=${4:-1} hostport=${SINK_URL#http://}
    cat >"$WORK/$name.fb.conf" <<CONF
[SERVICE]
    flush        $flush
    log_level    warn
    http_server  off
[INPUT]
    name              tail
    path              $glob
    exclude_path      $exclude
    read_from_head    true
    refresh_interval  1
    buffer_chunk_size 256k
    buffer_max_size   64m
    skip_long_lines   off
[OUTPUT]
    name    http
    match   *
    host    ${hostport%:*}
    port    ${hostport##*:}
    uri     /records
    format  json_lines
CONF
    "$FLUENT_BIT" -c "$WORK/$name.fb.conf" >"$WORK/$name.fb.log" 2>&1 &
    FB_PID=$!
    PIDS+=("$FB_PID")
}

mb_of() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
mib_of_kib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

# --- machine --------------------------------------------------------------------------------

CPU_MODEL=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
MACHINE="$(nproc) cores ($CPU_MODEL), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, Linux $(uname -r), $(jq --version), $(tail --version | head -1)"
REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
# The 1-minute load average every 2 s through the run: every timing verdict names the highest
# seen over its scenario, and none is given when that was above 1 (other work shared the cores,
# so the figure is not the tool's).
(while :; do
    echo "$(date +%s) $(cut -d' ' -f1 /proc/loadavg)" >>"$WORK/load.samples"
    sleep 2
done) &
PIDS+=("$!")
mark() { date +%s >"$WORK/mark.$1"; } # name: a scenario's start or end
load_between() { # from-mark to-mark: the highest load sampled between them (now, if none)
    local a b
    a=$(cat "$WORK/mark.$1" 2>/dev/null || echo 0) b=$(cat "$WORK/mark.$2" 2>/dev/null || date +%s)
    awk -v a="$a" -v b="$b" -v now="$(cut -d' ' -f1 /proc/loadavg)" \
        '$1 >= a && $1 <= b + 2 {if ($2 > m) m = $2; n++} END {printf "%.2f", n ? m : now}' "$WORK/load.samples" 2>/dev/null ||
        cut -d' ' -f1 /proc/loadavg
}
log "machine: $MACHINE; commit $REV; work dir $WORK${BASE_BIN:+; baseline $BASE_SHORT}"

# === many files (docs/behaviour.md R8, docs/performance.md): one `supervise` beside Fluent Bit; the daemon ============
#
# One session with N live children (open turns, nothing ends them) under a real
# CODEX_HOME/sessions/YYYY/MM/DD, for each N of --children (50 and 200). Side by side, at the
# same time, on the same files: one `supervise` process (its own config directory and
# loopback sink) and, when built, two Fluent Bits tailing the children's glob, each into its
# own sink: one with its default 1 s flush, one flushing every 10 ms (FB_FAST_FLUSH), which
# ships each line about as soon as `supervise` does (the per-line CPU target is ≤ the 10 ms
# one's and ≤ 2× the 1 s one's). Both ship every child from line 0 (the catch-up); then `gen_rollout append` writes
# SUP_RATE lines/s in total to random children for SUP_ACTIVE s, then nothing for SUP_IDLE s.
# Measured per process: VmRSS 3 s after the catch-up and at the end of the idle phase (the
# allocator must give the catch-up's memory back), PSS, utime+stime (/proc/PID/stat) over the
# active and the idle phase (per minute), voluntary+nonvoluntary context switches of every
# thread over the active phase per appended line, append -> sink latency per line (the line
# carries its write time and sequence number; the appender logs which child got each
# sequence number) as the worst child's p99, and for `supervise` the age of its children's
# heartbeat files (sampled every second through the idle phase). SUP_ROUNDS rounds; the
# table gives medians.

if ((QUICK)); then
    SUP_RATE=250 SUP_ACTIVE=30 SUP_IDLE=20 SUP_CHILD_SIZE=32KB SUP_ROUNDS=1 DAEMON_EVERY_MS=100
else
    SUP_RATE=250 SUP_ACTIVE=30 SUP_IDLE=60 SUP_CHILD_SIZE=32KB SUP_ROUNDS=3 DAEMON_EVERY_MS=200
fi

CLK_TCK=$(getconf CLK_TCK)
# The second Fluent Bit's flush, in seconds.
FB_FAST_FLUSH=0.01
# utime + stime of a process (every thread, ended ones included), in clock ticks.
sup_ticks() { awk '{sub(/^.*\) /, ""); print $12 + $13}' /proc/"$1"/stat 2>/dev/null || echo 0; }
# Context switches of every live thread of a process.
sup_ctxt() {
    cat /proc/"$1"/task/*/status 2>/dev/null |
        awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ {n += $2} END {print n + 0}'
}
sup_threads() { awk '/^Threads:/ {print $2}' /proc/"$1"/status 2>/dev/null || echo 0; }
# Nearest-rank p99 of "child ms" lines per child, then the largest of them.
sup_worst_child_p99() {
    sort -k1,1n -k2,2g | awk '
        function flush() { if (n) { r = int(0.99 * n + 0.999999); if (r < 1) r = 1; if (r > n) r = n; if (v[r] > worst) worst = v[r] } n = 0 }
        $1 != cur { flush(); cur = $1 }
        { v[++n] = $2 }
        END { flush(); printf "%.2f", worst }'
}
# Oldest heartbeat file under a config directory, in seconds (0 when there is none).
sup_heartbeat_age() {
    find -L "$1" -name '*.heartbeat' -printf '%T@\n' 2>/dev/null |
        awk -v now="$(date +%s.%N)" 'BEGIN {m = 0} {a = now - $1; if (a > m) m = a} END {printf "%.1f\n", m}'
}
ticks_per_min() { awk -v a="$1" -v b="$2" -v hz="$CLK_TCK" -v s="$3" 'BEGIN {printf "%.3f", (b-a)/hz * 60/s}'; }

# A session of N children (SUP_CHILD_SIZE each) under DIR/codex/sessions/<today> (the
# children in KIDS-DIR instead when given, to be written there later); sets SUP_SESSION,
# SUP_KIDS (paths) and SUP_KID_LINES (their lines in total).
make_session() { # dir n seed [kids-dir]
    local dir=$1 n=$2 seed=$3 day date_dir tmp root id parent f i kids_dir
    day=$(date -u +%Y/%m/%d)
    date_dir=$dir/codex/sessions/$day
    kids_dir=${4:-$date_dir}
    mkdir -p "$date_dir" "$kids_dir"
    tmp=$dir/gen.tmp
    "$GEN" --size 64KB --seed "$seed" --role session --end open --out "$tmp"
    root=$(head -n1 "$tmp" | jq -r .payload.id)
    SUP_SESSION=$date_dir/rollout-$(date -u +%Y-%m-%dT%H-%M-%S)-$root.jsonl
    mv "$tmp" "$SUP_SESSION"
    SUP_KIDS=()
    SUP_KID_LINES=0
    for ((i = 0; i < n; i++)); do
        "$GEN" --size "$SUP_CHILD_SIZE" --seed $((seed * 1000 + i)) --role child --end open --out "$tmp"
        id=$(head -n1 "$tmp" | jq -r .payload.id)
        parent=$(head -n1 "$tmp" | jq -r .payload.parent_thread_id)
        f=$kids_dir/rollout-$(date -u +%Y-%m-%dT%H-%M-%S)-$id.jsonl
        # The generator names a random parent; make it the session's thread.
        sed "s/$parent/$root/g" "$tmp" >"$f"
        SUP_KIDS+=("$f")
        SUP_KID_LINES=$((SUP_KID_LINES + $(wc -l <"$f")))
    done
    rm -f "$tmp"
}

# One round of the scenario with N children; appends one line of figures to $WORK/many-N.rounds:
# sup: rss_catchup rss_idle pss cpu_active cpu_idle ctx p99worst lines hb_age threads
# fb:  rss_catchup rss_idle pss cpu_active cpu_idle ctx p99worst lines (many-N.f.rounds: the
#      1 s flush; many-N.g.rounds: the FB_FAST_FLUSH one)
bench_many_round() { # n round
    local n=$1 round=$2 dir=$WORK/many-$1-$2 appended sup_pid fb_pid=0 fg_pid=0 url_s url_f url_g sink_s sink_f sink_g
    mkdir -p "$dir/cfg"
    make_session "$dir" "$n" $((900 + round))
    local total=$SUP_KID_LINES
    appended=$((SUP_RATE * SUP_ACTIVE))
    if ((round == 0)); then
        cmd "$GEN --size 64KB --seed 900 --role session --end open   # the session, in <CODEX_HOME>/sessions/YYYY/MM/DD"
        cmd "$GEN --size $SUP_CHILD_SIZE --seed 900000.. --role child --end open   # $n children of it (parent id set to the session's), same directory"
        cmd "KCAP_URL=<sink 1> KCAP_CONFIG_DIR=<tmp> $BIN supervise <session rollout> --codex-home <CODEX_HOME> ${WATCH_FLAGS[*]}"
        [[ -n $FLUENT_BIT ]] && cmd "$FLUENT_BIT -c many.fb.conf   # alongside: tail <the $n children> from the head -> http json_lines to sink 2"
        [[ -n $FLUENT_BIT ]] && cmd "$FLUENT_BIT -c many10.fb.conf   # alongside too: the same with flush $FB_FAST_FLUSH -> sink 3"
        cmd "$GEN append <the $n child rollouts> --count $appended --interval $((1000000 / SUP_RATE))us --first-seq 500000 --targets-log targets.txt"
    fi

    start_sink "many-s" --latency-log "$dir/s.lat" --done-after-lines "$total" --done-file "$dir/s.done"
    sink_s=$SINK_PID url_s=$SINK_URL
    KCAP_URL=$url_s KCAP_CONFIG_DIR=$dir/cfg KCAP_LOG=info \
        "$BIN" supervise "$SUP_SESSION" --codex-home "$dir/codex" "${WATCH_FLAGS[@]}" \
        >"$dir/supervise.out" 2>"$dir/supervise.err" &
    sup_pid=$!
    PIDS+=("$sup_pid")
    if [[ -n $FLUENT_BIT ]]; then
        start_sink "many-f" --latency-log "$dir/f.lat" --done-after-lines "$total" --done-file "$dir/f.done"
        sink_f=$SINK_PID url_f=$SINK_URL
        # Every child, not the session's own rollout (the kcap CLI ships that).
        SINK_URL=$url_f start_fluent_bit many "$(dirname "$SUP_SESSION")/rollout-*.jsonl" "$SUP_SESSION"
        fb_pid=$FB_PID
        start_sink "many-g" --latency-log "$dir/g.lat" --done-after-lines "$total" --done-file "$dir/g.done"
        sink_g=$SINK_PID url_g=$SINK_URL
        SINK_URL=$url_g start_fluent_bit many10 "$(dirname "$SUP_SESSION")/rollout-*.jsonl" "$SUP_SESSION" "$FB_FAST_FLUSH"
        fg_pid=$FB_PID
    fi
    wait_for_file "$dir/s.done" 600
    [[ -n $FLUENT_BIT ]] && wait_for_file "$dir/f.done" 600
    [[ -n $FLUENT_BIT ]] && wait_for_file "$dir/g.done" 600
    sleep 3
    local s_rss_c f_rss_c=0 g_rss_c=0
    s_rss_c=$(rss_kib "$sup_pid")
    ((fb_pid)) && f_rss_c=$(rss_kib "$fb_pid")
    ((fg_pid)) && g_rss_c=$(rss_kib "$fg_pid")

    # Active phase.
    local xs0 xs1 ts0 ts1 xf0=0 xf1=0 tf0=0 tf1=0 xg0=0 xg1=0 tg0=0 tg1=0
    xs0=$(sup_ctxt "$sup_pid") ts0=$(sup_ticks "$sup_pid")
    ((fb_pid)) && xf0=$(sup_ctxt "$fb_pid") && tf0=$(sup_ticks "$fb_pid")
    ((fg_pid)) && xg0=$(sup_ctxt "$fg_pid") && tg0=$(sup_ticks "$fg_pid")
    "$GEN" append "${SUP_KIDS[@]}" --count "$appended" --interval "$((1000000 / SUP_RATE))us" --first-seq 500000 \
        --targets-log "$dir/targets.txt"
    local deadline=$(($(now_us) + 30000000))
    while (($(now_us) < deadline)); do
        (($(wc -l <"$dir/s.lat") >= appended)) && { ((fb_pid == 0)) || (($(wc -l <"$dir/f.lat") >= appended && $(wc -l <"$dir/g.lat") >= appended)); } && break
        sleep 0.1
    done
    sleep 1
    xs1=$(sup_ctxt "$sup_pid") ts1=$(sup_ticks "$sup_pid")
    ((fb_pid)) && xf1=$(sup_ctxt "$fb_pid") && tf1=$(sup_ticks "$fb_pid")
    ((fg_pid)) && xg1=$(sup_ctxt "$fg_pid") && tg1=$(sup_ticks "$fg_pid")
    local active_s=$((SUP_ACTIVE + 1))

    # Idle phase, sampling the heartbeat files' age every second.
    sleep 2
    local is0 is1 if0=0 if1=0 ig0=0 ig1=0 hb=0 age k
    is0=$(sup_ticks "$sup_pid")
    ((fb_pid)) && if0=$(sup_ticks "$fb_pid")
    ((fg_pid)) && ig0=$(sup_ticks "$fg_pid")
    for ((k = 0; k < SUP_IDLE; k++)); do
        sleep 1
        age=$(sup_heartbeat_age "$dir/cfg")
        hb=$(awk -v a="$age" -v b="$hb" 'BEGIN {print (a > b) ? a : b}')
    done
    is1=$(sup_ticks "$sup_pid")
    ((fb_pid)) && if1=$(sup_ticks "$fb_pid")
    ((fg_pid)) && ig1=$(sup_ticks "$fg_pid")

    local which pid ctx cpu_a cpu_i rss_i pss p99 lines
    for which in s f g; do
        case $which in s) pid=$sup_pid ;; f) pid=$fb_pid ;; g) pid=$fg_pid ;; esac
        ((pid)) || continue
        rss_i=$(rss_kib "$pid")
        pss=$(pss_kib "$pid")
        if [[ $which == s ]]; then
            ctx=$(awk -v a="$xs0" -v b="$xs1" -v n="$appended" 'BEGIN {printf "%.2f", (b-a)/n}')
            cpu_a=$(ticks_per_min "$ts0" "$ts1" "$active_s")
            cpu_i=$(ticks_per_min "$is0" "$is1" "$SUP_IDLE")
            lines=$(curl -fsS "$url_s/stats" | jq .lines)
        elif [[ $which == f ]]; then
            ctx=$(awk -v a="$xf0" -v b="$xf1" -v n="$appended" 'BEGIN {printf "%.2f", (b-a)/n}')
            cpu_a=$(ticks_per_min "$tf0" "$tf1" "$active_s")
            cpu_i=$(ticks_per_min "$if0" "$if1" "$SUP_IDLE")
            lines=$(curl -fsS "$url_f/stats" | jq .lines)
        else
            ctx=$(awk -v a="$xg0" -v b="$xg1" -v n="$appended" 'BEGIN {printf "%.2f", (b-a)/n}')
            cpu_a=$(ticks_per_min "$tg0" "$tg1" "$active_s")
            cpu_i=$(ticks_per_min "$ig0" "$ig1" "$SUP_IDLE")
            lines=$(curl -fsS "$url_g/stats" | jq .lines)
        fi
        p99=$(awk 'NR == FNR {child[$1] = $2; next} $1 >= 500000 && ($1 in child) {print child[$1], $2/1000}' \
            "$dir/targets.txt" "$dir/$which.lat" | sup_worst_child_p99)
        if [[ $which == s ]]; then
            echo "$s_rss_c $rss_i $pss $cpu_a $cpu_i $ctx $p99 $lines $hb $(sup_threads "$pid") $((total + appended - lines))" >>"$WORK/many-$n.s.rounds"
        elif [[ $which == f ]]; then
            echo "$f_rss_c $rss_i $pss $cpu_a $cpu_i $ctx $p99 $lines $((total + appended - lines))" >>"$WORK/many-$n.f.rounds"
        else
            echo "$g_rss_c $rss_i $pss $cpu_a $cpu_i $ctx $p99 $lines $((total + appended - lines))" >>"$WORK/many-$n.g.rounds"
        fi
    done
    # The lines this round's sink must hold, kept per N and per round: each round's session is
    # generated from its own seed, so the rounds' counts differ, and each round is judged by its
    # own (the last column of its figures: how many of them did not arrive). One count for
    # every N was the last N's by the time the table printed; one for every round, the last
    # round's, which a median of the rounds' lines could miss by a few dozen either way.
    echo $((total + appended)) >>"$WORK/many-$n.expect"
    stop_pid "$sup_pid"
    ((fb_pid)) && stop_pid "$fb_pid"
    ((fg_pid)) && stop_pid "$fg_pid"
    stop_pid "$sink_s"
    [[ -n $FLUENT_BIT ]] && stop_pid "$sink_f"
    [[ -n $FLUENT_BIT ]] && stop_pid "$sink_g"
    MANY_ERRORS=$((${MANY_ERRORS:-0} + $(grep -c '"level":"ERROR"\| ERROR ' "$dir/supervise.err" || true)))
    ((KEEP)) || rm -rf "$dir/codex"
}

bench_many() { # n
    local n=$1 r
    : >"$WORK/many-$n.s.rounds" >"$WORK/many-$n.f.rounds" >"$WORK/many-$n.g.rounds"
    mark "many-$n.start"
    for ((r = 0; r < SUP_ROUNDS; r++)); do
        log "many files: $n children, round $((r + 1)) of $SUP_ROUNDS (supervise$([[ -n $FLUENT_BIT ]] && echo " beside Fluent Bit, 1 s and $FB_FAST_FLUSH s flush"))"
        bench_many_round "$n" "$r"
    done
    mark "many-$n.end"
}

# Median of column K of a rounds file ("nan" when empty).
col() { awk -v k="$2" '{print $k}' "$1" | median; }

# The daemon (docs/behaviour.md S2), as a kcap user runs it: 10 Codex sessions, each watched by a
# stand-in for the kcap CLI's session watcher (`kcap_session watch`: its pid, started and
# heartbeat files, its command line naming the session's rollout, KCAP_URL and CODEX_HOME in
# its environment; nothing given to the daemon but KCAP_CONFIG_DIR). The daemon starts a
# supervisor per session; then 10 sub-agents per session appear one at a time, every
# DAEMON_EVERY_MS (`kcap_session children`: header written in one write, then the rest), each
# timed from its header's write to its key's pid file (the claim). Once every line is at the
# sink, SUP_IDLE s idle (the stand-ins and supervisors beating every key's heartbeat).
# Measured over every kcap-watch process (the daemon and its descendants): utime+stime over
# the idle phase, PSS at its end, and the daemon's own context switches (its wake-ups).
# Context switches of a process's main thread: the daemon's loop (one current-thread runtime)
# runs there, so each is a wake-up of the loop.
loop_ctxt() { awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ {n += $2} END {print n + 0}' /proc/"$1"/task/"$1"/status 2>/dev/null || echo 0; }

bench_daemon() {
    DAEMON_PSS="" DAEMON_CPU="" DAEMON_WHY=""
    mark daemon.start
    if ! "$BIN" daemon --help >/dev/null 2>&1; then
        DAEMON_WHY="no \`kcap-watch daemon\` command in this build"
        log "the machine: $DAEMON_WHY, skipped"
        return 0
    fi
    local dir=$WORK/daemon s total=0 pid pids p t0 t1 d0 d1 x0 x1 l0 l1 key day_dir n_sup
    local -a standins=() staged=() sessions=()
    log "the machine: daemon, 10 sessions (each under a kcap CLI stand-in) x 10 sub-agents appearing one at a time"
    mkdir -p "$dir/cfg"
    : >"$dir/staged.list"
    for ((s = 0; s < 10; s++)); do
        make_session "$dir" 10 $((700 + s)) "$dir/staged"
        total=$((total + SUP_KID_LINES))
        sessions+=("$SUP_SESSION")
        # Child i of every session before child i+1 of any: sessions' sub-agents interleave.
        for ((p = 0; p < ${#SUP_KIDS[@]}; p++)); do echo "$p $s ${SUP_KIDS[p]}" >>"$dir/staged.list"; done
    done
    mapfile -t staged < <(sort -k1,1n -k2,2n "$dir/staged.list" | cut -d' ' -f3-)
    day_dir=$(dirname "$SUP_SESSION")
    start_sink daemon --done-after-lines "$total" --done-file "$dir/done"
    for f in "${sessions[@]}"; do
        key=$(head -n1 "$f" | jq -r .payload.id)
        KCAP_URL=$SINK_URL KCAP_CONFIG_DIR=$dir/cfg CODEX_HOME=$dir/codex \
            "$KSESSION" watch "$key" "$f" >>"$dir/standins.out" 2>&1 &
        standins+=($!)
        PIDS+=($!)
    done
    cmd "KCAP_URL=<sink> KCAP_CONFIG_DIR=<tmp> CODEX_HOME=<CODEX_HOME> $KSESSION watch <session id> <session rollout>   # x10: the kcap CLI's session watcher (pid, started, heartbeat every 10 s)"
    cmd "KCAP_CONFIG_DIR=<tmp> $BIN daemon   # started after the stand-ins, before any sub-agent"
    KCAP_CONFIG_DIR=$dir/cfg KCAP_LOG=info "$BIN" daemon >"$dir/daemon.out" 2>"$dir/daemon.err" &
    pid=$!
    PIDS+=("$pid")
    # Every session's supervisor up (its status file written) before the first sub-agent.
    local deadline=$(($(now_us) + 60000000))
    while :; do
        n_sup=$( (find "$dir/cfg/kcap-watch/status" -name '*.supervise.json' 2>/dev/null || true) | wc -l)
        ((n_sup >= 10)) && break
        if (($(now_us) > deadline)) || ! kill -0 "$pid" 2>/dev/null; then
            DAEMON_WHY="$n_sup of 10 supervisors started within 60 s (see $dir/daemon.err)"
            log "the machine: $DAEMON_WHY"
            tail -n 20 "$dir/daemon.err" >&2 || true
            break
        fi
        sleep 0.1
    done
    if [[ -z $DAEMON_WHY ]]; then
        sleep 2
        cmd "$KSESSION children --watchers <tmp>/watchers --into <CODEX_HOME>/sessions/<today> --every-ms $DAEMON_EVERY_MS <100 staged sub-agent rollouts, $SUP_CHILD_SIZE each>   # header written -> <session>-<child>.pid, per child"
        "$KSESSION" children --watchers "$dir/cfg/watchers" --into "$day_dir" --every-ms "$DAEMON_EVERY_MS" \
            "${staged[@]}" >"$dir/claims.txt"
        awk '$2 != "timeout" {print $2}' "$dir/claims.txt" >"$dir/claims.ms"
        DAEMON_CLAIMED=$(wc -l <"$dir/claims.ms")
        DAEMON_CLAIM_MED=$(median <"$dir/claims.ms")
        DAEMON_CLAIM_MAX=$(sort -g "$dir/claims.ms" | tail -1)
        if ! wait_for_file "$dir/done" 180; then
            DAEMON_WHY="not every line at the sink within 180 s ($(curl -fsS "$SINK_URL/stats" | jq .lines) of $total)"
        fi
    fi
    DAEMON_LINES=$(curl -fsS "$SINK_URL/stats" | jq .lines)
    DAEMON_TOTAL=$total
    # The yardstick ("idle, it costs no more than one idle `watch`"): one `watch` of a shipped
    # child, its own config directory, the same sink (which answers its watermark), idle in
    # the same window.
    local wpid=0 w0 w1 wl0 wl1 c0 c1
    if [[ -z $DAEMON_WHY ]]; then
        cmd "KCAP_URL=<sink> KCAP_CONFIG_DIR=<tmp 2> $BIN watch <a shipped sub-agent's rollout> ${WATCH_FLAGS[*]}   # one idle watch beside the daemon, the yardstick"
        KCAP_URL=$SINK_URL KCAP_CONFIG_DIR=$dir/watch-cfg KCAP_LOG=info \
            "$BIN" watch "$day_dir/$(basename "${staged[0]}")" "${WATCH_FLAGS[@]}" >"$dir/watch.out" 2>"$dir/watch.err" &
        wpid=$!
        PIDS+=("$wpid")
        wait_for_grep "resume at line" "$dir/watch.err" 60 || wpid=0
    fi
    sleep "${DAEMON_SETTLE:-5}"
    # Every kcap-watch process: the daemon and its descendants (the detached supervisors are
    # still its children).
    descendants() { local q; echo "$1"; for q in $(pgrep -P "$1"); do descendants "$q"; done; }
    pids=$(descendants "$pid")
    # On-CPU time of every thread (schedstat, nanoseconds): the ticks of /proc/PID/stat
    # round each of eleven processes to 10 ms, as large as the whole target.
    t0=0
    for p in $pids; do t0=$((t0 + $(cpu_ns "$p"))); done
    d0=$(cpu_ns "$pid") x0=$(sup_ctxt "$pid") l0=$(loop_ctxt "$pid")
    ((wpid)) && w0=$(cpu_ns "$wpid") wl0=$(loop_ctxt "$wpid")
    sleep "$SUP_IDLE"
    d1=$(cpu_ns "$pid") x1=$(sup_ctxt "$pid") l1=$(loop_ctxt "$pid")
    ((wpid)) && w1=$(cpu_ns "$wpid") wl1=$(loop_ctxt "$wpid")
    pids=$(descendants "$pid")
    t1=0
    for p in $pids; do t1=$((t1 + $(cpu_ns "$p"))); done
    DAEMON_CPU=$(awk -v a="$t0" -v b="$t1" -v s="$SUP_IDLE" 'BEGIN {printf "%.3f", (b - a) / 1e9 * 60 / s}')
    per_min() { awk -v a="$1" -v b="$2" -v s="$SUP_IDLE" -v d="$3" 'BEGIN {printf "%." d "f", (b - a) * 60 / s}'; }
    DAEMON_OWN_CPU=$(per_min "$d0" "$d1" 0)
    DAEMON_OWN_CPU=$(awk -v n="$DAEMON_OWN_CPU" 'BEGIN {printf "%.3f", n / 1e9}')
    DAEMON_WATCH_CPU="" DAEMON_WATCH_LOOP=""
    if ((wpid)); then
        DAEMON_WATCH_CPU=$(awk -v n="$(per_min "$w0" "$w1" 0)" 'BEGIN {printf "%.3f", n / 1e9}')
        DAEMON_WATCH_LOOP=$(per_min "$wl0" "$wl1" 0)
        stop_pid "$wpid"
    fi
    DAEMON_CTX=$(per_min "$x0" "$x1" 0)
    DAEMON_LOOP_CTX=$(per_min "$l0" "$l1" 0)
    DAEMON_PSS=$(for p in $pids; do pss_kib "$p"; done | awk '{t += $1} END {print t + 0}')
    DAEMON_PROCS=$(wc -w <<<"$pids")
    DAEMON_ERRORS=$(cat "$dir/daemon.err" "$dir"/cfg/logs/*.log 2>/dev/null | grep -c '"level":"ERROR"\| ERROR ' || true)
    mark daemon.end
    stop_pid "$pid"
    for p in "${standins[@]}"; do stop_pid "$p"; done
    stop_pid "$SINK_PID"
    ((KEEP)) || rm -rf "$dir/codex" "$dir/staged"
}

holds() { awk "BEGIN {exit !($1)}" 2>/dev/null && echo yes || echo "**no**"; }
# A timing verdict: the highest load over the figure's scenario beside it, and no verdict when
# that was above 1.
verdict() { # load expr: the verdict on expr, or none when the load was over 1
    if awk -v l="$1" 'BEGIN {exit !(l > 1)}'; then
        echo "no verdict (load $1 > 1)"
    else
        echo "$(holds "$2") (load $1)"
    fi
}
r2() { awk -v x="$1" 'BEGIN {printf "%.2f", x}'; }

print_many_table() {
    local n fs ff fg lim
    echo
    echo "many files: one session, N live children ($SUP_CHILD_SIZE each, shipped from line 0 first: the catch-up), $SUP_RATE lines/s to random children for $SUP_ACTIVE s, then $SUP_IDLE s idle; one \`supervise\` and two Fluent Bits ($FB_VERSION; tail over the children's glob -> http; one with its default 1 s flush, one with a $FB_FAST_FLUSH s flush) side by side on the same files, each with its own sink; medians of $SUP_ROUNDS round(s)"
    echo
    echo "| what | N | \`supervise\` | Fluent Bit (1 s flush) | Fluent Bit ($FB_FAST_FLUSH s flush) | target | holds |"
    echo "|---|---|---|---|---|---|---|"
    for n in $SUP_SIZES; do
        fs=$WORK/many-$n.s.rounds ff=$WORK/many-$n.f.rounds fg=$WORK/many-$n.g.rounds
        if ((n <= 50)); then lim=20480; else lim=32768; fi
        local s_rc s_ri s_pss s_ca s_ci s_x s_p s_l s_hb s_th f_rc f_ri f_pss f_ca f_ci f_x f_p f_l
        local g_rc g_ri g_pss g_ca g_ci g_x g_p g_l
        local MANY_EXPECT L
        L=$(load_between "many-$n.start" "many-$n.end")
        MANY_EXPECT=$(paste -sd/ "$WORK/many-$n.expect" 2>/dev/null || echo 0)
        local s_short f_short g_short
        s_short=$(awk '{print $11}' "$fs" | sort -g | tail -1)
        s_rc=$(col "$fs" 1) s_ri=$(col "$fs" 2) s_pss=$(col "$fs" 3) s_ca=$(col "$fs" 4) s_ci=$(col "$fs" 5)
        s_x=$(col "$fs" 6) s_p=$(col "$fs" 7) s_l=$(col "$fs" 8) s_hb=$(awk '{print $9}' "$fs" | sort -g | tail -1) s_th=$(col "$fs" 10)
        if [[ -n $FLUENT_BIT ]]; then
            f_rc=$(col "$ff" 1) f_ri=$(col "$ff" 2) f_pss=$(col "$ff" 3) f_ca=$(col "$ff" 4) f_ci=$(col "$ff" 5)
            f_x=$(col "$ff" 6) f_p=$(col "$ff" 7) f_l=$(col "$ff" 8)
            f_short=$(awk '{print $9}' "$ff" | sort -g | tail -1)
            g_rc=$(col "$fg" 1) g_ri=$(col "$fg" 2) g_pss=$(col "$fg" 3) g_ca=$(col "$fg" 4) g_ci=$(col "$fg" 5)
            g_x=$(col "$fg" 6) g_p=$(col "$fg" 7) g_l=$(col "$fg" 8)
            g_short=$(awk '{print $9}' "$fg" | sort -g | tail -1)
            echo "| lines at the sink (median; the rounds' own counts $MANY_EXPECT), and the most missing in a round | $n | $s_l; $s_short | $f_l; $f_short | $g_l; $g_short | all | $(holds "$s_short <= 0") |"
            echo "| VmRSS after the idle phase | $n | $(mib_of_kib "$s_ri") MiB | $(mib_of_kib "$f_ri") MiB | $(mib_of_kib "$g_ri") MiB | ≤ 0.8× Fluent Bit (1 s) and < $((lim / 1024)) MiB | $(verdict "$L" "$s_ri <= 0.8 * $f_ri && $s_ri < $lim") |"
            echo "| CPU while active, s per minute | $n | $s_ca | $f_ca | $g_ca | ≤ Fluent Bit (1 s) | $(verdict "$L" "$s_ca <= $f_ca") |"
            echo "| CPU while active, per line: against both Fluent Bits | $n | $s_ca | $f_ca (× 2: $(awk -v x="$f_ca" 'BEGIN {printf "%.2f", 2 * x}')) | $g_ca | ≤ Fluent Bit ($FB_FAST_FLUSH s) and ≤ 2× Fluent Bit (1 s) | ≤ $FB_FAST_FLUSH s: $(verdict "$L" "$s_ca <= $g_ca"); ≤ 2× 1 s: $(verdict "$L" "$s_ca <= 2 * $f_ca") |"
            echo "| CPU while idle, s per minute | $n | $s_ci | $f_ci | $g_ci | ≤ Fluent Bit (1 s) | $(verdict "$L" "$s_ci <= $f_ci") |"
            echo "| context switches per appended line | $n | $s_x | $f_x | $g_x | ≤ 2 | $(verdict "$L" "$s_x <= 2") |"
            echo "| append → sink, worst child's p99 | $n | $s_p ms | $f_p ms | $g_p ms | < 10 ms (median of 5 on a quiet machine) | $(verdict "$L" "$s_p < 10") |"
        else
            echo "| lines at the sink (median; the rounds' own counts $MANY_EXPECT), and the most missing in a round | $n | $s_l; $s_short | not built | not built | all | $(holds "$s_short <= 0") |"
            echo "| VmRSS after the idle phase | $n | $(mib_of_kib "$s_ri") MiB | not built | not built | ≤ 0.8× Fluent Bit (1 s) and < $((lim / 1024)) MiB | < $((lim / 1024)) MiB: $(verdict "$L" "$s_ri < $lim"); Fluent Bit: n/a |"
            echo "| CPU while active, s per minute | $n | $s_ca | not built | not built | ≤ Fluent Bit (1 s) | n/a |"
            echo "| CPU while active, per line: against both Fluent Bits | $n | $s_ca | not built | not built | ≤ Fluent Bit ($FB_FAST_FLUSH s) and ≤ 2× Fluent Bit (1 s) | n/a |"
            echo "| CPU while idle, s per minute | $n | $s_ci | not built | not built | ≤ Fluent Bit (1 s) | n/a |"
            echo "| context switches per appended line | $n | $s_x | not built | not built | ≤ 2 | $(verdict "$L" "$s_x <= 2") |"
            echo "| append → sink, worst child's p99 | $n | $s_p ms | not built | not built | < 10 ms (median of 5 on a quiet machine) | $(verdict "$L" "$s_p < 10") |"
        fi
        echo "| VmRSS 3 s after the catch-up → after the idle phase | $n | $(mib_of_kib "$s_rc") → $(mib_of_kib "$s_ri") MiB | $([[ -n $FLUENT_BIT ]] && echo "$(mib_of_kib "$f_rc") → $(mib_of_kib "$f_ri") MiB" || echo "not built") | $([[ -n $FLUENT_BIT ]] && echo "$(mib_of_kib "$g_rc") → $(mib_of_kib "$g_ri") MiB" || echo "not built") | within 2 MiB | $(verdict "$L" "$s_rc - $s_ri <= 2048 && $s_ri - $s_rc <= 2048") |"
        echo "| PSS after the idle phase; threads | $n | $(mib_of_kib "$s_pss") MiB; $s_th | $([[ -n $FLUENT_BIT ]] && echo "$(mib_of_kib "$f_pss") MiB" || echo "not built") | $([[ -n $FLUENT_BIT ]] && echo "$(mib_of_kib "$g_pss") MiB" || echo "not built") | — | — |"
        echo "| oldest heartbeat file seen (every 1 s through the idle phase) | $n | $s_hb s | — | — | ≤ 15 s (rewritten at least every 10 s) | $(holds "$s_hb <= 15 && $s_hb > 0") |"
    done
    echo "| ERROR log lines (supervise, every round) | | ${MANY_ERRORS:-0} | — | — | 0 | $(holds "${MANY_ERRORS:-0} == 0") |"
    echo
    echo "(CPU from /proc/PID/stat at $CLK_TCK ticks/s, scaled to a minute; context switches from the threads alive at each snapshot; latency: each appended line carries its write time, the sink logs its arrival.)"
}

print_daemon_table() {
    echo
    echo "the machine: the daemon, 10 Codex sessions each under a stand-in for the kcap CLI's session watcher (examples/kcap_session.rs), 10 sub-agents per session appearing one every $DAEMON_EVERY_MS ms ($SUP_CHILD_SIZE each), all shipped, then ${DAEMON_SETTLE:-5} s settling and $SUP_IDLE s idle"
    echo
    echo "| what | daemon | target | holds |"
    echo "|---|---|---|---|"
    local L
    L=$(load_between daemon.start daemon.end)
    if [[ -z $DAEMON_CPU ]]; then
        echo "| every kcap-watch process | n/a ($DAEMON_WHY) | — | n/a |"
        return 0
    fi
    [[ -n $DAEMON_WHY ]] && echo "| **scenario incomplete** | $DAEMON_WHY | — | **no** |"
    echo "| lines at the sink (of $DAEMON_TOTAL) | $DAEMON_LINES | all | $(holds "$DAEMON_LINES >= $DAEMON_TOTAL") |"
    if [[ -n ${DAEMON_CLAIM_MED:-} && $DAEMON_CLAIM_MED != nan ]]; then
        echo "| sub-agent header written → its key claimed (\`<session>-<child>.pid\`), $DAEMON_CLAIMED of 100 claimed | median $(r2 "$DAEMON_CLAIM_MED") ms, max $(r2 "$DAEMON_CLAIM_MAX") ms | 100 ms | median $(verdict "$L" "$DAEMON_CLAIM_MED <= 100"), max $(verdict "$L" "$DAEMON_CLAIM_MAX <= 100"); all claimed $(holds "$DAEMON_CLAIMED >= 100") |"
    fi
    echo "| total PSS of every kcap-watch process ($DAEMON_PROCS: the daemon and its supervisors), idle | $(mib_of_kib "$DAEMON_PSS") MiB | < 60 MiB | $(verdict "$L" "$DAEMON_PSS < 61440") |"
    echo "| total idle CPU of every kcap-watch process, s per minute (on-CPU time of every thread) | $DAEMON_CPU | < 0.1 | $(verdict "$L" "$DAEMON_CPU < 0.1") |"
    if [[ -n $DAEMON_WATCH_CPU ]]; then
        echo "| the daemon alone while idle: CPU s per minute; its loop's wake-ups (main thread context switches) per minute; all its threads' | $DAEMON_OWN_CPU; $DAEMON_LOOP_CTX; $DAEMON_CTX | ≤ one idle \`watch\` in the same window: $DAEMON_WATCH_CPU s; $DAEMON_WATCH_LOOP wake-ups | CPU $(verdict "$L" "$DAEMON_OWN_CPU <= $DAEMON_WATCH_CPU"); wake-ups $(verdict "$L" "$DAEMON_LOOP_CTX <= $DAEMON_WATCH_LOOP") |"
    else
        echo "| the daemon alone while idle: CPU s per minute; its loop's wake-ups (main thread context switches) per minute; all its threads' | $DAEMON_OWN_CPU; $DAEMON_LOOP_CTX; $DAEMON_CTX | ≤ one idle \`watch\` (not measured) | n/a |"
    fi
    echo "| ERROR log lines (daemon and supervisors) | $DAEMON_ERRORS | 0 | $(holds "$DAEMON_ERRORS == 0") |"
}

if ((SUPERVISE_ONLY)); then
    ((DAEMON_ONLY)) || for n in $SUP_SIZES; do bench_many "$n"; done
    bench_daemon
    echo
    echo "kcap-watch $( ((DAEMON_ONLY)) && echo "daemon" || echo "many-files") performance, $(date -u +%Y-%m-%dT%H:%MZ), commit $REV$( ((QUICK)) && echo ', QUICK mode')"
    echo "machine: $MACHINE"
    echo "load average (1/5/15 min) at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine shares its 2 cores)"
    ((DAEMON_ONLY)) || print_many_table
    print_daemon_table
    echo
    echo "Commands run (from $ROOT):"
    for c in "${CMDS[@]}"; do echo "  $c"; done
    exit 0
fi
# === end of the many-files scenarios ==========================================================

# --- the corpus -----------------------------------------------------------------------------

BIG=$WORK/rollout-big.jsonl
log "generating a $SIZE rollout"
cmd "$GEN --size $SIZE --seed 7 --role child --end open --out $BIG"
"$GEN" --size "$SIZE" --seed 7 --role child --end open --out "$BIG"
BIG_BYTES=$(stat -c %s "$BIG")
BIG_LINES=$(wc -l <"$BIG")
cat "$BIG" >/dev/null # warm the page cache
log "corpus: $(mb_of "$BIG_BYTES") MiB, $BIG_LINES lines"

mark single.start
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
# CPU (user + sys) too: on a shared machine it moves less than wall time.
SEED_OURS_CPU=$(cut -d' ' -f2 "$WORK/seed.inspect" | median)
SEED_WC_CPU=$(cut -d' ' -f2 "$WORK/seed.wc" | median)
SEED_BASE_CPU=$(cut -d' ' -f2 "$WORK/seed.base" | median)

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
cmd "$GEN append $BIG --count 1 --first-seq 0   # the first line (rule compilation), measured apart"
cmd "$GEN append $BIG --count $CPU_SECS --interval 1s --first-seq 1"
cmd "bash -c 'for ((i = 0; i < $CPU_SECS; i++)); do wc -l < $BIG > /dev/null; sleep 1; done'   # baseline, under /usr/bin/time, alongside"
# The first shipped line compiles the redaction rules (a one-time cost, docs/behaviour.md S5): it is
# appended and measured on its own, then the other CPU_SECS lines at one a second.
c0=$(cpu_ns "$FOLLOW_PID")
[[ -n $BASE_BIN ]] && b0=$(cpu_ns "$FOLLOW_BASE_PID")
"$GEN" append "$BIG" --count 1 --interval 1s --first-seq 0
deadline=$(($(now_us) + 20000000))
until grep -q '^0 ' "$WORK/follow.lat" 2>/dev/null && { [[ -z $BASE_BIN ]] || grep -q '^0 ' "$WORK/follow-base.lat" 2>/dev/null; }; do
    (($(now_us) > deadline)) && break
    sleep 0.05
done
sleep 0.5
cf=$(cpu_ns "$FOLLOW_PID")
[[ -n $BASE_BIN ]] && bf=$(cpu_ns "$FOLLOW_BASE_PID")
/usr/bin/time -f '%U %S' -o "$WORK/reread.time" \
    bash -c 'for ((i = 0; i < $1; i++)); do wc -l <"$0" >/dev/null; sleep 1; done' "$BIG" "$CPU_SECS" &
REREAD_PID=$!
"$GEN" append "$BIG" --count "$CPU_SECS" --interval 1s --first-seq 1
wait "$REREAD_PID"
sleep 1
c1=$(cpu_ns "$FOLLOW_PID")
FOLLOW_FIRST_MS=$(awk -v a="$c0" -v b="$cf" 'BEGIN {printf "%.1f", (b-a)/1e6}')
FOLLOW_CPU_MS=$(awk -v a="$cf" -v b="$c1" 'BEGIN {printf "%.1f", (b-a)/1e6}')
if [[ -n $BASE_BIN ]]; then
    b1=$(cpu_ns "$FOLLOW_BASE_PID")
    FOLLOW_BASE_FIRST_MS=$(awk -v a="$b0" -v b="$bf" 'BEGIN {printf "%.1f", (b-a)/1e6}')
    FOLLOW_BASE_CPU_MS=$(awk -v a="$bf" -v b="$b1" 'BEGIN {printf "%.1f", (b-a)/1e6}')
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
: >"$WORK/thru.ours" >"$WORK/thru.ship" >"$WORK/thru.cat" >"$WORK/thru.busy" >"$WORK/thru.busy.cpumb" >"$WORK/thru.busy.hwm"
: >"$WORK/thru.base" >"$WORK/thru.baseship" >"$WORK/thru.basebusy" >"$WORK/thru.basebusy.cpumb" >"$WORK/thru.basebusy.hwm"
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
    local c
    c=$(cpu_ns "$WATCHER_PID")
    awk -v c="$c" -v t0="$t0" -v l="$last_ns" 'BEGIN {printf "%.2f\n", (c/1e9) / ((l/1000 - t0)/1e6)}' >>"$4"
    # CPU milliseconds per shipped MiB, and the peak resident size (VmHWM) of the whole run.
    awk -v c="$c" -v b="$THRU_BYTES" 'BEGIN {printf "%.2f\n", (c/1e6) / (b/1048576)}' >>"$4.cpumb"
    awk '/^VmHWM:/ {print $2}' /proc/"$WATCHER_PID"/status >>"$4.hwm"
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
fb_ship_once() {
    rm -f "$WORK/thru.done"
    start_sink "thrufb$i" --done-after-lines "$THRU_LINES" --done-file "$WORK/thru.done"
    t0=$(now_us)
    start_fluent_bit thrufb "$BIG"
    wait_for_file "$WORK/thru.done" 900
    read -r last_ns < <(jq -r '.last_ns' "$WORK/thru.done")
    awk -v b="$THRU_BYTES" -v t0="$t0" -v l="$last_ns" 'BEGIN {printf "%.1f\n", b/1048576 / ((l/1000 - t0)/1e6)}' >>"$WORK/thru.fb"
    awk -v c="$(cpu_ns "$FB_PID")" -v b="$THRU_BYTES" 'BEGIN {printf "%.2f\n", (c/1e6) / (b/1048576)}' >>"$WORK/thru.fb.cpumb"
    awk '/^VmHWM:/ {print $2}' /proc/"$FB_PID"/status >>"$WORK/thru.fb.hwm"
    stop_pid "$FB_PID"
    stop_pid "$SINK_PID"
}
: >"$WORK/thru.fb" >"$WORK/thru.fb.cpumb" >"$WORK/thru.fb.hwm"
if [[ -n $FLUENT_BIT ]]; then
    cmd "$FLUENT_BIT -c thrufb.fb.conf   # x$RUNS: tail $BIG from the head -> http json_lines to the sink's /records (config: benches/compare.sh start_fluent_bit)"
    for ((i = 0; i < RUNS; i++)); do fb_ship_once; done
fi
THRU_OURS=$(median <"$WORK/thru.ours")
THRU_CPUMB=$(median <"$WORK/thru.busy.cpumb")
THRU_HWM=$(sort -g "$WORK/thru.busy.hwm" | tail -1)
THRU_BASE_CPUMB=$(median <"$WORK/thru.basebusy.cpumb" 2>/dev/null || echo nan)
THRU_BASE_HWM=$(sort -g "$WORK/thru.basebusy.hwm" 2>/dev/null | tail -1)
THRU_FB=$(median <"$WORK/thru.fb")
THRU_FB_CPUMB=$(median <"$WORK/thru.fb.cpumb")
THRU_FB_HWM=$(sort -g "$WORK/thru.fb.hwm" | tail -1)
THRU_SHIP=$(median <"$WORK/thru.ship")
THRU_CAT=$(median <"$WORK/thru.cat")
THRU_BASE=$(median <"$WORK/thru.base")
THRU_BASE_SHIP=$(median <"$WORK/thru.baseship")

mark single.end
for n in $SUP_SIZES; do bench_many "$n"; done # the many-files scenarios (defined above)
bench_daemon

# --- the table ------------------------------------------------------------------------------

SEED_RATIO=$(awk -v a="$SEED_OURS" -v b="$SEED_WC" 'BEGIN {printf "%.2f", a/b}')
JQ_RATIO=$(awk -v a="$SEED_OURS" -v b="$SEED_JQ" 'BEGIN {printf "%.1f", b/a}')
CPU_PCT=$(awk -v a="$FOLLOW_CPU_MS" -v b="$REREAD_CPU_MS" 'BEGIN {printf "%.2f", 100*a/b}')
SIZE_MB=$(mb_of "$BIG_BYTES")

# The "before" column: the baseline build's figure, or a dash without --baseline.
L=$(load_between single.start single.end)
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
SEED_CPU_RATIO=$(awk -v a="$SEED_OURS_CPU" -v b="$SEED_WC_CPU" 'BEGIN {printf "%.2f", (b > 0) ? a/b : 0}')
SEED_BASE_CPU_RATIO=$(awk -v a="${SEED_BASE_CPU:-0}" -v b="$SEED_WC_CPU" 'BEGIN {printf "%.2f", (b > 0) ? a/b : 0}')
echo "| seed a $SIZE_MB MiB rollout, warm cache (\`inspect --json\`) | $(r2 "$SEED_OURS") s = $SEED_RATIO× \`wc -l\` (CPU $SEED_OURS_CPU s = $SEED_CPU_RATIO×), $JQ_RATIO× faster than \`jq\` (max RSS $(mib_of_kib "$SEED_OURS_RSS") MiB) | $(before "$(r2 "$SEED_BASE") s = $SEED_BASE_RATIO× \`wc -l\` (CPU $SEED_BASE_CPU s = $SEED_BASE_CPU_RATIO×), $JQ_BASE_RATIO× faster than \`jq\` (max RSS $(mib_of_kib "$SEED_BASE_RSS") MiB)") | \`wc -l\` $(r2 "$SEED_WC") s (CPU $SEED_WC_CPU s); \`jq\` fold $(r2 "$SEED_JQ") s (median of $JQ_RUNS; max RSS $(mib_of_kib "$SEED_JQ_RSS") MiB) | ≤ 2× \`wc -l\` (round 3); ≥ 12× faster than \`jq\` | wall $(verdict "$L" "$SEED_RATIO <= 2"), CPU $(verdict "$L" "$SEED_CPU_RATIO <= 2"); $(verdict "$L" "$JQ_RATIO >= 12") |"
echo "| notice 1 appended line/s on the $SIZE_MB MiB file: the first line (compiles the redaction rules, one-time), then $CPU_SECS lines | CPU first line $FOLLOW_FIRST_MS ms; then $FOLLOW_CPU_MS ms = $CPU_PCT % of re-reading ($FOLLOW_GOT lines shipped) | $(before "CPU first line $FOLLOW_BASE_FIRST_MS ms; then $FOLLOW_BASE_CPU_MS ms = $CPU_BASE_PCT %") | re-read with \`wc -l\` every second: $REREAD_CPU_MS ms | per-line CPU ≤ round 1's (round 3; needs --baseline dfbcf0f); ≤ 1 % | $([[ -n $BASE_BIN ]] && verdict "$L" "$FOLLOW_CPU_MS <= $FOLLOW_BASE_CPU_MS" || echo "n/a (no --baseline)"); $(verdict "$L" "$CPU_PCT <= 1") |"
echo "| append → line at the loopback sink, $LAT_N appends every $LAT_INTERVAL (both watchers at once) | p50 $(r2 "$LAT_P50") ms, p99 $(r2 "$LAT_P99") ms (max $(r2 "$LAT_MAX"); $LAT_GOT arrived) | $(before "p50 $(r2 "${LAT_BASE_P50:-0}") ms, p99 $(r2 "${LAT_BASE_P99:-0}") ms (max $(r2 "${LAT_BASE_MAX:-0}"); ${LAT_BASE_GOT:-0} arrived)") | \`tail -F\`: p50 $(r2 "$TAIL_P50") ms, p99 $(r2 "$TAIL_P99") ms | p50 ≤ 20 ms, p99 ≤ 100 ms | $(verdict "$L" "$LAT_P50 <= 20 && $LAT_P99 <= 100 && $LAT_GOT >= $LAT_N") |"
idle_cell() { # phase
    local p=$1 alive cpu rmed rmax pmed pmax
    alive=IDLE_${p}_ALIVE cpu=IDLE_${p}_CPU rmed=IDLE_${p}_RSS_MED rmax=IDLE_${p}_RSS_MAX
    pmed=IDLE_${p}_PSS_MED pmax=IDLE_${p}_PSS_MAX
    echo "CPU ${!cpu} s ($((${!alive})) alive); VmRSS median $(mib_of_kib "${!rmed}"), max $(mib_of_kib "${!rmax}") MiB; PSS median $(mib_of_kib "${!pmed}"), max $(mib_of_kib "${!pmax}") MiB"
}
idle_row() { # phase label
    local p=$1 alive cpu rmax pmax
    alive=IDLE_${p}_ALIVE cpu=IDLE_${p}_CPU rmax=IDLE_${p}_RSS_MAX pmax=IDLE_${p}_PSS_MAX
    local lim=${3:-10240}
    echo "| idle: $IDLE_N watchers $2, $IDLE_SECS s | $(idle_cell "$p") | $(before "$(idle_cell "base_$p")") | — | CPU ≤ 0.2 s total; VmRSS ≤ $((lim / 1024)) MiB each | CPU $(verdict "$L" "${!cpu} <= 0.2 && ${!alive} == $IDLE_N"); VmRSS $(verdict "$L" "${!rmax} <= $lim"); PSS $(verdict "$L" "${!pmax} <= $lim") |"
}
idle_row b "after seeding $IDLE_SIZE each (restarted; the server held every line)"
idle_row a "after shipping $IDLE_SIZE each from line 0" 8192
echo "| throughput: ship all $BIG_LINES lines from line 0 (redaction rules in place) | $THRU_OURS MB/s spawn → last line (shipping alone $THRU_SHIP MB/s) | $(before "$THRU_BASE MB/s (shipping alone $THRU_BASE_SHIP MB/s)") | \`cat > /dev/null\` $THRU_CAT MB/s; Fluent Bit $([[ -n $FLUENT_BIT ]] && echo "$THRU_FB MB/s" || echo "not built") | ≥ round 1 (round 3; needs --baseline dfbcf0f); ≥ 100 MB/s | $([[ -n $BASE_BIN ]] && verdict "$L" "$THRU_OURS >= $THRU_BASE" || echo "n/a (no --baseline)"); $(verdict "$L" "$THRU_OURS >= 100") |"
if [[ -n $FLUENT_BIT ]]; then
    CPUMB_TARGET="≤ Fluent Bit's (round 3)" CPUMB_HOLDS=$(verdict "$L" "$THRU_CPUMB <= $THRU_FB_CPUMB")
elif [[ -n $BASE_BIN ]]; then
    CPUMB_TARGET="≤ Fluent Bit's; Fluent Bit not built, so ≤ round 1's (round 3)" CPUMB_HOLDS=$(verdict "$L" "$THRU_CPUMB <= $THRU_BASE_CPUMB")
else
    CPUMB_TARGET="≤ Fluent Bit's (round 3)" CPUMB_HOLDS="n/a (neither Fluent Bit nor --baseline)"
fi
echo "| CPU per shipped MiB (watcher, all threads) | $THRU_CPUMB ms | $(before "$THRU_BASE_CPUMB ms") | Fluent Bit $([[ -n $FLUENT_BIT ]] && echo "$THRU_FB_CPUMB ms (tail → http, same bytes, no redaction)" || echo "not built") | $CPUMB_TARGET | $CPUMB_HOLDS |"
echo "| peak RSS (VmHWM) while shipping the $SIZE_MB MiB file | $(mib_of_kib "$THRU_HWM") MiB | $(before "$(mib_of_kib "${THRU_BASE_HWM:-0}") MiB") | Fluent Bit $([[ -n $FLUENT_BIT ]] && echo "$(mib_of_kib "$THRU_FB_HWM") MiB" || echo "not built") | < 24 MiB (round 3) | $(verdict "$L" "$THRU_HWM < 24576") |"
echo
echo "(MB = MiB = 2^20 bytes. CPU is the scheduler's per-thread accounting (/proc/PID/task/*/schedstat); baselines' CPU and max RSS come from /usr/bin/time.)"
print_many_table
print_daemon_table
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
[[ -n $FLUENT_BIT ]] && echo "  Fluent Bit MB/s (spawn→last): $(tr '\n' ' ' <"$WORK/thru.fb"); CPU ms/MiB: $(tr '\n' ' ' <"$WORK/thru.fb.cpumb")"
echo "  ours CPU ms/MiB: $(tr '\n' ' ' <"$WORK/thru.busy.cpumb"); VmHWM KiB: $(tr '\n' ' ' <"$WORK/thru.busy.hwm")"
echo "  inspect --json CPU s: $(cut -d' ' -f2 "$WORK/seed.inspect" | tr '\n' ' '); wc -l CPU s: $(cut -d' ' -f2 "$WORK/seed.wc" | tr '\n' ' ')"
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
