"""What the kernel compiles to on Hopper, read without a GPU: registers, spills, shared memory, instructions.

    python tools/kernel_report.py                          # the configs shipped for FlashAttention's grid
    python tools/kernel_report.py --d 128 --config 128 128 8 4 --tma   # one config of your own
    python tools/kernel_report.py --d 64 --config 128 128 8 2 --tma --maxnreg 128
    python tools/kernel_report.py --d 128 --config 128 128 4 2 --gluon   # the Gluon kernel
    python tools/kernel_report.py --policy --arch 80       # every config the policy can pick on sm_80
    python tools/kernel_report.py --policy --arch 80 --no-sass   # the same fits, without SASS counts

Each kernel of `minimodel.kernel.flash` is compiled for sm_90 (the H100/H200) exactly as a
launch on a contiguous (B, H, N, d) problem (float16, or `--dtype bfloat16`) would specialize
it (integer arguments equal to 1 become constants, pointers and multiples of 16 carry Triton's
divisibility hint) with Triton's own ptxas; the cubin is read with the cuobjdump Triton ships.
Nothing runs: it says before any device time is spent whether a configuration fits in shared
memory, whether it spills, and how its instruction mix moves (special-function exp2 against
fused multiply-adds, say), as notes/kernel.md uses it.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import compiled_entry  # noqa: F401 (first: Triton's compiler, whatever the device)
import pandas as pd
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon._runtime import GluonASTSource
from triton.runtime.jit import mangle_type
from tune import add_grid_arguments, grid_shape

from minimodel.floor.provenance.io import write_csv
from minimodel.kernel import INTERPRETED, SUPPORTED_HEAD_DIMS, flash, policy
from minimodel.kernel.config import FwdConfig

# Multiprocessors of the GPU each architecture's policy is asked about (A100, L40S, H100/H200).
SMS = {80: 108, 86: 84, 89: 142, 90: 132}
# Problem sizes over which `policy_configs` asks the policy: every branch of it is reached.
POLICY_N = (64, 256, 1024, 2048, 4096, 16384)
POLICY_BATCH_HEADS = (1, 8, 64, 512, 4096)
# The SASS opcodes counted: special-function (exp2), FP32 multiply-add / multiply / add,
# Hopper's warpgroup matmul, and shuffles (the row reductions).
OPCODES = ("MUFU", "FFMA", "FMUL", "FADD", "HGMMA", "SHFL")


def _signature(kernel, args: dict) -> tuple[dict, dict, dict]:
    """Triton's signature, constants and divisibility hints for `args` (name -> value or type)."""
    signature, constants, attrs = {}, {}, {}
    for i, param in enumerate(kernel.params):
        value = args[param.name]
        if param.is_constexpr or (type(value) is int and value == 1
                                   and not getattr(param, "do_not_specialize", False)):
            signature[param.name], constants[param.name] = "constexpr", value
        elif isinstance(value, str):  # a pointer or descriptor type, 16-byte aligned like torch's
            signature[param.name] = value
            if value.startswith("*"):
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[param.name] = "fp32"
        else:
            signature[param.name] = "i32"
            if value % 16 == 0 and not getattr(param, "do_not_specialize", False):
                attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, constants, attrs


# A tensor argument's pointer type in Triton's signature, by its dtype.
POINTER_TYPES = {torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float32: "*fp32", torch.int32: "*i32"}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _as_types(args: dict) -> dict:
    """A launch's arguments as Triton's signature sees them: pointers and descriptors as their
    types, numbers as they are (`_signature` specializes them as a launch would)."""
    def as_type(v):
        if isinstance(v, torch.Tensor):
            if v.dtype not in POINTER_TYPES:
                raise TypeError(f"a tensor argument of dtype {v.dtype}; typed here: {list(POINTER_TYPES)}")
            return POINTER_TYPES[v.dtype]
        return v if isinstance(v, int | float) else mangle_type(v)

    return {name: as_type(v) for name, v in args.items()}


def _launch(config, shape: tuple[int, int, int, int], causal: bool, dtype=torch.float16):
    """(kernel, arguments as types, options) of `flash_attn_forward`'s launch on a contiguous
    problem of this shape and dtype (float16 or bfloat16), from the package's own `arguments` (CPU
    tensors: only their shapes, strides and dtype are read)."""
    t = torch.empty(shape, dtype=dtype)
    make = flash.arguments_of(config)
    kernel, _, args, options = make(t, t, t, t, t, 0.125, config, causal, False)
    return kernel, _as_types(args), options


def compile_for(kernel, types: dict, options: dict, arch: int = 90):
    """Triton's compiled `kernel` (tl or Gluon) for sm_`arch`, specialized as a launch with these
    arguments (name -> value or type, `_signature`) would be; no GPU needed. A Gluon kernel has its
    layouts, stages and warps in the source: only num_warps is an option."""
    signature, constants, attrs = _signature(kernel, types)
    source = GluonASTSource if getattr(kernel, "is_gluon", lambda: False)() else ASTSource
    return triton.compile(source(kernel, signature, constants, attrs),
                          target=GPUTarget("cuda", arch, 32), options=options)


