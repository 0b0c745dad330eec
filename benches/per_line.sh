#!/usr/bin/env bash
# What one line appended to a followed rollout costs a supervisor of N children: a generated
# session of N children (32 KB each), `kcap-watch supervise` shipping to examples/sink_server.rs,
# then LINES lines of 1 KiB appended round-robin to the children every INTERVAL, one per request.
# Prints, per appended line: context switches of every thread, CPU (user and system, from
# /proc at 100 ticks a second: a timing, which the machine's load and speed move) and, with
# --callgrind, user-space instructions (valgrind; counts zeroed once the catch-up settled and
# dumped after the last line: what the load cannot move), or with --strace the system calls.
#
#   benches/per_line.sh [--bin PATH] [--children 50] [--lines 5000] [--interval-us 4000]
#                       [--settle 10] [--callgrind | --strace] [--keep]
#
# --bin:       the kcap-watch binary to measure (default: this tree's dist build without LTO,
#              built first: CARGO_PROFILE_DIST_LTO=false CARGO_PROFILE_DIST_CODEGEN_UNITS=16).
# --settle:    seconds between the supervisor's start and the first appended line (the
#              catch-up of every child's 32 KB; give valgrind 40 or more). Under callgrind the
#              redactor built again after 30 s without a shipped line is part of the count
#              when the settle is longer: subtract `Redactor::new` from the total.
# --callgrind: the instructions' profile is left in the work directory (callgrind.out.*.1;
#              `callgrind_annotate --inclusive=yes` reads it).
#
# Needs bash, jq and valgrind or strace for those modes. docs/performance.md ("twenty-seventh
# pass") has figures it produced.
set -euo pipefail

BIN=""
N=50
LINES=5000
INTERVAL_US=4000
SETTLE=10
MODE=""
KEEP=0
while (($#)); do
    case "$1" in
    --bin) BIN=$2 && shift ;;
    --children) N=$2 && shift ;;
    --lines) LINES=$2 && shift ;;
    --interval-us) INTERVAL_US=$2 && shift ;;
    --settle) SETTLE=$2 && shift ;;
    --callgrind) MODE=callgrind ;;
    --strace) MODE=strace ;;
    --keep) KEEP=1 ;;
    -h | --help)
        sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "per_line.sh: unknown argument $1" >&2
        exit 2
        ;;
    esac
    shift
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
(cd "$ROOT" && CARGO_PROFILE_DIST_LTO=${CARGO_PROFILE_DIST_LTO:-false} \
    CARGO_PROFILE_DIST_CODEGEN_UNITS=${CARGO_PROFILE_DIST_CODEGEN_UNITS:-16} \
    cargo build --profile dist --quiet --bin kcap-watch --example gen_rollout --example sink_server)
BIN=${BIN:-$TARGET/dist/kcap-watch}
GEN=$TARGET/dist/examples/gen_rollout
SINK=$TARGET/dist/examples/sink_server

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kcap-per-line.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if ((KEEP)); then echo "work directory kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# The session and its children, each child's parent id set to the session's thread.
DAY=$WORK/codex/sessions/2026/01/01
mkdir -p "$DAY" "$WORK/cfg"
"$GEN" --size 64KB --seed 901 --role session --end open --out "$WORK/gen.tmp"
ROOT_ID=$(head -n1 "$WORK/gen.tmp" | jq -r .payload.id)
SESSION=$DAY/rollout-2026-01-01T00-00-00-$ROOT_ID.jsonl
mv "$WORK/gen.tmp" "$SESSION"
KIDS=()
for ((i = 0; i < N; i++)); do
    "$GEN" --size 32KB --seed $((901000 + i)) --role child --end open --out "$WORK/gen.tmp"
    id=$(head -n1 "$WORK/gen.tmp" | jq -r .payload.id)
    parent=$(head -n1 "$WORK/gen.tmp" | jq -r .payload.parent_thread_id)
    sed "s/$parent/$ROOT_ID/g" "$WORK/gen.tmp" >"$DAY/rollout-2026-01-01T00-00-01-$id.jsonl"
    KIDS+=("$DAY/rollout-2026-01-01T00-00-01-$id.jsonl")
