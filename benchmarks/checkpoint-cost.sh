#!/usr/bin/env bash
# The cost of checkpointing to a job's throughput, measured in side-by-side pairs.
#
# Each pair starts two runs of `weir bench nexmark` (or `keyed-count`) at the same moment, one
# with checkpointing setting A and one with B, so that both share the machine for the same
# seconds: whatever else the machine does slows both alike. Each run gets about one core, so
# throughput per core (events / CPU seconds of its process) is what compares. Which of the two
# starts first alternates from pair to pair. The cost of a pair is B / A - 1; the summary gives
# the mean with a 95 % confidence interval (Student's t), the median and the range.
#
# Setting A against itself (`--b off` with `--a off`) measures the method's own bias and spread.
#
# With `--alternate PHASE`, each pair is instead two runs of `weir bench … --alternate PHASE`
# started together, in opposite step (the second with `--alternate-on-first`): within each run,
# phases with checkpoints every B alternate with phases without, and at every moment one run
# checkpoints while the other does not. For each pair of phases the cost is the geometric mean
# of the two runs' changes, which cancels both the difference between the two processes and
# the machine's change of speed from one phase to the next. `--control` triggers no checkpoints
# in either phase: the method's own bias and spread.
#
# Usage: benchmarks/checkpoint-cost.sh [--query q4] [--pairs 24] [--seconds 20]
#            [--a off] [--b 1s] [--binary target/release/weir]
#        benchmarks/checkpoint-cost.sh --alternate 5s [--control] [--query q4] [--pairs 1]
#            [--seconds 300] [--b 1s] [--binary target/release/weir]
# `--query keyed-count` runs `weir bench keyed-count --keys 100000` for the same seconds.
set -euo pipefail

query=q4
pairs=
seconds=
a=off
b=1s
binary=target/release/weir
alternate=
control=

usage() {
    sed -n 's/^# \{0,1\}//; /^Usage:/,/same seconds/p' "$0" >&2
    exit 2
}
fail() {
    echo "checkpoint-cost: $*" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    if [ "$1" = --control ]; then
        control=--alternate-control
        shift
        continue
    fi
    [ $# -ge 2 ] || { echo "checkpoint-cost: $1 needs a value" >&2; usage; }
    case "$1" in
    --alternate) alternate=$2 ;;
    --query) query=$2 ;;
    --pairs) pairs=$2 ;;
    --seconds) seconds=$2 ;;
    --a) a=$2 ;;
    --b) b=$2 ;;
    --binary) binary=$2 ;;
    *) echo "checkpoint-cost: unknown option $1" >&2; usage ;;
    esac
    shift 2
done
if [ -n "$alternate" ]; then
    pairs=${pairs:-1}
    seconds=${seconds:-300}
    [ "$b" != off ] || fail "--alternate needs --b to be a checkpoint interval (use --control for a control)"
else
    pairs=${pairs:-24}
    seconds=${seconds:-20}
    [ -z "$control" ] || fail "--control goes with --alternate (without it, compare --a off with --b off)"
fi

min_pairs=2
[ -z "$alternate" ] || min_pairs=1
[[ $pairs =~ ^[0-9]+$ ]] && [ "$pairs" -ge "$min_pairs" ] || fail "--pairs must be a whole number of at least $min_pairs, not '$pairs'"
[[ $seconds =~ ^[0-9]+$ ]] && [ "$seconds" -ge 1 ] || fail "--seconds must be a whole number of at least 1, not '$seconds'"
[ -x "$binary" ] || fail "no weir binary at '$binary' (build it with: cargo build --release)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One run's command line for checkpointing setting $1 (its checkpoints go to a temporary
# directory of its own, deleted when it ends).
command_for() {
    if [ "$query" = keyed-count ]; then
        echo "$binary bench keyed-count --keys 100000 --parallelism 2 --duration ${seconds}s --checkpoint-interval $1 --json"
    else
        echo "$binary bench nexmark --query $query --parallelism 2 --duration ${seconds}s --checkpoint-interval $1 --json"
    fi
}

# A field of the one-line JSON object a run printed.
field() {
    sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" "$1"
}

