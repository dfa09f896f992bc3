"""wmrl: Slurm-native World Model RL for post-training LLM research agents."""

__version__ = "0.1.0"
