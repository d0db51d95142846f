"""Algorithm plugins, one module per family. Importing a module registers its plugins (see registry.py)."""
