"""Test doubles, builders and waits shared by the unit and integration tests (imported as
``support``: pytest puts tests/ on the import path, pyproject.toml)."""
