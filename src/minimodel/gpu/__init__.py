"""Stage 3: the kernel measured on the GPU (or, without one, under Triton's interpreter).

- `grids`: the timing grids, defined once from the config (lab 02's grid, FlashAttention's).
- `correctness`: the sweep against float64 and its pass/fail rule.
- `timing`: the kernel against naive PyTorch and SDPA's backends, GPU time per call.
- `hbm`: the GPU's own DRAM bytes (Nsight Compute) beside the byte model.

`correctness`, `timing` and `hbm` import the kernel: a process that runs them imports
`minimodel.entry` first, which decides whether the kernel is compiled or interpreted.
"""
