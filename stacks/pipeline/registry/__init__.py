"""Evaluation, registration and the approval gate of a completed run."""
