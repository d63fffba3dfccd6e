"""The entry of the tools that compile the real kernels for a GPU they need not have
(`tools/kernel_report.py`): importing this module decides, as `minimodel.entry` does for every
other entry point, and it decides for Triton's compiler whatever the device, never its
interpreter:

    import compiled_entry  # noqa: F401 (first: Triton's compiler, whatever the device)

It sets TRITON_INTERPRET=0 where the user set nothing; a TRITON_INTERPRET the user set is left as
it is, as `minimodel.entry` leaves it (kernel_report then says it compiles the real kernels only).
Imported before anything of minimodel and before `tune`, whose `minimodel.entry` then finds the
choice made and leaves it alone.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "0")
