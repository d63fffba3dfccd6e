"""minimodel: why flash attention is faster, derived, measured and verified byte by byte.

The package follows the workflow's stages (workflow/rules/*.smk, one script per rule in scripts/):

- `symbolic`: stage 1, the closed-form byte model of naive and flash attention (sympy).
- `cpu`: stage 2, the PyTorch references, their measured byte traffic, this machine's roofline.
- `kernel`: stage 3, the Triton kernel and its tile policy.
- `gpu`: stage 3, the timing grids, the correctness sweep and the timing against PyTorch.
- `report`: stage 4, the figures, the results README, and the comparison with a reference run.
- `provenance`: manifests, safe writes, the machine description, where results may go.
- below the stages, what several share: `contract`, `attention_ref` (the float64 reference),
  `timers`, `roofline_model`, and the byte model's formulas in `symbolic`.
- `entry`: imported first by every entry point; decides compiled or interpreted.

`python -m minimodel verify|compare` are the commands for results folders; development tools
(tile search, compiler reports, A/B timing) are in tools/, which the workflow never imports.
"""
