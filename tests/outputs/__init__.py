"""Tests of mathneuro_edit.outputs."""
