"""context-proxy: an OpenAI-compatible proxy that keeps conversations inside the window."""

__version__ = "0.1.0"
