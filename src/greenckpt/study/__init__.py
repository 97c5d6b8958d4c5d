"""Studies: a paper's experiment as one declarative file, run with repeats and summarised.

Why: a saving is only believable with its spread. ``greenckpt study SPEC`` runs every cell of
a design (factors × levels × repeats) through the energy-aware runtime, keeps every run's
report, and turns them into statistics (geometric means with t-intervals on the log values,
wu2018's Eq. 2 percentages against a baseline, the study's noise, implausible results
flagged) and one self-contained HTML report. The study file format:
docs/formats.md ("Study file").
"""
