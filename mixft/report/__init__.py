"""Layer 6, reports: what a results document says, as tables, sentences, charts and frames.

    summary       the numbers: per precision means, ratios against fp32 (was aggregate)
    markdown      report.md (render_markdown, write_report)
    plots         the charts beside report.md
    frames        pandas frames for a notebook (results_frame, compare_frame)
    agreement     fp32 vs AMP predictions: flips, paired interval, McNemar (and add_agreement after a --compare)
    probe_result  what a --probe found: its cache, table and words

Imports the layers below only; never the run layer. Its file name, like every name in OUTPUT_DIR, is
``mixft.output_names``'s (``REPORT_NAME``, ``CHART_PATTERN``); ``mixft.runs.outdir`` lists them all.
"""

from mixft.output_names import REPORT_NAME  # noqa: F401 - the comparison report's file name, spelled at the ground
