"""Tests of mathneuro_edit.engine."""
