"""What the model is told of a tool: its name, the API's description, its line in the system prompt and
the input it takes. Data, no behaviour: each tool's module (tools/compile_kernel.py, tools/benchmark.py)
holds its own spec, and the agent's toolbox offers them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KERNEL_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kernel_code": {
            "type": "string",
            "description": "The complete Python module: imports, the extension source, its build call and ModelNew.",
        }
    },
    "required": ["kernel_code"],
}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str  # the API's tool description
    brief: str  # its line in the system prompt ("" for a tool never offered)
    input_schema: dict[str, Any] = field(default_factory=lambda: KERNEL_INPUT)

    @property
    def schema(self) -> dict[str, Any]:
        """The tool as the Messages API takes it."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}
