"""The profiled process of the DRAM-bytes stage: `python -m minimodel.gpu.hbm_probe PLAN.json`, run
under Nsight Compute by `minimodel.gpu.hbm.measure`, one process for the project's rows and one per
contender. For each row whose status is `contract.MEASURED`, fresh inputs are drawn and the
implementation runs once unprofiled (compilation, library set-up), then a marker kernel and the
implementation run inside ncu's NVTX range (`minimodel.gpu.ncu`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from minimodel import contract
from minimodel.attention_ref import attn_naive
from minimodel.contenders.registry import SEARCH
from minimodel.contenders.run import _cuda_usable, declined, one_line
from minimodel.contenders.spec import Contender, load, prepared
from minimodel.contenders.timed import validated
from minimodel.gpu import hbm_backward
from minimodel.gpu import ncu as ncu_tool
from minimodel.kernel import flash_attn_forward
from minimodel.subprocesses import exit_with_stage

MARKED = "marked"  # the probe's record of a row it profiled
RAISED_AFTER_MARK = f"{MARKED}, then "  # ... of a row whose profiled call raised: then the error
RESTART = 75  # the probe's exit code after a contender left CUDA unusable: the rest, afresh
PROBE = "minimodel.gpu.hbm_probe"  # the module ncu runs: this one


@triton.jit
def minimodel_bytes_marker(X):
    """The kernel that opens a row's profiled range (ncu finds each row's kernels after it)."""
    tl.store(X, 1)


def _implementation(row: dict, contender):
    causal = row["causal"]
    if contender is not None:  # its layout's inputs (`prepared`) are made before the marked call
        return lambda q, k, v: contender(q, k, v, causal=causal)
    if row["impl"] == contract.NAIVE_SCHEME:  # theory 02's three steps, the softmax in fp16 storage
        return lambda q, k, v: attn_naive(q, k, v, causal=causal, fp32_softmax=False)
    return lambda q, k, v: flash_attn_forward(q, k, v, causal=causal)


def probe(spec: dict, plan_path: Path) -> int:
    """Run every row whose status is `contract.MEASURED`: once unprofiled, then marked in the NVTX range.

    Each row's outcome is recorded as it ends (`ncu.record_row`). The project's rows let an error
    end the process; a contender's error is recorded for its row, and the next row runs. A
    contender that does not load has that error recorded for every row. Returns the exit code:
    `RESTART` after an error that left CUDA unusable, so the rows left go to a fresh process.
    """
    todo = [i for i, row in enumerate(spec["rows"]) if row["status"] == contract.MEASURED]
    contender = None
    if spec.get("contender"):
        entry = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["contender"].items()}
        try:
            contender = load(Contender(**entry), SEARCH)
        except Exception as err:  # a user's module may raise anything on import
            for i in todo:
                ncu_tool.record_row(plan_path, i, f"its module did not load: {one_line(err)[:240]}")
            return 0
    marker_buffer = torch.zeros(1, device="cuda", dtype=torch.int32)
    for i in todo:
        row = spec["rows"][i]
        gen = torch.Generator(device="cuda").manual_seed(row["input_seed"])
        q, k, v = (torch.randn(row["B"], row["H"], row["N"], row["d"], device="cuda",
                               dtype=getattr(torch, row["dtype"]), generator=gen) for _ in range(3))
        backward = hbm_backward.is_backward(row)  # its forward runs here, outside the range
        fn = hbm_backward.call(row, q, k, v, gen) if backward else _implementation(row, contender)
        args = () if backward else prepared(contender, q, k, v) if contender is not None else (q, k, v)
        marked = False
        try:
            with torch.enable_grad() if backward else torch.no_grad():
                validated(fn(*args), q)  # compiles, sets up libraries: not in the profiled range
                torch.cuda.synchronize()
                with torch.cuda.nvtx.range(ncu_tool.NVTX_RANGE):
                    minimodel_bytes_marker[(1,)](marker_buffer)
                    marked = True
                    out = fn(*args)
                    torch.cuda.synchronize()
        except NotImplementedError as err:  # a contender that declines this point: a skipped row
            if contender is None or marked:
                raise
            ncu_tool.record_row(plan_path, i, f"{contract.SKIPPED}: {declined(err)[:240]}")
            del q, k, v, args
            continue
        except Exception as err:  # a contender may raise anything
            if contender is None:
                raise
            ncu_tool.record_row(plan_path, i, RAISED_AFTER_MARK * marked + one_line(err)[:240])
            del q, k, v, args  # kept in PyTorch's cache (see below), out-of-memory rows included
            if not _cuda_usable():  # a sticky CUDA error would fail every later row
                return RESTART
            continue
        ncu_tool.record_row(plan_path, i, MARKED)
        # kept in PyTorch's cache, not handed back to the driver: memory handed back is cleared
        # beside a later profiled kernel, and the device-wide DRAM counters count the clearing as
        # its writes (notes/kernel.md, "DRAM writes after freed memory")
        del q, k, v, args, out
    return 0


def main(argv: list[str] | None = None) -> int:
    """The profiled process: `python -m minimodel.gpu.hbm_probe PLAN.json` (run by `measure` under ncu)."""
    argv = sys.argv[1:] if argv is None else argv
    exit_with_stage()  # ncu's launchers stand between this process and the stage
    if len(argv) != 1:
        print("usage: python -m minimodel.gpu.hbm_probe PLAN.json  (run under ncu by the gpu_bytes rule)",
              file=sys.stderr)
        return 2
    return probe(json.loads(Path(argv[0]).read_text()), Path(argv[0]))


if __name__ == "__main__":
    sys.exit(main())
