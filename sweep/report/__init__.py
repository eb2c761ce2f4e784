"""What a sweep writes when it ends: the console tables (tables), the per-window ranking
(windows), report.html (html) and its figures (plots, tierplot, families), from the curves
of a run or from a store (sweeps); summaries and regimes in regimes."""
