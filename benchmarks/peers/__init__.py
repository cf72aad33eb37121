"""Peer engines run side by side with dpsql, each in its own environment."""
