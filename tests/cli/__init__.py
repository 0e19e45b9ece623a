"""Tests of mathneuro_edit.cli."""
