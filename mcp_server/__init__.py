"""MCP over streamable HTTP at ``/mcp``: the agent tools, served by Engram itself.

The tools call Engram's REST API in-process with the caller's own token, so what a token may
do over MCP is exactly what it may do over the API.
"""
