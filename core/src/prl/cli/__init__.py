"""The prl command line."""
