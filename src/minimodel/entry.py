"""Compiled or interpreted, decided once at process entry: importing this module decides.

Triton reads TRITON_INTERPRET when a kernel is defined, that is when `minimodel.kernel` is
imported. So every entry point imports this module before anything else of minimodel (the
workflow's scripts, the tools, the tests' conftest, `python -m minimodel`):

    import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)

Without a CUDA device it sets TRITON_INTERPRET=1, and the same kernel source then runs on CPU
tensors under Triton's interpreter; a TRITON_INTERPRET the user set is left as it is. Torch is
asked only where a GPU may be (`floor.provenance.devices`): on Linux without a GPU driver's
device nodes, a process that runs no kernel imports no torch. The child processes a stage starts
(`contenders.run`, the probe of `gpu.hbm`) inherit the decision with the environment.

No module of the package imports this one, and neither does the Snakefile's own process: a
TRITON_INTERPRET=1 set there, on a CPU submit host, would reach the jobs it sends to GPU nodes.
`tools/kernel_report.py` is the one entry point that decides otherwise: it compiles the real
kernels for a GPU it does not need to have.
"""

import os
import sys

from minimodel.floor.provenance import devices

KERNEL = "minimodel.kernel"

if "TRITON_INTERPRET" not in os.environ and not devices.cuda_available():
    if KERNEL in sys.modules:  # its kernels were compiled for a GPU: too late to interpret them
        raise RuntimeError(f"minimodel.entry was imported after {KERNEL}, whose kernels are defined "
                           "by then: import minimodel.entry before anything else of minimodel")
    os.environ["TRITON_INTERPRET"] = "1"
