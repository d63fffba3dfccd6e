#!/bin/bash
# Runs of the workflow queued on the lent H200, one at a time, each with the code of a given commit;
# tools/gpu-machine/README.md gives the whole sequence. Run from the repository root; DIR: .whl.
#   h200_rerun.sh prepare [DIR]          # here: queue a run in DIR/rerun, and say which call carries it
#   h200_rerun.sh stash [DIR]            # H200: DIR/rerun into /tmp/stash/rerun
#   h200_rerun.sh launch [DIR]           # H200: the site where missing, then the queued runs, detached
#   h200_rerun.sh wait [SECONDS]         # H200: wait, packing into $OUT partial.tgz, rerun.tgz once ended
#   h200_rerun.sh start [DIR] [SECONDS]  # H200: launch, then wait until SECONDS (540) after the call began
# `prepare` reads COMMIT (default ed76290, the code of the committed reference), TO (the run's
# folder), FROM (a run whose finished stages are kept: a committed run, or an unpacked partial.tgz's
# DIR/partial/NAME/results/NAME; empty: from nothing), FORCE (a stage run again in the copy of FROM)
# and CONFIG (more `--config` items). Each run goes in /tmp/runs/NAME on the H200. `rm -rf DIR/rerun`
# empties the queue. A whole rerun of the reference; its timing stage again; a refresh of it:
#   TO=results/h200-rerun-N h200_rerun.sh prepare
#   FROM=results/reference/nvidia-h200 TO=results/h200-rerun-N FORCE=gpu_warm h200_rerun.sh prepare
#   COMMIT=$(git rev-parse HEAD) FROM= FORCE= TO=results/reference/nvidia-h200 \
#       CONFIG=overwrite_reference=True h200_rerun.sh prepare
set -euo pipefail
RUNS=/tmp/runs
kib() { du -sk "$@" | awk '{s += $1} END {print s}'; }
plain() {  # the run's configuration (a run's env sourced first)
    PLAIN=(--configfile examples/contenders.yaml --config "results_dir=$TO" $CONFIG)
    SNAKE=(--cores all "${PLAIN[@]}")
    if [ -n "$FORCE" ]; then SNAKE+=(--forcerun "$FORCE"); fi
}
case "${1:-}" in
prepare)
    DIR=${2:-.whl}
    COMMIT=$(git rev-parse "${COMMIT:-ed76290d3223d148fae3b5fd4c049aeade81c283}")
    FROM=${FROM-}
    TO=${TO:?set TO: the run's folder, results/h200-rerun-N or the reference's}
    FORCE=${FORCE-}
    CONFIG=${CONFIG:-}
    NAME=$(basename "$TO")
    plain
    rm -rf "${DIR:?}/rerun/$NAME" && mkdir -p "$DIR/rerun/$NAME"
    code=$DIR/rerun/code-$COMMIT.tar.gz
    # the tree at COMMIT less results/reruns (39 MB in commits before bbcf370; the workflow reads
    # only the reference), so that the queue goes with the last part's call
    [ -f "$code" ] || git archive --format=tar.gz "$COMMIT" -- . ':(exclude)results/reruns' > "$code"
    declare -p COMMIT FROM TO FORCE CONFIG > "$DIR/rerun/$NAME/env"
    grep -qx "$NAME" "$DIR/rerun/queue" 2>/dev/null || echo "$NAME" >> "$DIR/rerun/queue"
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    tar -xzf "$code" -C "$scratch"
    mkdir -p "$scratch/$(dirname "$TO")"
    rm -rf "${scratch:?}/$TO"
    if [ -z "$FROM" ]; then
        mkdir "$scratch/$TO"  # a run from nothing (a refreshed reference: emptied first)
    else
        cp -a "$FROM" "$scratch/$TO"
        # a checkout's file times are in no order, so Snakemake's time trigger would rerun jobs: they
        # are touched in the workflow's order until only FORCE and the missing outputs are left to
        # do (a touch can leave a job's inputs newer than its outputs: a few rounds)
        for _ in 1 2 3 4 5; do
            (cd "$scratch" && snakemake --cores 1 --touch "${PLAIN[@]}" >/dev/null 2>&1) || true
        done
    fi
    (cd "$scratch" && snakemake -n "${SNAKE[@]}" | grep -A20 "Job stats")
    tar -czf "$DIR/rerun/$NAME/run.tgz" -C "$scratch" "$TO"
    echo "queued in $DIR/rerun/queue: $(tr '\n' ' ' < "$DIR/rerun/queue")"
    # which call carries DIR/rerun: the last part's, where it fits beside the working tree, counted
    # as the device tool counts it (the disk's blocks, not bytes), or a call of its own
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
    cp -a "$DIR"/rerun/. /tmp/stash/rerun/
    ls -laR /tmp/stash/rerun | head -20 ;;
