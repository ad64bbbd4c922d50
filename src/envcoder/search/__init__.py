"""Automatic shaping: proposers (LLMs, offline search), prompts, sandboxed validation and the loop."""
