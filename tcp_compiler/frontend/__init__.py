"""Model frontends: Hugging Face configs and checkpoints to IR graphs."""