launch)
    DIR=${2:-.whl}
    [ -d /tmp/site/flash_attn ] || bash "$(dirname "$0")/h200_site.sh" "$DIR"
    prepared=$DIR/rerun
    [ -f "$prepared/queue" ] || prepared=/tmp/stash/rerun  # stashed by an earlier call
    [ -f "$prepared/queue" ] || { echo "no queued run in $DIR/rerun or /tmp/stash/rerun: prepare, then stash" >&2; exit 1; }
    # a queue still running keeps its folders, and the GPU to itself
    if [ -f "$RUNS/pid" ] && kill -0 "$(cat "$RUNS/pid")" 2>/dev/null; then
        echo "a queue is still running (pid $(cat "$RUNS/pid")): wait for it" >&2; exit 1
    fi
    rm -rf "$RUNS" && mkdir "$RUNS"
    cp -a "$prepared" "$RUNS/prepared"
    setsid nohup bash "$0" queue "$RUNS/prepared" > "$RUNS/queue.log" 2>&1 < /dev/null &
    echo $! > "$RUNS/pid"
    sleep 20
    cat "$RUNS/queue.log" ;;
queue)  # the runs of PREPARED/queue in turn (started detached by `launch`)
    prepared=$2
    while read -r NAME; do
        (
            source "$prepared/$NAME/env"
            plain
            RUN=$RUNS/$NAME
            mkdir "$RUN"
            cp "$prepared/$NAME/env" "$RUN/env"
            tar -xzf "$prepared/code-$COMMIT.tar.gz" -C "$RUN"
            rm -rf "${RUN:?}/$TO"  # the folder as prepared replaces what the code's tree has there
            tar -xzf "$prepared/$NAME/run.tgz" -C "$RUN"
            cd "$RUN"
            export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$RUN/src MINIMODEL_GIT_COMMIT=$COMMIT
            export PYTHONUNBUFFERED=1
            # the dry run read whole (a pipe closed early breaks Snakemake's logging), its first Job stats
            plan=$(python3 -m snakemake -n "${SNAKE[@]}" 2>&1 < /dev/null) || true
            echo "$(date +%T) $NAME: $(awk '/Job stats/ {on = 1} on {print} /^total/ {exit}' <<< "$plan" | tr -s ' \n' ' ')"
            rc=0
            python3 -m snakemake "${SNAKE[@]}" > "$RUN/snake.log" 2>&1 < /dev/null || rc=$?
            echo "$rc" > "$RUN/rc"
            echo "$(date +%T) $NAME: Snakemake ended, exit $rc"
        ) || echo "$(date +%T) $NAME: could not run, exit $?"
    done < "$prepared/queue" ;;
start)
    # the wait ends SECONDS after this command began, not after the launch (its install and dry run
    # take 30-60 s): a call cut at its limit (600 s) returns only what was packed before it
    DIR=${2:-.whl}
    bash "$0" launch "$DIR"
    bash "$0" wait $(( ${3:-540} - SECONDS )) ;;
wait)
    limit=${2:-560}
    waited=0
    [ -f "$RUNS/pid" ] || { echo "no queue was launched on this machine ($RUNS/pid): launch, or start" >&2; exit 1; }
    pack() {  # what each run has made so far, into $OUT/$1 by a rename, whole: a cut call returns the last one
        local items=()
        for env in "$RUNS"/*/env; do  # each run's folder (the prepared queue keeps its envs a level down)
            NAME=$(basename "$(dirname "$env")")
            TO=$(source "$env" && echo "$TO")
            for item in "$NAME/$TO" "$NAME/snake.log" "$NAME/rc" "$NAME/.snakemake/log"; do
                [ -e "$RUNS/$item" ] && items+=("$item")
            done
        done
        # a file written while it is read makes tar exit 1 (2: one gone): the archive still holds
        # the rest, and a later pack the file whole; the wait goes on either way
        tar -czf "/tmp/$1" -C "$RUNS" queue.log "${items[@]}" || echo "pack: tar exit $? (a file changed as it was read)"
        mv "/tmp/$1" "$OUT/$1"
    }
    # the PID the launch wrote: a pattern for pgrep would match this command's own line
    while kill -0 "$(cat "$RUNS/pid")" 2>/dev/null && [ "$waited" -lt "$limit" ]; do
        sleep 5; waited=$((waited + 5))
        # every minute, so that a machine given back before the runs end, or a call cut at its
        # limit, leaves the finished stages behind: a later run can start from them (FROM)
        if [ $((waited % 60)) -eq 0 ]; then pack partial.tgz; fi
    done
    cat "$RUNS/queue.log"
    latest=$(ls -t "$RUNS"/*/snake.log 2>/dev/null | head -1)
    [ -n "$latest" ] && tail -15 "$latest"
    if ! kill -0 "$(cat "$RUNS/pid")" 2>/dev/null; then
        rm -f "$OUT/partial.tgz"
        pack rerun.tgz
        for verdict in "$RUNS"/*/results/*/compare/verdict.json; do
            [ -e "$verdict" ] && { echo "$verdict"; head -12 "$verdict"; }
        done
    else
        pack partial.tgz
    fi ;;
*)
    awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"  # the header
    exit 2 ;;
esac
