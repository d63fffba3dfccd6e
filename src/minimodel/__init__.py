"""minimodel: why flash attention is faster, derived, measured and verified byte by byte.

The package follows the workflow's stages (workflow/rules/*.smk, one script per rule in scripts/):

- `symbolic`: stage 1, the byte model's tables of naive and flash attention, every pass.
- `cpu`: stage 2, the PyTorch references, their measured byte traffic, this machine's roofline.
- `kernel`: stage 3, the Triton kernel and its tile policy.
- `contenders`: stage 3, attention implementations from anywhere, run in child processes.
- `gpu`: stage 3, every implementation behind one interface: the correctness sweep, the timing,
  the DRAM bytes.
- `report`: stage 4, the figures, the results README, and the comparison with a reference run.
- `floor`: below the stages, what they all share: the contract, the byte model's closed forms,
  the attention references, the correctness rule, the timers, child processes, the commands,
  the roofline's arithmetic, and `provenance` (manifests, safe writes, the machine description,
  where results may go).
- `entry`: imported first by every entry point; decides compiled or interpreted.

`python -m minimodel verify|compare` are the commands for results folders; development tools
(tile search, compiler reports, A/B timing) are in tools/, which the workflow never imports.
"""
