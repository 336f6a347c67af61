"""Bundles shared between users: search path (search), metadata schema (metadata), MANIFEST (manifest),
pack/install (archive, install), trust (trust), --safe's allow-list and targets (safe_policy, targets,
user_config), and new bundles from a template (scaffold). Below the config layer: the checks that load a
bundle's configs (``hpc-runner verify``, ``--safe``) are ``config/verify*.py`` and ``config/safe_mode.py``."""
