#!/bin/bash
# On the lent H200, in the call carrying DIR/c after the calls that stashed the parts DIR/cu1,
# DIR/cu2, ... in /tmp/stash (h200_wheels.sh): every carried wheel and the CUDA 13 tree into SITE
# (default /tmp/site), then FA4, snakemake and jsonschema imported from it, so that a run does not
# start without them. Put SITE and SITE/nvidia_cutlass_dsl/dsl_packages on PYTHONPATH afterwards.
#     tools/gpu-machine/h200_site.sh [DIR] [SITE]
set -euo pipefail
DIR=${1:-.whl}
SITE=${2:-/tmp/site}
cat /tmp/stash/cu13.part_[0-9] > /tmp/cu13.tar.xz
# a part not stashed, or stashed from another build, is said here, not by tar halfway through
echo "$(cut -d' ' -f1 "$DIR/c/cu13.sha256")  /tmp/cu13.tar.xz" | sha256sum -c --quiet ||
    { echo "the CUDA 13 tree's parts in /tmp/stash are not $DIR/c/cu13.sha256's: stash every $DIR/cuN" >&2; exit 1; }
# the wheels h200_wheels.sh moved to DIR/cw, stashed in /tmp/stash/w by a call of their own
if [ -d /tmp/stash/w ]; then cp -n /tmp/stash/w/*.whl "$DIR/c/w/"; fi
missing=$(ls "$DIR/c/w" | LC_ALL=C sort | LC_ALL=C comm -23 "$DIR/c/wheels.txt" -)
[ -z "$missing" ] || { echo "wheels not stashed (carry $DIR/cw in a call of its own first): $missing" >&2; exit 1; }
pip install -q --no-index --no-deps --no-compile --root-user-action=ignore --target "$SITE" "$DIR"/c/w/*.whl
tar -xJf /tmp/cu13.tar.xz -C "$SITE"   # after the wheels: a second pip --target would replace it
PYTHONPATH="$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages" python3 -c \
    "import flash_attn.cute, cutlass.cute, snakemake, jsonschema; print('FA4, snakemake, jsonschema import')"
