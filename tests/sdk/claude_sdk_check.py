"""The Python Claude Agent SDK driving `outboard` (its `cli_path`) over Claude Code's stream-json
protocol, for tests/tests/e2e/stream_json.rs. One scenario per run; the last stdout line is a
JSON summary the Rust test asserts on.

    python claude_sdk_check.py OUTBOARD_BIN WORKDIR query|client|permissions

The server and token come from OUTBOARD_SERVER and OUTBOARD_TOKEN, which the SDK passes on to
the program it starts.
"""

import asyncio
import json
import sys

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    query,
)


def describe(message):
    """A message as a small JSON-able dict."""
    if isinstance(message, SystemMessage):
        return {"type": "system", "subtype": message.subtype,
                "session_id": message.data.get("session_id")}
    if isinstance(message, AssistantMessage):
        blocks = []
        for block in message.content:
            if isinstance(block, TextBlock):
                blocks.append({"text": block.text})
            elif isinstance(block, ToolUseBlock):
                blocks.append({"tool_use": block.name, "id": block.id, "input": block.input})
        return {"type": "assistant", "model": message.model, "content": blocks}
    if isinstance(message, UserMessage):
        blocks = []
        if isinstance(message.content, list):
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    blocks.append({"tool_result": block.tool_use_id, "content": block.content,
                                   "is_error": block.is_error})
                elif isinstance(block, TextBlock):
                    blocks.append({"text": block.text})
        return {"type": "user", "content": blocks}
    if isinstance(message, ResultMessage):
        return {"type": "result", "subtype": message.subtype, "is_error": message.is_error,
                "num_turns": message.num_turns, "session_id": message.session_id,
                "result": message.result, "usage": message.usage,
                "total_cost_usd": message.total_cost_usd,
                "duration_ms": message.duration_ms}
    return {"type": type(message).__name__}


def options(outboard, workdir, **more):
    return ClaudeAgentOptions(cli_path=outboard, cwd=workdir, **more)


async def scenario_query(outboard, workdir):
    messages = []
    async for message in query(prompt="Say hello with echo", options=options(outboard, workdir)):
        messages.append(describe(message))
    return {"messages": messages}


async def scenario_client(outboard, workdir):
    turns = []
    async with ClaudeSDKClient(options=options(outboard, workdir)) as client:
        for prompt in ("first question", "second question"):
            await client.query(prompt)
            turns.append([describe(m) async for m in client.receive_response()])
    return {"turns": turns}


async def scenario_permissions(outboard, workdir):
    asked = []

    async def can_use_tool(tool_name, tool_input, context):
        asked.append({"tool": tool_name, "input": tool_input, "tool_use_id": context.tool_use_id})
        if len(asked) == 1:
            return PermissionResultAllow()
        return PermissionResultDeny(message="not this one, says the callback")

    async def prompts():
        yield {"type": "user", "message": {"role": "user", "content": "run two commands"}}

    messages = []
    opts = options(outboard, workdir, can_use_tool=can_use_tool)
    async for message in query(prompt=prompts(), options=opts):
        messages.append(describe(message))
    return {"asked": asked, "messages": messages}


def main():
    outboard, workdir, scenario = sys.argv[1], sys.argv[2], sys.argv[3]
    run = {"query": scenario_query, "client": scenario_client,
           "permissions": scenario_permissions}[scenario]
    summary = asyncio.run(asyncio.wait_for(run(outboard, workdir), timeout=240))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
