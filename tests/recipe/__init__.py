"""Tests of mathneuro_edit.recipe."""
