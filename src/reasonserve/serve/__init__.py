"""OpenAI-compatible HTTP serving over the embedded engine (``pip install reasonserve[serve]``)."""
