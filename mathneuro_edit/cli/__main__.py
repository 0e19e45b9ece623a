"""``python -m mathneuro_edit.cli``: the same command line as ``mathneuro-edit`` (torchrun launches it this way)."""

from .main import main

main()
