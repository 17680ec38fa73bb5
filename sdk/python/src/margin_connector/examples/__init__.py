"""Example Planners on this SDK: the steady planner of the cross-SDK matrix
and the demo Planner (`python -m margin_connector.examples.NAME`)."""
