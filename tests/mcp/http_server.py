"""A Streamable HTTP MCP server on the official Python SDK that requires
`Authorization: Bearer $MCP_TOKEN` (401 otherwise), for Outboard's tests and bench.

Usage: MCP_TOKEN=... python3 http_server.py PORT  (0: any free port). Prints `listening PORT`
once it accepts connections.
"""

import asyncio
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import uvicorn  # noqa: E402
from starlette.responses import PlainTextResponse  # noqa: E402

from tools import build  # noqa: E402


class RequireBearer:
    def __init__(self, app, token):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != self.expected:
                response = PlainTextResponse("unauthorized", status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def main():
    token = os.environ["MCP_TOKEN"]
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    mcp = build("outboard-http-test", host="127.0.0.1", port=port, log_level="WARNING")
    app = RequireBearer(mcp.streamable_http_app(), token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    print(f"listening {sock.getsockname()[1]}", flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
