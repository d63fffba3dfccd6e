"""The Gluon TMA reduction (`minimodel.kernel.gluon_bwd_state.async_reduce_shared_to_global`) on its own:
compiled for sm_90 on any machine (`--report`: the PTX instruction and the SASS opcode it
becomes), and on a Hopper GPU checked and timed against fp32 atomics from registers, the two ways
a backward can add its dQ tiles into a float32 dQaccum.

    python tools/tma_reduce_probe.py --report          # no GPU needed
    python tools/tma_reduce_probe.py --out DIR          # on an H100 or H200: check, time, JSON

Each of P programs adds a [BM, BN] float32 tile holding (p % 7 + 1) into tile p % TILES of the
output; the sums are small integers, exact in float32, so the check is equality. The output's last
tile is cut short by RAGGED rows (as a dQ tile past N is), inside a larger buffer whose rows after
it must stay untouched: the reduction clips at the descriptor's shape.
"""

import argparse
import json
import re
import sys
from pathlib import Path

import compiled_entry  # noqa: F401 (first: Triton's compiler, whatever the device)
import kernel_report
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.jit import mangle_type

from minimodel.kernel.gluon_bwd_state import async_reduce_shared_to_global

BM, BN, TILES, WARPS = 64, 128, 16, 4  # a dQ share's tile at d = 128
RAGGED = 5  # rows the output's last tile lacks
REG = gl.BlockedLayout([1, 4], [4, 8], [WARPS, 1], [1, 0])


@gluon.jit
def _tile(BM: gl.constexpr, BN: gl.constexpr):
    value = (gl.program_id(0) % 7 + 1).to(gl.float32)
    return gl.full([BM, BN], 0.0, gl.float32, REG) + value


@gluon.jit
def _reduce_tiles(out_desc, TILES: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr):
    smem = gl.allocate_shared_memory(gl.float32, [BM, BN], out_desc.layout)
    smem.store(_tile(BM, BN))
    fence_async_shared()
    async_reduce_shared_to_global(out_desc, [(gl.program_id(0) % TILES) * BM, 0], smem)
    tma.store_wait(0)


@gluon.jit
def _atomic_tiles(out, TILES: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr):
    r = gl.expand_dims(gl.arange(0, BM, layout=gl.SliceLayout(1, REG)), 1)
    c = gl.expand_dims(gl.arange(0, BN, layout=gl.SliceLayout(0, REG)), 0)
    base = out + (gl.program_id(0) % TILES).to(gl.int64) * BM * BN
    gl.atomic_add(base + r * BN + c, _tile(BM, BN), sem="relaxed")


def descriptor(out: torch.Tensor) -> TensorDescriptor:
    layout = gl.NVMMASharedLayout.get_default_for([BM, BN], gl.float32)
    return TensorDescriptor(out, list(out.shape), list(out.stride()), [BM, BN], layout)


def report() -> dict:
    """The reduction compiled for sm_90: the PTX instruction, the SASS opcode, shared bytes."""
    out = torch.empty(TILES * BM, BN, dtype=torch.float32)
    args = {"out_desc": mangle_type(descriptor(out)), "TILES": TILES, "BM": BM, "BN": BN}
    compiled = kernel_report.compile_for(_reduce_tiles, args, {"num_warps": WARPS})
    ptx = compiled.asm["ptx"]
    sass = kernel_report._cuobjdump(compiled.asm["cubin"], "--dump-sass")
    return {"ptx": sorted(set(re.findall(r"cp\.reduce\.async\.bulk\.tensor[\w.:]*", ptx))),
            "sass_utmaredg": len(re.findall(r"\bUTMAREDG\b", sass)),
            "shared_bytes": int(compiled.metadata.shared)}


def expected(programs: int) -> torch.Tensor:
    """The buffer after the reduction: the sums in the output's rows, zeros in the RAGGED rows past it."""
    sums = torch.zeros(TILES)
    for p in range(programs):
        sums[p % TILES] += p % 7 + 1
    want = sums.repeat_interleave(BM)[:, None].expand(TILES * BM, BN).clone()
    want[TILES * BM - RAGGED:] = 0
    return want


def run(programs: int, reps: int) -> dict:
    """Both kernels checked against the exact sums, then timed (CUDA events, `reps` launches)."""
    buffer = torch.zeros(TILES * BM, BN, dtype=torch.float32, device="cuda")
    out = buffer[:TILES * BM - RAGGED]  # the descriptor's shape: its last tile RAGGED rows short
    want = expected(programs).cuda()
    desc = descriptor(out)
    launches = {"tma_reduce": lambda: _reduce_tiles[(programs,)](desc, TILES, BM, BN, num_warps=WARPS),
                "atomic_add": lambda: _atomic_tiles[(programs,)](buffer, TILES, BM, BN, num_warps=WARPS)}
    row = {"programs": programs, "tile": [BM, BN], "tiles": TILES, "ragged_rows": RAGGED}
    for name, launch in launches.items():
        buffer.zero_()
        launch()
        torch.cuda.synchronize()
        got = buffer if name == "tma_reduce" else torch.cat([buffer[:TILES * BM - RAGGED],
                                                             torch.zeros_like(buffer[:RAGGED])])
        row[f"{name}_exact"] = bool(torch.equal(got, want))  # atomics write every row: compared up to N
        row[f"{name}_max_error"] = float((got - want).abs().max())
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            launch()
        end.record()
        end.synchronize()
        row[f"{name}_us"] = start.elapsed_time(end) * 1000 / reps
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", action="store_true", help="compile for sm_90 only; no GPU needed")
    parser.add_argument("--programs", type=int, nargs="*", default=[132, 1056, 8448])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--out", type=Path, help="a folder for tma_reduce.json")
    args = parser.parse_args(argv)
    rows = [report()] if args.report else [run(p, args.reps) for p in args.programs]
    for row in rows:
        print(json.dumps(row))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "tma_reduce.json").write_text(json.dumps(rows, indent=1))
    exact = args.report or all(r["tma_reduce_exact"] and r["atomic_add_exact"] for r in rows)
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
