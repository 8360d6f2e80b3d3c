"""`trainstack report`: one self-contained HTML page of a run (collect.py reads AWS, render.py draws)."""
