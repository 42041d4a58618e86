"""Test doubles and builders shared by the unit tests (imported as ``support``)."""
