"""Stage 2: measuring on the CPU.

- `references`: plain PyTorch attention, the naive one step by step and theory 02's tiled loop;
  `reference_attn` with `upcast=True` is the float64 reference every check compares with.
- `bytecount`: the bytes those references move across the slow-memory boundary, counted op by op,
  beside torch.profiler's view.
- `roofline`: this machine's ceilings (matmul FLOP/s, copy bandwidth) and the speedup they predict.
"""
