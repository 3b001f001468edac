"""An MCP server over stdio on the official Python SDK, for Outboard's tests and bench."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tools import build  # noqa: E402

if __name__ == "__main__":
    build("outboard-stdio-test").run("stdio")
