"""Tests of mathneuro_edit.evaluation."""
