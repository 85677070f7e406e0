"""The offline commands' own logic (simulate, shadow-report, the generated completion and man page) and the
rendering of decisions that all commands share. `evictd.cli` parses arguments and calls into these."""
