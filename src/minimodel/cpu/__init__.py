"""Stage 2: measuring on the CPU.

- `references`: theory 02's tiled loop in plain PyTorch, beside the naive attention and the
  float64 reference of `minimodel.floor.attention_ref` (the floor below the stages).
- `bytecount`: the bytes those references move across the slow-memory boundary, counted op by op,
  beside torch.profiler's view.
- `roofline`: this machine's ceilings (matmul FLOP/s, copy bandwidth) and the speedup they predict.
"""
