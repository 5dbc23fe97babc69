"""syntax package."""
