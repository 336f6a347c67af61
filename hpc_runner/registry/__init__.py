"""Bundles shared between users: search path (search), metadata schema (metadata), MANIFEST (manifest),
pack/install (pack, install), checks without running (verify, verify_configs, verify_net), trust and
--safe (trust, safe_mode, targets, user_config), and new bundles from a template (scaffold)."""
