"""Run directories, ranking of candidates, and the evaluation driver."""
