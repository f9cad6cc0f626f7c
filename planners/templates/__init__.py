"""Default prompt templates of the planner (text files read with importlib.resources)."""
