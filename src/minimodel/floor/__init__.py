"""The floor: what every stage shares, below them all. It imports no stage, and each stage imports
it and its own packages, never another stage (tests/test_layers.py).

- `contract`: what stages hand each other (paths, columns, names, status words);
- `byte_model`: the byte model's closed forms (`forward`, `backward`, `theory`), which stage 1
  writes as tables and the other stages set their measurements beside;
- `attention_ref`: naive attention and the float64 reference every correctness check compares with;
- `correctness_rule`: the rule every check applies, and the float64 gradients a backward is judged by;
- `timers`: the ways a GPU call is timed, and a call's host cost;
- `roofline_model`: the roofline's arithmetic, applied to the CPU's ceilings and the GPU's;
- `subprocesses`: child processes that end with their stage;
- `commands`: how a command of `python -m minimodel` is described and parsed;
- `provenance`: manifests, safe writes, the machine description, where results may go.
"""
