"""dagwright: plan a query into a DAG of tool calls and run it reliably."""
