"""Subcommands of the trainstack CLI."""
