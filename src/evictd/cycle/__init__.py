"""One housekeeping cycle as the shell sees it: the manager that runs it over the adapters' protocols (`manager`)
and what it reports (`report`), the finished cycle that after-cycle hooks
receive (`finished`), the names of a run and of a decision (`ids`), and how reports and thresholds are written for
people and programs (`render`). Everything above the adapters (observe, record, run, commands) speaks this
vocabulary."""
