"""Cost models: rollout, training and weight sync families behind the `simrl.cost.base` seam."""
