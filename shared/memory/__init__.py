"""Memories and how they are written: sectors, the write path, batches and their chunks."""
