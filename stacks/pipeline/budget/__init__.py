"""A team's budget across its runs: the table, the pipeline's reservation, the release."""
