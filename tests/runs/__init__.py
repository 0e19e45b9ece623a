"""Tests of mathneuro_edit.runs."""
