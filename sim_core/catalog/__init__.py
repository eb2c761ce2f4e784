"""The catalog a deployment is described from: LLM model configurations, hardware parts, cost
models, capacities in bytes and blocks, and the engines' counting presets."""
