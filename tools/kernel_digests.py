"""What the kernel runs at every timed point, and what it compiles to on Hopper, read without a GPU.

    python tools/kernel_digests.py                                       # print the table
    python tools/kernel_digests.py --write tests/data/kernel_digests.csv   # make the committed table
    python tools/kernel_digests.py --check tests/data/kernel_digests.csv   # exit 1 where it differs

For every point of both timing grids (`minimodel.gpu.grids`: the lab grid and FlashAttention's,
causal and not), in float16 and bfloat16, and for each pass a stage runs (the forward alone, the
forward that stores the LSE for a backward, the backward, the backward with deterministic=False),
one row per launch: the configuration the policy picks on an H100/H200 (`choice`: the kernels and
their tiles, warps and stages), the launch's kernel, grid and options, and a sha256 digest of the
SASS that Triton's own ptxas makes of it for sm_90, specialized as that launch would be
(`kernel_report.compile_for`). The digest is of the instructions alone: no addresses, encodings,
function-name or header lines, the kernel's name replaced (`sass_sha256`); `sass_params_sha256`
digests them again with every constant-bank offset masked, so that a kernel whose parameter list
changed but whose code did not keeps it. Each distinct specialization is compiled once. A change
of the kernel's code that must leave the compiled default alone shows here as no difference
(tests/test_kernel_digests.py, `make test-compile`). Nothing runs on a GPU.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

import compiled_entry  # noqa: F401 (first: Triton's compiler, whatever the device)
import kernel_report
import pandas as pd
import torch
import triton

from minimodel.floor.provenance.io import write_csv
from minimodel.gpu import grids
from minimodel.kernel import INTERPRETED, backward, flash, policy

ARCH, SMS = 90, 132  # the H100/H200: compute capability 9.0, 132 multiprocessors
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
# the passes a stage runs: the forward alone (timing), the forward that keeps the LSE (`attention`),
# the backward, and the backward a user asks for with deterministic=False
PASSES = ("forward", "forward_lse", "backward", "backward_nondeterministic")
KEY = ("pass", "grid", "B", "H", "N", "d", "causal", "dtype", "launch")
COLUMNS = (*KEY, "choice", "kernel", "launch_grid", "options", "instructions", "sass_sha256",
           "sass_params_sha256", "triton")
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;", re.MULTILINE)
_CONSTANT = re.compile(r"c\[0x[0-9a-f]+\]\[0x[0-9a-f]+\]")


def instructions(sass: str, name: str) -> list[str]:
    """The SASS instructions of cuobjdump's dump, one per line, without addresses, encodings,
    headers or labels; `name` (the kernel's) replaced where an instruction names it."""
    return [" ".join(m.group(1).replace(name, "KERNEL").split()) for m in _INSTRUCTION.finditer(sass)]


def digests(lines: list[str]) -> tuple[str, str]:
    """(sha256 of the instructions, sha256 of them with every constant-bank offset masked)."""
    text = "\n".join(lines)
    masked = _CONSTANT.sub("c[_][_]", text)
    return hashlib.sha256(text.encode()).hexdigest(), hashlib.sha256(masked.encode()).hexdigest()


def forward_choice(cfg) -> str:
    """The forward's configuration in words: the kernel (tl, tl_tma, gluon), tiles, warps, stages."""
    words = f"{cfg.path} BLOCK_M={cfg.BLOCK_M} BLOCK_N={cfg.BLOCK_N} warps={cfg.num_warps}"
    return words + f" stages={cfg.num_stages}" + (f" maxnreg={cfg.MAXNREG}" if cfg.MAXNREG else "")


def backward_choice(cfg) -> str:
    """The backward's configuration in words: its dK/dV kernel, its dQ (a pass, with its consumer
    warpgroups where it is the Gluon one, or in the kernel), tiles, warps, stages."""
    dq = f"{cfg.dq}:{cfg.dq_consumers}" if cfg.dq_consumers else cfg.dq
    return (f"dkdv={cfg.dkdv} dq={dq} BLOCK_M1={cfg.BLOCK_M1} BLOCK_N1={cfg.BLOCK_N1} "
            f"BLOCK_M2={cfg.BLOCK_M2} BLOCK_N2={cfg.BLOCK_N2} warps_kv={cfg.num_warps_kv} "
            f"stages_kv={cfg.num_stages_kv} warps_q={cfg.num_warps_q} stages_q={cfg.num_stages_q}")


def forward_launches(point, dtype, store_lse: bool):
    """(choice, [(role, kernel, grid, arguments, options)]) of `flash_attn_forward` at the point."""
    B, H, N, d = point.B, point.H, point.N, point.d
    cfg = policy.get_fwd_config(d, point.causal, "cuda", N, B * H, SMS, ARCH)
    t = torch.empty((B, H, N, d), dtype=dtype)  # never touched: only shape, strides, dtype are read
    lse = torch.empty((B, H, N), dtype=torch.float32) if store_lse else t
    make = flash.arguments_of(cfg)
    kernel, grid, args, options = make(t, t, t, t, lse, 0.125, cfg, point.causal, store_lse)
    return forward_choice(cfg), [("forward", kernel, grid, args, options)]


def backward_launches(point, dtype, deterministic: bool):
    """(choice, [(role, kernel, grid, arguments, options)]) of `flash_attn_backward` at the point."""
    B, H, N, d = point.B, point.H, point.N, point.d
    cfg = policy.get_bwd_config(d, point.causal, "cuda", ARCH, n=N, deterministic=deterministic,
                                  heads=B * H, sms=SMS)
    t = torch.empty((B, H, N, d), dtype=dtype)
    dq = torch.empty((B, H, N, d), dtype=torch.float32) if cfg.dq == "in_kernel" else t
    rows = torch.empty((B, H, N), dtype=torch.float32)
    launches = backward.arguments(t, t, t, t, rows, t, dq, t, t, rows, 0.125, cfg, point.causal)
    roles = ("preprocess", "dkdv", "dq")
    return backward_choice(cfg), [(role, *launch) for role, launch in zip(roles, launches, strict=False)]


def launches(point, dtype, pass_: str):
    if pass_.startswith("forward"):
        return forward_launches(point, dtype, pass_ == "forward_lse")
    return backward_launches(point, dtype, pass_ == "backward")


class Compiler:
    """Compiles each distinct specialization once: (rows of instructions, digests) by its key."""

    def __init__(self):
        self.seen: dict = {}

    def __call__(self, kernel, args: dict, options: dict) -> dict:
        types = kernel_report._as_types(args)
        signature, constants, attrs = kernel_report._signature(kernel, types)
        key = (kernel.fn.__module__, kernel.fn.__qualname__, repr(signature), repr(constants), repr(attrs),
               repr(sorted(options.items())))
        if key not in self.seen:
            compiled = kernel_report.compile_for(kernel, types, options, ARCH)
            lines = instructions(kernel_report._cuobjdump(compiled.asm["cubin"], "--dump-sass"),
                                 compiled.metadata.name)
            exact, masked = digests(lines)
            self.seen[key] = {"instructions": len(lines), "sass_sha256": exact, "sass_params_sha256": masked}
        return self.seen[key]


def table(points=None, dtypes=tuple(DTYPES), passes=PASSES, log=None) -> pd.DataFrame:
    """The table of the module docstring, for `points` (default: both grids)."""
    if INTERPRETED:
        raise RuntimeError("kernel_digests compiles the real kernels: run it without TRITON_INTERPRET=1")
    compile_ = Compiler()
    rows = []
    for point in points if points is not None else grids.points(grids.default_timing_config()):
        for dtype in dtypes:
            for pass_ in passes:
                choice, found = launches(point, DTYPES[dtype], pass_)
                for role, kernel, grid, args, options in found:
                    if log:
                        print(f"{pass_} {point} {dtype} {role}", file=log, flush=True)
                    rows.append({"pass": pass_, "grid": point.grid, "B": point.B, "H": point.H, "N": point.N,
                                 "d": point.d, "causal": point.causal, "dtype": dtype, "launch": role,
                                 "choice": choice, "kernel": kernel.fn.__name__,
                                 "launch_grid": "x".join(str(g) for g in grid),
                                 "options": " ".join(f"{k}={v}" for k, v in sorted(options.items())),
                                 **compile_(kernel, args, options), "triton": triton.__version__})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def read(path: Path) -> pd.DataFrame:
    """A table as written, every value a string (so that none is converted on the way)."""
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def differences(old: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    """One line per row that is in one table and not the other, or whose values differ."""
    old, new = (t.astype(str).set_index(list(KEY)) for t in (old, new))
    said = [f"only in the committed table: {dict(zip(KEY, k, strict=True))}"
            for k in old.index.difference(new.index)]
    said += [f"not in the committed table: {dict(zip(KEY, k, strict=True))}"
             for k in new.index.difference(old.index)]
    for k in old.index.intersection(new.index):
        a, b = old.loc[k], new.loc[k]
        changed = [f"{c}: {a[c]} -> {b[c]}" for c in old.columns if c in new.columns and a[c] != b[c]]
        if changed:
            said.append(f"{dict(zip(KEY, k, strict=True))}: {'; '.join(changed)}")
    return said


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="write the table here")
    parser.add_argument("--check", type=Path, help="compare with this table; exit 1 where they differ")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    frame = table(log=None if args.quiet else sys.stderr)
    if args.write:
        write_csv(args.write, frame)
    if args.check:
        said = differences(read(args.check), frame)
        for line in said:
            print(line)
        print(f"{len(said)} differences from {args.check} ({len(frame)} launches)")
        return 1 if said else 0
    if not args.write:
        with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_rows", None):
            print(frame.drop(columns=["sass_sha256", "sass_params_sha256", "triton"]).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
