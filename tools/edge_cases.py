"""The kernel's edge cases on a CUDA device, for any version of the kernel source.

    python tools/edge_cases.py                               # this tree's kernel
    python tools/edge_cases.py --kernel /tmp/old_attention_flash.py

Each case runs in a child process (an illegal memory access ends a CUDA context) and prints
its largest error against float64 over the rows it checks, or the error it raised:
- a transposed (B, N, H, d) = (1, 600000, 16, 256) input, causal: row n of a head starts at
  n·H·d elements, past 2³¹ from row 524,288;
- the same at d = 128 with the tensors 2 bytes off alignment, so TMA cannot be used;
- B·H = 70,000 heads, past the grid's y axis.
A development tool: the workflow never imports it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys

import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor.attention_ref import reference_attn

CASES = ("long_d256", "long_d128_misaligned", "many_heads")


def _load(path):
    spec = importlib.util.spec_from_file_location("kernel_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernel_under_test"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _long(kernel, N, d, misalign):
    H = 16
    base = torch.empty(3 * N * H * d + misalign, dtype=torch.float16, device="cuda")
    q, k, v = (base[misalign + i * N * H * d:][:N * H * d].view(1, N, H, d).transpose(1, 2)
               for i in range(3))
    base.normal_(generator=torch.Generator(device="cuda").manual_seed(0))
    out = kernel.flash_attn_forward(q, k, v, causal=True)
    rows = torch.tensor(sorted({0, 1000, 524_287, 524_288, 600_000 - 1, N - 1}), device="cuda")
    worst = {}
    for h in (0, H - 1):
        s = (q[0, h, rows].double() @ k[0, h].double().T) / d**0.5
        s = s.masked_fill(torch.arange(N, device="cuda")[None, :] > rows[:, None], float("-inf"))
        exact = torch.softmax(s, -1) @ v[0, h].double()
        err = (out[0, h, rows].double() - exact).abs().amax(-1)
        for r, e in zip(rows.tolist(), err.tolist(), strict=True):
            worst[r] = max(worst.get(r, 0.0), e)
    return worst


def _many_heads(kernel):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 35_000, 40, 16, device="cuda", generator=gen).half() for _ in range(3))
    out = kernel.flash_attn_forward(q, k, v, causal=True)
    return {"all rows": (out.double() - reference_attn(q, k, v, causal=True, upcast=True)).abs().max().item()}


def child(case: str, path: str) -> None:
    kernel = _load(path)
    if case == "long_d256":
        result = _long(kernel, 600_000, 256, 0)
    elif case == "long_d128_misaligned":
        result = _long(kernel, 1_100_000, 128, 1)
    else:
        result = _many_heads(kernel)
    print(json.dumps(result))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", default="src/minimodel/kernel/flash.py")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        child(args.case, args.kernel)
        return 0
    failed = False
    for case in CASES:
        proc = subprocess.run([sys.executable, __file__, "--kernel", args.kernel, "--case", case],
                              capture_output=True, text=True)
        if proc.returncode:
            failed = True
            print(f"{case}: raised: {proc.stderr.strip().splitlines()[-1][:300]}")
            continue
        errors = json.loads(proc.stdout.strip().splitlines()[-1])
        failed |= max(errors.values()) > 2e-3
        print(f"{case}: max |error| vs float64 per row: "
              + ", ".join(f"{row}: {err:.2e}" for row, err in errors.items()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
