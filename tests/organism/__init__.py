"""Tests of the shipped organism."""
