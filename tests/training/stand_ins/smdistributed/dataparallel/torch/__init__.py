"""Test stand-in (see torch_smddp.py)."""
