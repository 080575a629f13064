"""Helpers for plugin authors: inline registration and contract checks."""

from prl.testing.contract import assert_plugin_contract

__all__ = ["assert_plugin_contract"]
