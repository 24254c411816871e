"""Entity-centric RL policies (Entity Interaction Transformer, baselines, SB3 bridge)."""
