"""What a deployment is made of: LLM model configurations, hardware parts, cost models, capacities in bytes and blocks, and the engines' counting presets."""
