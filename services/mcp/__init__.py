"""`mnemoflow mcp`: a Model Context Protocol server whose tools call the gateway through the Python client."""
