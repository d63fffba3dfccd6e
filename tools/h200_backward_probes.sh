#!/bin/bash
# The backward's checks and timings on the lent H200 in one call (notes/backward.md, "What the next
# H200 block runs first"), after tools/h200_site.sh has put FA4's packages in /tmp/site; each step
# under its own time limit, everything packed into $OUT/backward_probes.tgz.
#     bash tools/h200_backward_probes.sh [COMMIT]
set -uo pipefail
COMMIT=${1:-unknown}
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD/src:$PWD/tools PYTHONUNBUFFERED=1
mkdir -p "$OUT/p/gluon" "$OUT/p/ncu"
step() {
    local limit=$1
    shift
    echo "== $* (limit $limit s)"
    local start=$SECONDS
    timeout "$limit" "$@"
    echo "== exit $? after $((SECONDS - start)) s"
}
# the ordered (deterministic) and unordered TMA paths: 40 checks each, then timed beside cuDNN
step 300 python3 tools/bwd_gluon_gpu.py --out "$OUT/p/gluon" --commit "$COMMIT" \
    --path wsord64 --path wsord128 --path wstma64 --path wstma128
# both against the shipped path over FlashAttention's grid's sequence lengths
step 200 python3 tools/bwd_bench.py --graph --n 1024 --n 4096 --n 16384 \
    --config 128,128,128,64,12,2,8,3,ORDERED --config 64,128,128,64,12,2,8,3,ORDERED \
    --config 128,128,128,64,12,2,8,3,TMA --config 64,128,128,64,12,2,8,3,TMA --csv "$OUT/p/bench.csv"
# Nsight Compute beside FA4 (and cuDNN, the shipped path, for the same run)
step 240 python3 tools/bwd_ncu.py --out "$OUT/p/ncu" --ways ws ordered fa4 cudnn
tar -czf "$OUT/backward_probes.tgz" -C "$OUT" p && rm -rf "$OUT/p"
ls -la "$OUT"
