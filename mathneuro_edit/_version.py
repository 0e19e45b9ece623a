"""The package version: one home, read by the lazy ``mathneuro_edit.__init__``, the lock, cards and shard metadata.

pyproject.toml's ``version`` must equal it (tests/test_layout.py checks).
"""

__version__ = "0.1.0"
