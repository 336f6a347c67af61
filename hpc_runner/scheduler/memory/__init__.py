"""The in-memory cluster: a second scheduler the tests drive, behind the same Executor interface."""
