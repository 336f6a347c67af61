"""The resources a process was given (CPUs for now), decided in one place; stdlib only at import."""
