#!/bin/bash
# A rerun of the committed H200 reference with the reference's own code, in three steps
# (notes/timing.md, "The stage in the refresh of the reference"): `prepare` here, then on the lent
# H200 `launch` in the call that carries DIR/c (after those that stashed the CUDA 13 tree's parts
# DIR/cu1, DIR/cu2, ..., `tools/h200_wheels.sh`), then `wait` in as many calls as it takes. A call
# carries at most 64 MiB with the working tree (24 MB since rerun 4), so DIR/rerun goes with the
# last part's call, which runs `stash` too, and `launch` finds it there; a copy of a run (FROM) can
# make it too large for that (the reference's copy: 11.7 MB), and then it goes in a call of its own.
#     tools/h200_rerun.sh prepare [DIR]                 # here: the code at COMMIT, the run to copy
#     tools/h200_rerun.sh stash [DIR]                   # H200: DIR/rerun into /tmp/stash/rerun
#     tools/h200_rerun.sh launch [DIR]                  # H200: install, unpack, start Snakemake detached
#     tools/h200_rerun.sh wait [SECONDS]                # H200: wait, then pack into $OUT (partial.tgz
#                                                       # while it runs, rerun.tgz once it has ended)
#     tools/h200_rerun.sh start [DIR] [SECONDS]         # H200: launch, then wait until SECONDS (540)
#                                                       # after the call began: one call of 600 s
# COMMIT (default 143f73a: the code the committed reference hashes, 28bb38c's, with that reference in
# its tree, which the run's `compare` reads), FROM (a committed run whose other stages are kept; empty:
# a run from nothing), TO, FORCE (a stage run again in the copy of FROM; empty: none) and CONFIG (more
# `--config` items) may be set in the environment. The defaults are rerun 5 of the reference, the
# whole workflow from nothing, as a user reproducing it runs it; rerun 6 is the same with
# TO=results/h200-rerun-6. Rerun 4 of the reference before (1800db6), its timing stage again in a
# copy of rerun 3:
#     COMMIT=066787365e00cbdbc737f28656696859494cdc0e FROM=results/reruns/h200-rerun-3 \
#         TO=results/h200-rerun-4 FORCE=gpu_timing tools/h200_rerun.sh prepare   # and launch
# The refresh of the reference, the whole workflow at the committed HEAD (about 22 minutes on the H200):
#     COMMIT=$(git rev-parse HEAD) FROM= FORCE= TO=results/reference/nvidia-h200 \
#         CONFIG=overwrite_reference=True tools/h200_rerun.sh prepare        # and the same for launch
set -euo pipefail
COMMIT=${COMMIT:-143f73ad971481f2cdfc21878ced4bb9904ef043}
FROM=${FROM-}
TO=${TO:-results/h200-rerun-5}
FORCE=${FORCE-}
CONFIG=${CONFIG:-}
RUN=/tmp/run
PLAIN=(--configfile examples/contenders.yaml --config "results_dir=$TO" $CONFIG)  # the run's configuration
SNAKE=(--cores all "${PLAIN[@]}")
[ -n "$FORCE" ] && SNAKE+=(--forcerun "$FORCE")
case "${1:-}" in
prepare)
    DIR=${2:-.whl}
    mkdir -p "$DIR/rerun"
    git archive --format=tar.gz "$COMMIT" > "$DIR/rerun/code.tar.gz"
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    tar -xzf "$DIR/rerun/code.tar.gz" -C "$scratch"
    mkdir -p "$scratch/$(dirname "$TO")"
    rm -rf "${scratch:?}/$TO"
    if [ -z "$FROM" ]; then
        mkdir "$scratch/$TO"  # a run from nothing (a refreshed reference: emptied first)
    else
        cp -a "$FROM" "$scratch/$TO"
        # a checkout gives the run's files its own times, in no order: Snakemake's time trigger would
        # read outputs older than their inputs, so they are touched in the order of the workflow
        # first, until nothing is left to do (a touch can leave a job's inputs newer than its outputs)
        for _ in 1 2 3 4 5; do
            (cd "$scratch" && snakemake --cores 1 --touch "${PLAIN[@]}" >/dev/null 2>&1)
            if (cd "$scratch" && snakemake -n "${PLAIN[@]}" 2>&1 | grep -q "Nothing to be done"); then
                break
            fi
        done
    fi
    (cd "$scratch" && snakemake -n "${SNAKE[@]}" | grep -A20 "Job stats")
    tar -czf "$DIR/rerun/run.tgz" -C "$scratch" "$TO"
    du -sh "$DIR/rerun"
    # which call carries DIR/rerun: the last part's, where it fits beside the working tree, counted
    # as the device tool counts it (the disk's blocks: a call of 66.8 MB in bytes was refused), or
    # a call of its own
    kib() { du -sk "$@" | awk '{s += $1} END {print s}'; }
    tree=$(git ls-files -z --cached --others --exclude-standard | du -ck --files0-from=- | tail -1 | cut -f1)
    last=$(ls -d "$DIR"/cu[0-9]* 2>/dev/null | sort -V | tail -1)
    if [ -n "$last" ]; then
        with=$(( tree + $(kib "$last" "$DIR/rerun") ))
        if [ "$with" -le 65536 ]; then
            echo "carry $DIR/rerun with $last (with the tree: $with KiB of 65536), running stash there too"
        else
            echo "carry $DIR/rerun in a call of its own, running stash (with $last and the tree: $with KiB, over 65536)"
        fi
    fi ;;
