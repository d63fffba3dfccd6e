#!/bin/bash
# On the lent H200, in the call (carrying DIR/c) after the two that stashed DIR/a's and DIR/b's parts
# in /tmp/stash: every carried wheel and the CUDA 13 tree into SITE (default /tmp/site), then FA4,
# snakemake and jsonschema imported from it, so that a run does not start without them. Put SITE
# and SITE/nvidia_cutlass_dsl/dsl_packages on PYTHONPATH afterwards (notes/timing.md).
#     tools/h200_site.sh [DIR] [SITE]
set -euo pipefail
DIR=${1:-.whl}
SITE=${2:-/tmp/site}
cat /tmp/stash/cu13.part_aa /tmp/stash/cu13.part_ab > /tmp/cu13.tar.xz
pip install -q --no-index --no-deps --no-compile --root-user-action=ignore --target "$SITE" "$DIR"/c/w/*.whl
tar -xJf /tmp/cu13.tar.xz -C "$SITE"   # after the wheels: a second pip --target would replace it
PYTHONPATH="$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages" python3 -c \
    "import flash_attn.cute, cutlass.cute, snakemake, jsonschema; print('FA4, snakemake, jsonschema import')"
