"""recognize package."""
