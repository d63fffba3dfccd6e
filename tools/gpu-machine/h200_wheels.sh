#!/bin/bash
# The packages the lent H200 lacks for a full run of the workflow (tools/gpu-machine/README.md):
# DIR/cu1, DIR/cu2, ... the parts of FA4's CUDA 13 library tree, each small enough to go beside the
# working tree and DIR/rerun (10 MiB kept for it) in a call of 64 MiB; DIR/c every wheel (FA4 and the
# CuTe DSL, snakemake, jsonschema; cp312) and the tree's checksum, its largest wheels in DIR/cw where
# DIR/c and the working tree would pass 64 MiB. Prints the calls that stash them. DIR: .whl.
#     tools/gpu-machine/h200_wheels.sh [DIR]
set -euo pipefail
DIR=${1:-.whl}
PLATFORM=(--only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64
          --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
          --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64)
# FA4 and what it imports, less torch and what the H200 has; libs-core is the CuTe DSL's Python
# package (`cutlass.cute`), libs-base its MLIR bindings, libs-cu13 its CUDA 13 libraries (92 MB)
FA4=(flash-attn-4==4.0.0b36 quack-kernels==0.6.5 nvidia-cutlass-dsl==4.8.1
     nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1
     apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$DIR/a" "$DIR/b" "$DIR/c" "$DIR/cw" "$DIR"/cu[0-9]*
mkdir -p "$DIR/c/w"
pip download -q --no-deps "${PLATFORM[@]}" -d "$DIR/c/w" "${FA4[@]}"
# snakemake's needs at the H200's versions (its packaging 26 is above what snakemake 9.27.1 takes);
# connection_pool has no wheel on PyPI
pip wheel -q --no-deps connection_pool==0.0.3 -w "$tmp/cp"
grep -v -i -E '^(#|packaging==|torch==|triton==)' requirements/cuda-h200.txt > "$tmp/constraints.txt"
pip download -q "${PLATFORM[@]}" --find-links "$tmp/cp" -c "$tmp/constraints.txt" -d "$DIR/c/w" \
    snakemake==9.27.1 jsonschema==4.26.0
cp -n "$tmp"/cp/*.whl "$DIR/c/w/"
# the CUDA 13 tree packed again with xz (64 MB), in parts that fit a call beside the tree and DIR/rerun
pip download -q --no-deps "${PLATFORM[@]}" -d "$tmp" nvidia-cutlass-dsl-libs-cu13==4.8.1
mkdir "$tmp/cu13"
unzip -q "$tmp"/nvidia_cutlass_dsl_libs_cu13-*.whl -d "$tmp/cu13"
XZ_OPT="-9 -T0" tar -cJf "$tmp/cu13.tar.xz" -C "$tmp/cu13" .
tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- | tail -1 | cut -f1)
part=$(( (54 * 1048576 - tree) / 1048576 ))  # MiB: 64, less the tree, less 10 for DIR/rerun
[ "$part" -ge 8 ] || { echo "the working tree ($tree bytes) leaves under 8 MiB a call" >&2; exit 1; }
split -b "${part}M" -d -a 1 "$tmp/cu13.tar.xz" "$tmp/part_"
for f in "$tmp"/part_*; do
    i=${f##*_}
    mkdir -p "$DIR/cu$((i + 1))"
    mv "$f" "$DIR/cu$((i + 1))/cu13.part_$i"
done
(cd "$tmp" && sha256sum cu13.tar.xz) > "$DIR/c/cu13.sha256"
# FA4 imports cutlass.cute: refuse a set without it (a run would lose its FA4 rows)
# (grep reads the whole listing: with -q it would stop early, and pipefail would read unzip's SIGPIPE)
unzip -l "$DIR"/c/w/nvidia_cutlass_dsl_libs_core-*.whl | grep "dsl_packages/cutlass/cute/__init__.py" >/dev/null ||
    { echo "no cutlass.cute in the CuTe DSL's wheels" >&2; exit 1; }
# DIR/c beside the tree in the disk's blocks (as a call counts them), 2 MiB kept for the tree to grow:
# the largest wheels go to DIR/cw until it fits; wheels.txt lets h200_site.sh tell one unstashed
ls "$DIR/c/w" | LC_ALL=C sort > "$DIR/c/wheels.txt"
treek=$(git ls-files -z --cached --others --exclude-standard | du -ck --files0-from=- | tail -1 | cut -f1)
while [ $(( treek + $(du -sk "$DIR/c" | cut -f1) )) -gt $(( 65536 - 2048 )) ]; do
    mkdir -p "$DIR/cw"
    mv "$DIR/c/w/$(ls -S "$DIR/c/w" | head -1)" "$DIR/cw/"
done
du -sh "$DIR"/cu[0-9]* "$DIR/c"
if [ -d "$DIR/cw" ]; then du -sh "$DIR/cw"; fi  # du of a missing folder fails, and set -e would end here
wc -l < "$DIR/c/wheels.txt"
echo "on the H200, with the working tree of $tree bytes:"
for d in "$DIR"/cu[0-9]*; do echo "  carrying $d: mkdir -p /tmp/stash && cp $d/* /tmp/stash/"; done
if [ -d "$DIR/cw" ]; then echo "  carrying $DIR/cw: mkdir -p /tmp/stash/w && cp $DIR/cw/* /tmp/stash/w/"; fi
echo "  carrying $DIR/c: bash tools/gpu-machine/h200_site.sh $DIR"