run_pair() {
    local n=$1 first second
    if [ $((n % 2)) -eq 1 ]; then first=a; second=b; else first=b; second=a; fi
    local started=$a
    [ "$first" = b ] && started=$b
    local pids=()
    for side in $first $second; do
        local setting=$a
        [ "$side" = b ] && setting=$b
        # shellcheck disable=SC2046 # the command line is split into words on purpose
        $(command_for "$setting") >"$work/$side.json" 2>"$work/$side.log" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || { cat "$work"/*.log >&2; fail "a run of pair $n failed (its log is above)"; }
    done
    local pa pb ca cb
    pa=$(field "$work/a.json" events_per_second_per_core)
    pb=$(field "$work/b.json" events_per_second_per_core)
    ca=$(field "$work/a.json" cores_used)
    cb=$(field "$work/b.json" cores_used)
    [ -n "$pa" ] && [ -n "$pb" ] || fail "pair $n printed no events_per_second_per_core"
    awk -v n="$n" -v f="$started" -v pa="$pa" -v pb="$pb" -v ca="$ca" -v cb="$cb" -v costs="$work/costs" 'BEGIN {
        cost = (pb / pa - 1) * 100
        printf "%3d  %-3s first  %.3f -> %.3f M/s per core  (cores %s, %s)  %+.1f %%\n",
            n, f, pa / 1e6, pb / 1e6, ca, cb, cost
        printf "%.6f\n", cost >>costs
    }'
}

# The per-core throughputs `[off,on]` of each pair of phases of an alternating run, one
# `off on` line each.
phase_pairs() {
    sed -n 's/.*"per_core_off_on":\[\([][0-9,.]*\)\]}.*/\1/p' "$1" | sed 's/\],\[/\n/g; s/[][]//g; s/,/ /g'
}

run_alternating_pair() {
    local n=$1 pids=()
    for side in x y; do
        local step=
        [ "$side" = y ] && step=--alternate-on-first
        # shellcheck disable=SC2046 # the command line is split into words on purpose
        $(command_for "$b") --alternate "$alternate" $control $step >"$work/$side.json" 2>"$work/$side.log" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || { cat "$work"/*.log >&2; fail "a run of pair $n failed (its log is above)"; }
    done
    local fx fy
    fx=$(field "$work/x.json" first_pair_unix_ms)
    fy=$(field "$work/y.json" first_pair_unix_ms)
    if [ -z "$fx" ] || [ "$fx" != "$fy" ]; then
        echo "$n  the two runs did not begin their phases together ($fx, $fy): pair left out"
        return
    fi
    paste -d ' ' <(phase_pairs "$work/x.json") <(phase_pairs "$work/y.json") |
        awk -v n="$n" -v costs="$work/costs" '
            NF == 4 && $1 > 0 && $2 > 0 && $3 > 0 && $4 > 0 {
                c = (sqrt(($2 * $4) / ($1 * $3)) - 1) * 100
                printf "%.6f\n", c >>costs
                k++; s += c
                line = line sprintf(" %+.1f", c)
            }
            END {
                if (k == 0) { print n "  no pair of phases measured"; exit }
                printf "%3d  %d pairs of phases, mean %+.2f %%:%s\n", n, k, s / k, line
            }'
    # Where the CPU went: ns per event by group of threads, without -> with checkpoints.
    for side in x y; do
        sed -n 's/.*"ns_per_event_by_thread_off_on":{\([^}]*\)}.*/\1/p' "$work/$side.json" |
            sed 's/"\([^"]*\)":\[\([0-9.]*\),\([0-9.]*\)\],*/ \1 \2 -> \3;/g; s/ [^ ;]* 0\.0 -> 0\.0;//g; s/^/     ns per event:/'
    done
}

if [ -n "$alternate" ]; then
    what="checkpoints every $b"
    [ -n "$control" ] && what="control (no checkpoints)"
    echo "$query: $pairs pair(s) of ${seconds} s runs in opposite step, phases of $alternate, $what"
    echo "    (each pair of phases: the geometric mean of both runs' change in M events/s per core)"
    for n in $(seq 1 "$pairs"); do
        run_alternating_pair "$n"
    done
    a=off
    [ -n "$control" ] && b="$b (control)"
else
    echo "$query: $pairs pairs of ${seconds} s side by side, A = $a, B = $b"
    echo "    (each pair: A -> B in M events/s per core, the cores each used, the cost B / A - 1)"
    for n in $(seq 1 "$pairs"); do
        run_pair "$n"
    done
fi
[ -s "$work/costs" ] || fail "no pair measured"

unit=
[ -z "$alternate" ] || unit=" of phases"
sort -g "$work/costs" | awk -v q="$query" -v a="$a" -v b="$b" -v unit="$unit" '
    { x[NR] = $1; s += $1 }
    END {
        n = NR; mean = s / n
        if (n < 2) { printf "%s, %s against %s, 1 pair%s: %+.2f %%\n", q, b, a, unit, mean; exit }
        for (i = 1; i <= n; i++) ss += (x[i] - mean) ^ 2
        sd = sqrt(ss / (n - 1))
        # Student t, two-sided 95 %, for n - 1 degrees of freedom (1.96 past 30).
        split("12.71 4.30 3.18 2.78 2.57 2.45 2.36 2.31 2.26 2.23 2.20 2.18 2.16 2.14 2.13 2.12 2.11 2.10 2.09 2.09 2.08 2.07 2.07 2.06 2.06 2.06 2.05 2.05 2.05 2.04", t, " ")
        tq = (n - 1 <= 30) ? t[n - 1] : 1.96
        half = tq * sd / sqrt(n)
        median = (n % 2) ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
        printf "%s, %s against %s, %d pairs%s: mean %+.2f %% (95 %% confidence %+.2f to %+.2f), median %+.2f %%, standard deviation %.2f, range %+.1f to %+.1f %%\n",
            q, b, a, n, unit, mean, mean - half, mean + half, median, sd, x[1], x[n]
    }'