stash)
    DIR=${2:-.whl}
    mkdir -p /tmp/stash/rerun
    cp "$DIR"/rerun/code.tar.gz "$DIR"/rerun/run.tgz /tmp/stash/rerun/
    ls -la /tmp/stash/rerun ;;
launch)
    DIR=${2:-.whl}
    [ -d /tmp/site/flash_attn ] || bash "$(dirname "$0")/h200_site.sh" "$DIR"
    prepared=$DIR/rerun
    [ -f "$prepared/code.tar.gz" ] || prepared=/tmp/stash/rerun  # stashed by an earlier call
    rm -rf "$RUN" && mkdir "$RUN"
    tar -xzf "$prepared/code.tar.gz" -C "$RUN"
    rm -rf "${RUN:?}/$TO"  # the folder as prepared replaces what the code's tree has there
    tar -xzf "$prepared/run.tgz" -C "$RUN"
    cd "$RUN"
    export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$RUN/src MINIMODEL_GIT_COMMIT=$COMMIT
    export PYTHONUNBUFFERED=1
    python3 -m snakemake -n "${SNAKE[@]}" | grep -A12 "Job stats"
    setsid nohup python3 -m snakemake "${SNAKE[@]}" > "$RUN/snake.log" 2>&1 < /dev/null &
    echo $! > "$RUN/pid"
    sleep 20
    tail -3 "$RUN/snake.log" ;;
start)
    # launch and wait in one call, the wait ending SECONDS (default 540) after this command began,
    # not after the launch: the launch's install and dry run take their own 30-60 s, and a call cut
    # at its limit (600 s) returns only what was packed before it
    DIR=${2:-.whl}
    bash "$0" launch "$DIR"
    bash "$0" wait $(( ${3:-540} - SECONDS )) ;;
wait)
    limit=${2:-560}
    waited=0
    pack() {  # what the run has made so far; renamed into $OUT whole, so a cut call returns the last one
        tar -czf /tmp/partial.tgz -C "$RUN" "$TO" snake.log && mv /tmp/partial.tgz "$OUT/partial.tgz"
    }
    # the PID the launch wrote: a pattern for pgrep would match this command's own line
    while kill -0 "$(cat "$RUN/pid")" 2>/dev/null && [ "$waited" -lt "$limit" ]; do
        sleep 5; waited=$((waited + 5))
        # every minute, so that a lease that ends before the run does (the machine is given back
        # with the session's device time, or 30 s after a call returns) or a call cut at its limit
        # leaves the finished stages behind: a later rerun can start from them (FROM)
        if [ $((waited % 60)) -eq 0 ]; then pack; fi
    done
    tail -25 "$RUN/snake.log"
    if ! kill -0 "$(cat "$RUN/pid")" 2>/dev/null; then
        rm -f "$OUT/partial.tgz"
        tar -czf "$OUT/rerun.tgz" -C "$RUN" "$TO" snake.log .snakemake/log
        head -40 "$RUN/$TO/compare/verdict.json"
    else
        pack
    fi ;;
*)
    sed -n '2,26p' "$0"
    exit 2 ;;
esac
