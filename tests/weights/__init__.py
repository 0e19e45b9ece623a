"""Tests of mathneuro_edit.weights."""
