"""rollout-service: runs coding-agent rollouts in sandboxes for RL trainers."""
