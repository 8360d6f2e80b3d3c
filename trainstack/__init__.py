"""trainstack domain logic: plain Python, no CDK imports (stacks/ and tests import it)."""
