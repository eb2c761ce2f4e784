"""sweep: expand a study (trace x policy x capacity x cost model) from Hydra config, run it
on Ray actors sharing one trace, and record every curve in MLflow. Entry: `python -m sweep`."""
