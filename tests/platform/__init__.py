"""Tests of the platform layer (fake sysfs/proc trees; synthetic, no hardware needed)."""
