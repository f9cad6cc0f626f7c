"""dagwright eval: datasets, attribution, cassettes, reports, the CLI gate."""