def _cuobjdump(cubin: bytes, flag: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run([triton.knobs.nvidia.cuobjdump.path, flag, str(path)],
                              capture_output=True, text=True, check=True).stdout


def report(config, shape=(1, 1, 4096, 64), causal: bool = False, arch: int = 90, sass: bool = True,
           dtype=torch.float16) -> dict:
    """Registers per thread, spill stack bytes, shared memory bytes (and whether it fits), SASS
    counts (without `sass`, None: the disassembly is about 40 % of a kernel's report)."""
    if INTERPRETED:
        raise RuntimeError("kernel_report compiles the real kernels: run it without TRITON_INTERPRET=1")
    compiled = compile_for(*_launch(config, shape, causal, dtype), arch)
    cubin = compiled.asm["cubin"]
    usage = _cuobjdump(cubin, "--dump-resource-usage")
    shared = int(compiled.metadata.shared)
    found = {
        "registers": int(re.search(r"REG:(\d+)", usage).group(1)),
        "spill_stack_bytes": int(re.search(r"STACK:(\d+)", usage).group(1)),
        "shared_bytes": shared,
        "fits_shared": shared <= policy.SHARED_MEMORY[arch],
    }
    if not sass:
        return {**found, "instructions": None, **{op.lower(): None for op in OPCODES}}
    ops = collections.Counter(
        m.group(1).split(".")[0]
        for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)",
                             _cuobjdump(cubin, "--dump-sass")))
    return {**found, "instructions": sum(ops.values()), **{op.lower(): ops[op] for op in OPCODES}}


def policy_configs(arch: int) -> list[tuple]:
    """Every (config, d, causal) the tile policy can pick on `arch`, each TMA one with its fallback."""
    found = []
    for d in SUPPORTED_HEAD_DIMS:
        for causal in (False, True):
            for n in POLICY_N:
                for bh in POLICY_BATCH_HEADS:
                    args = (d, causal, "cuda", n, bh, SMS[arch], arch)
                    chain = [policy.get_fwd_config(*args)]
                    if chain[-1].path == "gluon":  # where the Gluon kernel cannot read the inputs
                        chain.append(policy.tl_config(*args))
                    if chain[-1].TMA:  # where TMA cannot
                        chain.append(policy.portable_config(d))
                    for c in chain:
                        if (c, d, causal) not in found:
                            found.append((c, d, causal))
    return found


def _report_row(cfg, shape, causal, arch, sass: bool = True, dtype=torch.float16) -> dict:
    try:
        return report(cfg, shape, causal, arch, sass, dtype)
    except Exception as err:  # e.g. a shape Triton cannot lower
        return {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_grid_arguments(parser)
    parser.add_argument("--sms", type=int, default=132, help="multiprocessors (H100/H200: 132)")
    parser.add_argument("--config", type=int, nargs=4, metavar=("BLOCK_M", "BLOCK_N", "WARPS", "STAGES"),
                        help="report this configuration instead of the shipped ones")
    parser.add_argument("--tma", action="store_true", help="with --config: load through TMA")
    parser.add_argument("--maxnreg", type=int, help="with --config: cap registers per thread")
    parser.add_argument("--gluon", action="store_true",
                        help="with --config: the Gluon kernel for Hopper (two consumer warpgroups taking "
                             "turns, BLOCK_M = 128 rows split between them, STAGES K/V buffers)")
    parser.add_argument("--arch", type=int, default=90, choices=sorted(SMS),
                        help="compute capability to compile for (80 A100, 86/89 Ampere/Ada consumer and "
                             "L40S, 90 H100/H200)")
    parser.add_argument("--policy", action="store_true",
                        help="every config the policy can pick on --arch; exit 1 if one fails to compile, "
                             "spills, or needs more shared memory than the architecture has")
    parser.add_argument("--no-sass", dest="sass", action="store_false",
                        help="registers, spills and shared memory only: no SASS instruction counts "
                             "(the disassembly is about 40 %% of each kernel's report)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float16",
                        help="the inputs' element type (default float16)")
    parser.add_argument("--csv", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    if args.policy:
        rows = [{"arch": args.arch, "d": d, "causal": causal, **cfg.as_dict(),
                 **_report_row(cfg, (1, 1, 4096, d), causal, args.arch, args.sass, DTYPES[args.dtype])}
                for cfg, d, causal in policy_configs(args.arch)]
        return _print(rows, args.csv, check=True)
    rows, seen = [], {}
    for d in args.d:
        for causal in (False, True):
            for n in args.n:
                shape = grid_shape(n, d, args)
                path = "gluon" if args.gluon else "tl_tma" if args.tma else "tl"
                cfg = (FwdConfig(*args.config, path, MAXNREG=args.maxnreg) if args.config else
                       policy.get_fwd_config(d, causal, "cuda", n, shape[0] * shape[1], args.sms, args.arch))
                key = (cfg, d, causal)
                if key not in seen:  # the same kernel serves many N: compile it once
                    seen[key] = _report_row(cfg, shape, causal, args.arch, args.sass, DTYPES[args.dtype])
                rows.append({"d": d, "causal": causal, "N": n, "dtype": args.dtype, **cfg.as_dict(),
                             **seen[key]})
    return _print(rows, args.csv)


def _print(rows, csv, check: bool = False) -> int:
    frame = pd.DataFrame(rows)
    with pd.option_context("display.width", 220, "display.max_columns", 30):
        print(frame.to_string(index=False))
    if csv:
        write_csv(csv, frame)
    if not check:
        return 0
    bad = frame["error"].notna() if "error" in frame else pd.Series(False, index=frame.index)
    bad |= (frame.get("spill_stack_bytes", 0) > 0) | ~frame.get("fits_shared", True).astype(bool)
    for _, r in frame[bad].iterrows():
        print(f"FAILS: d={r['d']} causal={r['causal']} {r['BLOCK_M']}x{r['BLOCK_N']} w{r['num_warps']} "
              f"s{r['num_stages']} {r['path']}: {r.get('error') or ''} spills "
              f"{r.get('spill_stack_bytes')} B, shared {r.get('shared_bytes')} B", file=sys.stderr)
    return 1 if bad.any() else 0


if __name__ == "__main__":
    sys.exit(main())
