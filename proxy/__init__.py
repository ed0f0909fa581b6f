"""proxy package."""
