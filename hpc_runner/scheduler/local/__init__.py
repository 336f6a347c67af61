"""The local executor: no scheduler, the tasks run here in the foreground."""
