"""Where every number came from, and writing it safely.

- `manifest`: the manifest each rule writes, and the checks a stage makes before it reads another
  rule's output; `reading`: reading one; `code`: the code each rule depends on (`code_closure`),
  and the commit it came from.
- `verify`: `python -m minimodel verify`, telling a run's damage from its staleness.
- `io`: writes that are complete or absent (a temporary file renamed into place).
- `machine`: the machine and software a stage ran on, and demanding a usable GPU.
- `project`: where results may be written, and sizes this machine can hold.
"""
