"""The turn loop's internals (private): one run of model calls and tool calls."""
