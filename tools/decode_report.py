"""What the split-KV decode kernels compile to on Hopper, read without a GPU: registers, spills,
shared memory, for every head dim, query length, group and dtype given.

    python tools/decode_report.py                       # d 64, 128, 256; L_q 1, 4; groups 1, 4, 8
    python tools/decode_report.py --d 128 --len-q 1 --group 8 --dtype bfloat16 --csv decode.csv

Both kernels of `minimodel.kernel.decode` are compiled for sm_90 (the H100/H200) with Triton's own
ptxas, as `flash_decode` launches them (its tile policy, `get_decode_config`; the split kernel
with and without its partial outputs), each pointer typed by its own tensor's dtype
(`cache_seqlens` as int32) and 16-byte aligned, every integer argument a 32-bit scalar. Nothing
runs: exit status 1 where a kernel fails to compile, spills, or needs more shared memory than
sm_90 has.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import compiled_entry  # noqa: F401 (first: Triton's compiler, whatever the device)
import pandas as pd
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import minimodel.entry  # noqa: F401 (after compiled_entry, it finds the choice made and keeps it)
from minimodel.floor.provenance.io import write_csv
from minimodel.kernel import decode

SHARED_MEMORY_SM90 = 232448  # bytes of shared memory one block may use on sm_90
POINTER = {"float16": "*fp16", "bfloat16": "*bf16"}


def _compile(kernel, types: dict, constants: dict, options: dict, arch: int):
    """Triton's compiled `kernel` for sm_`arch`: `types` names each runtime argument's type."""
    signature = {p.name: ("constexpr" if p.name in constants else types[p.name]) for p in kernel.params}
    attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(kernel.params)
             if signature[p.name].startswith("*")}
    return triton.compile(ASTSource(kernel, signature, constants, attrs),
                          target=GPUTarget("cuda", arch, 32), options=options)


def _usage(compiled) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(compiled.asm["cubin"])
        text = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "--dump-resource-usage", str(path)],
                              capture_output=True, text=True, check=True).stdout
    shared = int(compiled.metadata.shared)
    return {"registers": int(re.search(r"REG:(\d+)", text).group(1)),
            "spill_stack_bytes": int(re.search(r"STACK:(\d+)", text).group(1)),
            "shared_bytes": shared, "fits_shared": shared <= SHARED_MEMORY_SM90}


def kernels(d: int, len_q: int, group: int, dtype: str) -> list[tuple[str, object, dict, dict, dict]]:
    """(name, kernel, types, constants, options) of each launch `flash_decode` makes at this shape."""
    cfg = decode.get_decode_config(1, 8, 131072, d)
    io = POINTER[dtype]
    split_types = {"Q": io, "K": io, "V": io, "SEQLENS": "*i32", "O": io, "O_PART": "*fp32",
                   "LSE_PART": "*fp32", "qk_scale": "fp32"}
    split_types.update({p.name: "i32" for p in decode._decode_split_kernel.params
                        if p.name not in split_types})
    block_m = max(16, triton.next_power_of_2(group * len_q))
    options = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    found = []
    for partial in (False, True):
        constants = {"LEN_Q": len_q, "GROUP": group, "BLOCK_M": block_m, "BLOCK_N": cfg.BLOCK_N,
                     "HEAD_DIM": d, "PARTIAL": partial}
        found.append((f"split{'+partials' if partial else ''}", decode._decode_split_kernel, split_types,
                      constants, options))
    combine_types = {"O_PART": "*fp32", "LSE_PART": "*fp32", "O": io}
    combine_types.update({p.name: "i32" for p in decode._decode_combine_kernel.params
                          if p.name not in combine_types})
    found.append(("combine", decode._decode_combine_kernel, combine_types,
                  {"LEN_Q": len_q, "BLOCK_S": triton.next_power_of_2(cfg.splits), "HEAD_DIM": d},
                  {"num_warps": 4}))
    return found


def report(d_values, len_q_values, groups, dtypes, arch: int = 90) -> pd.DataFrame:
    """One row per kernel compiled: its shape, tile and resource usage (or the compiler's error)."""
    if decode.INTERPRETED:
        raise RuntimeError("decode_report compiles the real kernels: run it without TRITON_INTERPRET=1")
    rows = []
    for dtype in dtypes:
        for d in d_values:
            for len_q in len_q_values:
                for group in groups:
                    for name, kernel, types, constants, options in kernels(d, len_q, group, dtype):
                        row = {"kernel": name, "dtype": dtype, "d": d, "len_q": len_q, "group": group,
                               "BLOCK_N": constants.get("BLOCK_N"), **options}
                        try:
                            row.update(_usage(_compile(kernel, types, constants, options, arch)))
                        except Exception as err:  # a shape Triton cannot lower: reported, and exit 1
                            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
                        rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d", type=int, nargs="+", default=list(decode.SUPPORTED_HEAD_DIMS),
                        choices=decode.SUPPORTED_HEAD_DIMS, help="head dims")
    parser.add_argument("--len-q", type=int, nargs="+", default=[1, 4], help="query lengths")
    parser.add_argument("--group", type=int, nargs="+", default=[1, 4, 8], help="query heads per KV head")
    parser.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"], choices=sorted(POINTER))
    parser.add_argument("--csv", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    frame = report(args.d, args.len_q, args.group, args.dtype)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(frame.to_string(index=False))
    if args.csv:
        write_csv(args.csv, frame)
    bad = frame["error"].notna() if "error" in frame else pd.Series(False, index=frame.index)
    if "spill_stack_bytes" in frame:
        bad |= frame["spill_stack_bytes"].fillna(0).gt(0) | ~frame["fits_shared"].fillna(False).astype(bool)
    return 1 if bad.any() else 0


if __name__ == "__main__":
    sys.exit(main())
