"""The measured step-time model: NVIDIA's aiconfigurator-core data as tables (`tables.py`, built
once per configuration and kept on disk), where the data ends (`grid.py`), the compiled
interpolation (`step.py`), and the one boundary to the package (`aic.py`)."""
