"""The analysis tools committed beside their results (``results/**/*.py``) still import what they use.

They are re-run by hand from their READMEs, not in CI (each needs a dataset or minutes of rollouts); this
catches the commonest way they rot, a library name they import moving or going away.
"""

import ast
import importlib.util
from pathlib import Path

import pytest

RESULTS = Path(__file__).parents[1] / "results"
TOOLS = sorted(RESULTS.rglob("*.py"))


def test_there_are_tools_to_check():
    assert TOOLS


@pytest.mark.parametrize("tool", TOOLS, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_ecrl_name_a_results_tool_imports_exists(tool):
    for node in ast.walk(ast.parse(tool.read_text(), filename=str(tool))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ecrl":
                    importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ecrl":
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), (
                    f"{tool.relative_to(RESULTS)}: from {node.module} import {alias.name} no longer resolves"
                )
