"""OpenAI-compatible HTTP server over the online engine."""
