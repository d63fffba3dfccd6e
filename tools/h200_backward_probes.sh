#!/bin/bash
# The backward's timings and Nsight Compute on the lent H200 (notes/backward.md), after
# tools/h200_site.sh has put FA4's packages in /tmp/site. Detached, so that it outlives one call:
#     bash tools/h200_backward_probes.sh start [COMMIT]   # starts the steps below in /tmp/probes
#     bash tools/h200_backward_probes.sh wait [SECONDS]   # waits; once ended, packs into $OUT
#     bash tools/h200_backward_probes.sh pack             # packs what there is now (the steps go on)
# The steps (notes/backward.md, "The Gluon dQ pass on the H200"): the dQ pass with three consumers
# beside two and the tl pass at d = 64 (tools/dq_pass_probe.py: the float64 checks, then timed side
# by side); then why the ordered (deterministic) in-kernel dQ falls behind with N when causal:
# tools/bwd_ncu.py with the ordered, the unordered TMA and the shipped path, causal, at N = 16384
# (0.54x the shipped path) and N = 1024 (0.96x), each head dim; stall reasons side by side.
set -uo pipefail
P=/tmp/probes
case "${1:-}" in
start)
    rm -rf "$P" && mkdir -p "$P/ncu"
    setsid nohup bash "$0" steps "${2:-unknown}" > "$P/log" 2>&1 < /dev/null &
    echo $! > "$P/pid"
    sleep 10
    tail -3 "$P/log" ;;
steps)
    export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD/src:$PWD/tools
    export PYTHONUNBUFFERED=1
    echo "commit $2"
    step() {
        local limit=$1
        shift
        echo "== $* (limit $limit s)"
        local start=$SECONDS
        timeout "$limit" "$@"
        echo "== exit $? after $((SECONDS - start)) s"
    }
    step 240 python3 tools/dq_pass_probe.py --d 64 --tiles 64,4 --tiles 64,4,3 --samples 3 --rep-ms 30 \
        --csv "$P/dq_pass_consumers.csv"
    step 500 python3 tools/bwd_ncu.py --out "$P/ncu" --ways ordered tma ws --causal \
        --point 1,32,16384,64 --point 16,32,1024,64 --point 1,16,16384,128 --point 16,16,1024,128 ;;
wait)
    limit=${2:-560}
    waited=0
    while kill -0 "$(cat "$P/pid")" 2>/dev/null && [ "$waited" -lt "$limit" ]; do
        sleep 5
        waited=$((waited + 5))
    done
    kill -0 "$(cat "$P/pid")" 2>/dev/null && tail -40 "$P/log" || bash "$0" pack ;;
pack)
    tail -40 "$P/log"
    tar -czf "$OUT/backward_probes.tgz" -C /tmp probes
    ls -la "$OUT" ;;
*)
    sed -n '2,9p' "$0"
    exit 2 ;;
esac
