"""The entry of the tools that compile the real kernels for a GPU they need not have, imported
before anything of minimodel and before `tune`:

    import compiled_entry  # noqa: F401 (first: Triton's compiler, whatever the device)

It chooses Triton's compiler, never its interpreter (TRITON_INTERPRET=0), where the user set
nothing; a TRITON_INTERPRET the user set is left as `minimodel.entry` leaves it.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "0")
