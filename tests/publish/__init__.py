"""Tests of mathneuro_edit.publish."""
