"""prl's config system: pydantic models, plugin-composed unions, argv/file resolution."""
