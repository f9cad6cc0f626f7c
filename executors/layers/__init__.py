"""Defense layers applied when a step attempt fails."""
