"""What people and monitoring see of the daemon: Prometheus metrics, the health endpoint, structured logs of
each cycle, and the terminal live view."""
