#!/bin/bash
# The backward's timings and Nsight Compute on the lent H200 (notes/backward.md), after
# tools/h200_site.sh has put FA4's packages in /tmp/site. Detached, so that it outlives one call:
#     bash tools/h200_backward_probes.sh start [COMMIT]   # starts the steps below in /tmp/probes
#     bash tools/h200_backward_probes.sh wait [SECONDS]   # waits; once ended, packs into $OUT
#     bash tools/h200_backward_probes.sh pack             # packs what there is now (the steps go on)
# The steps (notes/backward.md, "Three consumers at d = 64, and where the ordered path waits"): the
# GPU tests of the ordered path, whose causal key blocks now start last first, and of the Gluon dQ
# pass (three consumers at d = 64 not causal; its guarantee cases have not run with three); then,
# causal, the ordered path beside the unordered TMA path, the default, cuDNN and FA4 at each head
# dim (it fell to 0.54x of the default at N = 16384 when the first key blocks started first); then
# ncu of the two in-kernel paths at (1, 32, 16384, 64) causal, where its long-scoreboard stalls
# were 3.6x; then ncu of the default (the Gluon dQ pass) beside FA4 and cuDNN at the issue's two
# points.
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
    step 300 python3 -m pytest -p no:cacheprovider -q -m gpu tests/test_backward_gluon.py \
        -k "gluon-ws-ordered-dq or gluon-ws-gluon-dq or gluon_path_is_det"
    step 200 python3 tools/bwd_bench.py --graph --d 64 --causal true --config 128,128,128,64,12,2,8,3,ORDERED \
        --config 128,128,128,64,12,2,8,3,TMA --csv "$P/bwd_bench_d64_ordered_causal.csv"
    step 200 python3 tools/bwd_bench.py --graph --d 128 --causal true --config 64,128,128,64,12,2,8,3,ORDERED \
        --config 64,128,128,64,12,2,8,3,TMA --csv "$P/bwd_bench_d128_ordered_causal.csv"
    step 200 python3 tools/bwd_ncu.py --out "$P/ncu" --ways ordered tma --causal --point 1,32,16384,64
    step 300 python3 tools/bwd_ncu.py --out "$P/ncu_default" --ways default fa4 cudnn ;;
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
