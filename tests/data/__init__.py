"""Tests of mathneuro_edit.data."""
