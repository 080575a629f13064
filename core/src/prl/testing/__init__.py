"""Helpers for plugin authors: inline registration and contract checks."""
