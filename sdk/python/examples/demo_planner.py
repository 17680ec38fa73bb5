"""Runs margin_connector.examples.demo_planner (see its docstring); the same as
`python -m margin_connector.examples.demo_planner` once the package is installed."""

from margin_connector.examples.demo_planner import main

if __name__ == "__main__":
    main()