done
rm -f "$WORK/gen.tmp"

"$SINK" --addr-file "$WORK/addr" --latency-log "$WORK/lat" >"$WORK/sink.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [[ -s $WORK/addr ]] && break; sleep 0.1; done
WRAP=()
[[ $MODE == callgrind ]] && WRAP=(valgrind --tool=callgrind "--callgrind-out-file=$WORK/callgrind.out.%p")
KCAP_URL=$(cat "$WORK/addr") KCAP_CONFIG_DIR=$WORK/cfg KCAP_LOG=info \
    "${WRAP[@]}" "$BIN" supervise "$SESSION" --codex-home "$WORK/codex" \
    --reap-after 10h --idle-end 10h --stall-after 0 --poll-interval 1s \
    >"$WORK/supervise.out" 2>"$WORK/supervise.err" &
SUP=$!
PIDS+=("$SUP")
sleep "$SETTLE"

ctx() { cat /proc/"$SUP"/task/*/status | awk '/^(non)?voluntary_ctxt_switches/ {s += $2} END {print s}'; }
ticks() { awk '{print $14 + 0, $15 + 0}' /proc/"$SUP"/stat; }
[[ $MODE == callgrind ]] && callgrind_control -z "$SUP" >/dev/null
ST=0
if [[ $MODE == strace ]]; then
    strace -f -c -o "$WORK/strace.txt" -p "$SUP" 2>/dev/null &
    ST=$!
    sleep 1
fi
c0=$(ctx)
read -r u0 s0 < <(ticks)
l0=$(wc -l <"$WORK/lat")
"$GEN" append "${KIDS[@]}" --count "$LINES" --interval "${INTERVAL_US}us" --first-seq 700000 >/dev/null
for _ in $(seq 300); do (($(wc -l <"$WORK/lat") - l0 >= LINES)) && break; sleep 0.1; done
sleep 0.5
c1=$(ctx)
read -r u1 s1 < <(ticks)
l1=$(wc -l <"$WORK/lat")
[[ $MODE == callgrind ]] && callgrind_control -d "$SUP" >/dev/null
if ((ST)); then
    kill -INT "$ST"
    wait "$ST" 2>/dev/null || true
fi

echo "children $N, lines appended $LINES every ${INTERVAL_US} us, at the sink $((l1 - l0)); load $(cut -d' ' -f1 /proc/loadavg)"
awk -v c="$((c1 - c0))" -v u="$((u1 - u0))" -v s="$((s1 - s0))" -v n="$LINES" 'BEGIN {
    printf "per line: %.3f context switches; CPU %.1f us (user %.1f, system %.1f)\n",
        c / n, (u + s) * 10000 / n, u * 10000 / n, s * 10000 / n }'
awk '$1 >= 700000 {print $2}' "$WORK/lat" | sort -n |
    awk '{a[NR] = $1} END {if (NR) printf "append -> sink: p50 %d us, p99 %d us\n", a[int(NR * 0.5) + 1], a[int(NR * 0.99) + 1]}'
if [[ $MODE == callgrind ]]; then
    sleep 1
    out=$(ls "$WORK"/callgrind.out.*.1 2>/dev/null | head -n1)
    if [[ -n $out ]]; then
        total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
        rebuilt=$(callgrind_annotate --inclusive=yes "$out" 2>/dev/null |
            awk '/Redactor::new \[/ {gsub(",", "", $1); print $1; exit}')
        awk -v t="$total" -v r="${rebuilt:-0}" -v n="$LINES" 'BEGIN {
            printf "per line: %.1f k instructions (user space; %.1f M of the redactor rebuilt left out)\n",
                (t - r) / n / 1000, r / 1e6 }'
        echo "profile: $out"
        KEEP=1
    fi
fi
if [[ $MODE == strace ]]; then
    awk -v n="$LINES" 'NR > 2 && $NF != "total" && $4 + 0 > 0 {printf "  %-16s %6.2f a line\n", $NF, $4 / n}' "$WORK/strace.txt"
fi
