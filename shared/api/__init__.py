"""The REST API's request and response schemas: pydantic and the standard library only, shareable by clients."""
