"""The outputs a run writes and publishes, one module each, registered in :mod:`.registry` when this package is
imported. A fourth output is one more module like these (docs/extending.md; a worked example:
tests/outputs/test_a_fourth_output_is_one_module.py runs one through run, verify, card and push --dry-run).
"""

from __future__ import annotations

# imported for their registration, in this order: the first is what a plain model folder holds
# (output_of_folder), and an output made from another comes after it
# isort: off
from . import checkpoint as checkpoint
from . import adapter as adapter
from . import gguf as gguf

# isort: on

__all__ = ["checkpoint", "adapter", "gguf"]
