"""See the evolution: one offline HTML report, PNG plots, and experiment trackers.

    from evo.report.data import gather            # lineage + artifacts -> one JSON-able model
    from evo.report.html import write_report      # the model -> a self-contained HTML page (Plotly inlined)
    from evo.report.plots import write_version_plots, write_workspace_plots   # matplotlib PNGs
    from evo.report.trackers import log_version, log_run                      # wandb / tensorboard / trackio

Everything here reads: lineage in bulk (`Lineage.read_all()`), run artifacts
from `evo.settings.artifact_dir`. Nothing writes lineage or touches git refs.
Plotting libraries and tracker clients are imported inside the functions that
use them, so importing this package costs nothing.
"""
