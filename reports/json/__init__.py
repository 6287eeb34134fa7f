"""The JSON documents: `summary --json` (versioned, docs/json-schema.md) and the comparison."""
