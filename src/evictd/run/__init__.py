"""The live daemon, `evictd run`: the composition root that builds it, the housekeeping loop around the cycle
(evictd.cycle runs one), its after-cycle hooks, and what the loop needs from the node (locks, systemd
notification, stop)."""
