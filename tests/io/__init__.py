"""Tests of the parallel read/write engine (greenckpt.io) on the real disk."""
