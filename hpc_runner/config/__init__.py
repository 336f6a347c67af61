"""Config layer: load bundle files with line numbers, override from CLI/env, check, bridge to MONAI.

The checks of a loaded config or bundle live here too, above the registry: pre-flight (preflight),
--safe (safe_mode) and ``hpc-runner verify`` (verify, verify_configs, verify_net)."""
