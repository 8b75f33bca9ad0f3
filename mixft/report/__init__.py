"""Layer 6, reports: what a results document says, as tables, sentences, charts and frames.

    summary       the numbers: per precision means, ratios against fp32 (was aggregate)
    markdown      report.md (render_markdown, write_report)
    plots         the charts beside report.md
    frames        pandas frames for a notebook (results_frame, compare_frame)
    agreement     fp32 vs AMP predictions: flips, paired interval, McNemar (and add_agreement after a --compare)
    probe_result  what a --probe found: its cache, table and words

Imports the layers below only; never the run layer (runs/ asks this package for its file names).
"""

REPORT_NAME = "report.md"  # the comparison report the run layer writes into OUTPUT_DIR
