"""The tools both test MCP servers offer, on the official Python SDK (FastMCP)."""

import asyncio
import base64
import os

from mcp.server.fastmcp import FastMCP, Image

# A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def build(name: str, **settings) -> FastMCP:
    mcp = FastMCP(name, **settings)

    @mcp.tool()
    def echo(text: str) -> str:
        """Answers with the text it was given."""
        return f"echo: {text}"

    @mcp.tool()
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        return a + b

    @mcp.tool()
    def pixel() -> Image:
        """Returns a 1x1 PNG image."""
        return Image(data=PNG, format="png")

    @mcp.tool()
    async def sleep(seconds: float) -> str:
        """Sleeps, then answers."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @mcp.tool()
    def fail(reason: str) -> str:
        """Always fails with the reason (an isError result)."""
        raise ValueError(f"failed on purpose: {reason}")

    @mcp.tool()
    def append(path: str, line: str) -> str:
        """Appends the line to the file at `path` (the crash harness counts the calls run)."""
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        return f"appended {line}"

    @mcp.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @mcp.tool()
    def env_names() -> str:
        """The names of the server's environment variables, sorted."""
        return ",".join(sorted(os.environ))

    @mcp.tool()
    def big(kib: int) -> str:
        """Answers with `kib` KiB of text."""
        return "x" * (kib * 1024)

    @mcp.tool()
    def secret_digest(var: str) -> str:
        """Whether the environment variable `var` is set, and its length (never its value)."""
        value = os.environ.get(var)
        return "unset" if value is None else f"set, {len(value)} characters"

    return mcp
