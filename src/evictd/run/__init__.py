"""The live daemon, `evictd run`: the composition root that builds it, the manager that runs one cycle, the
housekeeping loop around it, and what the loop needs from the node (locks, systemd notification, stop)."""
