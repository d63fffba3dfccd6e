"""Contenders: attention forwards from anywhere, checked and timed beside the project's kernel.

`spec` reads a contender from the config and finds its module; `run` calls it in a child process
with a time limit per point; `check` puts its outputs through the correctness rule.
"""

from minimodel.contenders.spec import Contender, ContenderError, file_sha256, load, module_path, parse

__all__ = ["Contender", "ContenderError", "file_sha256", "load", "module_path", "parse"]
