"""Training: the synchronous RL loop, the learner, SFT, checkpoints."""
