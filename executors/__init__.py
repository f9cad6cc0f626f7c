"""Executors: run a plan as a DAG, with the defense layers 2-4 and resilience."""
