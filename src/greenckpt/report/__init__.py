"""Reports: every table, plot and summary of runs, profiles and plans, with every energy figure
labelled (measured, estimated, SYNTHETIC).

Runs: :mod:`~greenckpt.report.run_text`, :mod:`~greenckpt.report.run_plot`,
:mod:`~greenckpt.report.run_files`; profiles: :mod:`~greenckpt.report.profile_tables`,
:mod:`~greenckpt.report.profile_plots`, :mod:`~greenckpt.report.profile_progress`; plans:
:mod:`~greenckpt.report.plan_report`. Nothing is imported here, so ``greenckpt.report.x`` costs
only what ``x`` needs (matplotlib only when a figure is drawn). Why: docs/design/reports.md.
"""
