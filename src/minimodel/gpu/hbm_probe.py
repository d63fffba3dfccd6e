"""The profiled process of the DRAM-bytes stage: `python -m minimodel.gpu.hbm_probe PLAN.json`, run
under Nsight Compute by `minimodel.gpu.hbm.measure`, one process for the project's rows and one per
contender. For each row whose status is `contract.MEASURED`, fresh inputs are drawn and the
row's call (`call`, the pass a parameter) runs once unprofiled (compilation, library set-up), then a
marker kernel and the call run inside ncu's NVTX range (`minimodel.gpu.ncu`).

What a row calls:
- the forward: naive attention (theory 02's three steps, the softmax in fp16 storage), the kernel
  (`flash_attn_forward`), or the contender on its layout's inputs (`prepared`, made before);
- the backward alone, its forward run before the profiled range: naive, theory 02's naive backward
  (`attention_ref.attn_naive_backward`, one op per step as autograd runs them) from P as the
  naive forward stores it, so P is read by the backward as `byte_model.backward` counts; it runs on
  the calling thread: autograd's own engine would launch the kernels from a thread of its own,
  outside the profiled NVTX range, and ncu would profile none of them (seen on the H200). Flash:
  this project's Triton backward alone (`kernel.backward.backward_fn`, the forward's O and
  log-sum-exp saved before the range): its preprocess, dK/dV kernel and dQ kernel. dO is drawn
  from the row's seed, after Q, K and V.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from minimodel.contenders.registry import SEARCH
from minimodel.contenders.run import _cuda_usable, declined, one_line
from minimodel.contenders.spec import Contender, load, prepared
from minimodel.contenders.timed import validated
from minimodel.floor import contract
from minimodel.floor.attention_ref import attn_naive, attn_naive_backward, softmax_probabilities
from minimodel.floor.subprocesses import exit_with_stage
from minimodel.gpu import ncu as ncu_tool
from minimodel.kernel import flash_attn_forward
from minimodel.kernel.backward import backward_fn

MARKED = "marked"  # the probe's record of a row it profiled
RAISED_AFTER_MARK = f"{MARKED}, then "  # ... of a row whose profiled call raised: then the error
RESTART = 75  # the probe's exit code after a contender left CUDA unusable: the rest, afresh
PROBE = "minimodel.gpu.hbm_probe"  # the module ncu runs: this one


@triton.jit
def minimodel_bytes_marker(X):
    """The kernel that opens a row's profiled range (ncu finds each row's kernels after it)."""
    tl.store(X, 1)


def call(row: dict, contender, q, k, v, generator):
    """(fn, args): the row's call in its pass (module docstring), `fn(*args)` returning O (dQ for a
    backward); a backward's forward already run and its dO drawn from `generator`."""
    causal = row["causal"]
    if row["direction"] == contract.FORWARD:
        if contender is not None:  # its layout's inputs (`prepared`) are made before the marked call
            return (lambda *xs: contender(*xs, causal=causal)), prepared(contender, q, k, v)
        if row["impl"] == contract.NAIVE_SCHEME:
            return (lambda *xs: attn_naive(*xs, causal=causal, fp32_softmax=False)), (q, k, v)
        return (lambda *xs: flash_attn_forward(*xs, causal=causal)), (q, k, v)
    do = torch.randn(q.shape, device=q.device, dtype=q.dtype, generator=generator)
    if row["impl"] == contract.FLASH_SCHEME:
        run = backward_fn(q, k, v, causal, do=do)
        return (lambda: run()[0]), ()
    P = softmax_probabilities(q, k, causal=causal)
    return (lambda: attn_naive_backward(q, k, v, P, do)[0]), ()


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
        backward = row["direction"] != contract.FORWARD  # its forward runs here, outside the range
        fn, args = call(row, contender, q, k, v, gen)
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
