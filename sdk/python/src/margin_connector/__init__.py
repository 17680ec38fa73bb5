"""margin_connector: links a Planner to Margin at /machine and runs it (SPEC O3)."""
