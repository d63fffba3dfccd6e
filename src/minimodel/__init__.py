"""minimodel: why flash attention is faster, derived, measured and verified byte by byte.

Modules: `symbolic` (closed-form byte model), `attention` (PyTorch references),
`bytecount` (measured byte traffic), `roofline` (machine ceilings), `attention_flash`
(the Triton kernel), `correctness` and `timing` (GPU stages), `plots`, `manifest`.
"""
