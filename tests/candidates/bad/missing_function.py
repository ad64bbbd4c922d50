"""Defines nothing the API calls."""
X = 1.0
