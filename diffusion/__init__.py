"""Entity-centric diffusion planners (flat and hierarchical)."""
