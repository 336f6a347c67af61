"""Config layer: load bundle files with line numbers, override from CLI/env, check, bridge to MONAI."""
