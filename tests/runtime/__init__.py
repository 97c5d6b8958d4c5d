"""Tests of the energy-aware runtime."""
