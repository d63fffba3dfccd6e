"""What FlexAttention's compiles cost at the timing stage's points, on a CUDA device: for each point
(the config's grids, `minimodel.gpu.grids`), the first call of `torch.compile(flex_attention)`
without grad (the forward's graph) and with grad, then its backward (the backward's and forward +
backward's), each timed to the device's end. Nothing of the workflow is written: a development
tool for the timing stage's preparation time (notes/timing.md).
    python tools/flex_compile_probe.py [--dynamic] [--digest] [--json FILE]
Run it twice with the same TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR to see a warm cache's
share; `--dynamic` compiles with dynamic shapes (one graph for many shapes); `--digest` draws each
point's inputs from a fixed seed and records the sha256 of its output and gradients, so that two
processes (a cold cache and a warm one) can be shown to run the same kernels."""

from __future__ import annotations

import argparse
import hashlib
import json
import time

import torch
from torch.nn.attention.flex_attention import flex_attention

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import builtin
from minimodel.gpu import grids


def timed(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def digest(*tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dynamic", action="store_true", help="torch.compile(..., dynamic=True)")
    parser.add_argument("--digest", action="store_true", help="seeded inputs; sha256 of each point's results")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    compiled = builtin._flex()  # the contender's compile, and its settings for the one below
    if args.dynamic:
        compiled = torch.compile(flex_attention, dynamic=True)
    rows, begun = [], time.perf_counter()
    for i, p in enumerate(grids.points(grids.default_timing_config())):
        torch.manual_seed(i)
        q, k, v = (torch.randn(p.B, p.H, p.N, p.d, device="cuda", dtype=torch.float16) for _ in range(3))
        mask = builtin._block_mask(p.N, str(q.device), p.causal)  # the contender's, made before the timing
        with torch.no_grad():
            forward = timed(lambda: compiled(q, k, v, block_mask=mask))  # noqa: B023
        for t in (q, k, v):
            t.requires_grad_(True)

        def both():
            out = compiled(q, k, v, block_mask=mask)  # noqa: B023
            out.backward(torch.ones_like(out))

        with_grad = timed(both)
        again = timed(both)  # compiled: what one call costs, beside the first
        rows.append({"grid": p.grid, "B": p.B, "H": p.H, "N": p.N, "d": p.d, "causal": p.causal,
                     "forward_s": round(forward, 2), "with_grad_s": round(with_grad, 2),
                     "again_s": round(again, 4)})
        if args.digest:  # the output and the gradients at dO = 1 of this point's seeded inputs
            for t in (q, k, v):
                t.grad = None
            out = compiled(q, k, v, block_mask=mask)
            out.backward(torch.ones_like(out))
            rows[-1]["sha256"] = digest(out, q.grad, k.grad, v.grad)
        print(json.dumps(rows[-1]), flush=True)
    total = time.perf_counter() - begun
    print(f"{len(rows)} points, {total:.1f} s; forward {sum(r['forward_s'] for r in rows):.1f} s, "
          f"with grad {sum(r['with_grad_s'] for r in rows):.1f} s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dynamic": args.dynamic, "seconds": round(total, 1), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
