"""Stage 3: the kernel measured on the GPU (or, without one, under Triton's interpreter).

- `grids`: the timing grids, defined once from the config (lab 02's seed grid, FlashAttention's).
- `correctness`: the sweep against float64 and its pass/fail rule.
- `timing`: the kernel against naive PyTorch and SDPA's backends, GPU time per call.
- `hbm`: the GPU's own DRAM bytes (Nsight Compute) beside the byte model.

Its modules import Triton; `minimodel.kernel` is imported first, so that its interpreter switch
is set before Triton defines anything, whichever module of this package is imported first.
"""

import minimodel.kernel  # noqa: F401 (the interpreter switch, before any import of triton)
