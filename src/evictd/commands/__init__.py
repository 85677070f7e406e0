"""The offline commands' own logic: simulate, replay, explain, record export, shadow-report, the generated
completion and man page. `evictd.cli` parses arguments and calls into these; the rendering they share with the
daemon is evictd.cycle.render."""
