"""Named exceptions of the agent package. Each message is addressed to the model (and the person
reading over its shoulder): it names the path and says what is allowed or what to do next.

    from agent.exceptions import WorkspaceError
    try:
        text = workspace.read_text("src/app.py")
    except FileTooLargeError:
        ...  # read a line range instead

WorkspaceError subclasses ToolError, so a tool can let it propagate and the ToolRegistry turns it
into a clean `ToolResult.error` (the message as is, no "failed unexpectedly").
"""

from __future__ import annotations

from agent.tools.base import ToolError


class WorkspaceError(ToolError):
    """A path or file operation the workspace refuses or cannot do."""


class OutsideWorkspaceError(WorkspaceError):
    """The path escapes the workspace root (`..`, an absolute path elsewhere, a symlink out)."""


class BinaryFileError(WorkspaceError):
    """The file holds binary data, which the text tools do not show."""


class FileTooLargeError(WorkspaceError):
    """The file is over the workspace's `max_file_bytes`; read it by line ranges."""


class EditorRefusedError(WorkspaceError):
    """The editor (through the edit sink) did not apply an edit to an open buffer."""
