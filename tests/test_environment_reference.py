"""docs/ENVIRONMENT.md is current, and names every environment variable the code reads.

The reference is generated from the settings classes (``scripts/env_reference.py``); this test
regenerates it and compares. Then it reads the code of the libraries, devstack, the example
flows and the flow-repo template for every read of the environment (``os.environ.get(X)``,
``os.environ[X]``, ``os.getenv(X)``, ``env.get(X)`` on a variable holding the environment,
with ``X`` a string, a module constant or a loop over a constant tuple) and asserts each
variable has a row of its own in the reference.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import lakehouse_writer
import producer_lib
from producer_lib.settings import EnvSettings
from scripts import env_reference

REPO = Path(__file__).resolve().parents[1]
SCANNED = ["producer_lib", "lakehouse_writer", "devstack", "flows", "templates/flow_repo"]
VARIABLE = re.compile(r"^[A-Z][A-Z0-9_]*$")
# Names a mapping of the environment goes by in the code (``env = os.environ if ... else``).
ENV_NAMES = {"environ", "env"}
# Built from a secret's name at run time; the reference has it as SECRET_<NAME>.
PATTERNS = {"SECRET_": "SECRET_<NAME>"}


def _is_environment(node: ast.expr) -> bool:
    """``os.environ``, ``environ`` or ``env``: an expression the code holds the environment in."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ"
    return isinstance(node, ast.Name) and node.id in ENV_NAMES


def _constants(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level ``NAME = "X"`` and ``NAME = ("X", "Y")`` as name -> strings."""
    found: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            strings = [value] if isinstance(value, ast.Constant) else []
            if isinstance(value, ast.Tuple | ast.List):
                strings = [e for e in value.elts if isinstance(e, ast.Constant)]
            texts = [s.value for s in strings if isinstance(s.value, str)]
            for target in targets:
                if isinstance(target, ast.Name) and texts:
                    found[target.id] = texts
    return found


def _loop_targets(tree: ast.Module, constants: dict[str, list[str]]) -> dict[str, list[str]]:
    """``for v in CONSTANT`` (statements and comprehensions): v -> the constant's strings."""
    loops: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.For | ast.comprehension):
            target, source = node.target, node.iter
            if (
                isinstance(target, ast.Name)
                and isinstance(source, ast.Name)
                and source.id in constants
            ):
                loops[target.id] = constants[source.id]
    return loops


def _names(arg: ast.expr, known: dict[str, list[str]]) -> list[str]:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.Name):
        return known.get(arg.id, [])
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name):  # secret_env_var(name)
        return ["SECRET_"] if arg.func.id == "secret_env_var" else []
    return []


def variables_read(path: Path) -> set[str]:
    """The environment variables a Python file reads by name."""
    tree = ast.parse(path.read_text(), str(path))
    constants = _constants(tree)
    known = {**constants, **_loop_targets(tree, constants)}
    found: set[str] = set()
    for node in ast.walk(tree):
        arg = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            getter = node.func
            if getter.attr == "get" and _is_environment(getter.value):
                arg = node.args[0]
            elif getter.attr == "getenv":
                arg = node.args[0]
        elif isinstance(node, ast.Subscript) and _is_environment(node.value):
            arg = node.slice
        if arg is not None:
            found.update(_names(arg, known))
    return {PATTERNS.get(name, name) for name in found if VARIABLE.match(name) or name in PATTERNS}


def documented() -> set[str]:
    """The variables with a row of their own in docs/ENVIRONMENT.md."""
    text = (REPO / "docs" / "ENVIRONMENT.md").read_text()
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_<>]*)` \|", text, re.M))


def test_the_reference_is_generated_from_the_current_settings():
    current = (REPO / "docs" / "ENVIRONMENT.md").read_text()
    assert current == env_reference.render(), "run: .venv/bin/python scripts/env_reference.py"


def settings_classes() -> set[type[EnvSettings]]:
    """Every settings class of the two libraries (each module imported, ``__main__`` not)."""
    for package in (producer_lib, lakehouse_writer):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)
    found: set[type[EnvSettings]] = set()
    pending = list(EnvSettings.__subclasses__())
    while pending:
        cls = pending.pop()
        if cls.__module__.startswith(("producer_lib.", "lakehouse_writer.")):
            found.add(cls)
        pending += cls.__subclasses__()
    return found


def test_every_settings_class_has_a_section():
    """A new settings class (a new system) must be added to scripts/env_reference.py."""
    listed = {cls for _, _, classes in env_reference.SECTIONS for cls in classes}
    missing = {
        cls.__qualname__
        for cls in settings_classes() - listed
        # a subclass that only renames a listed class (KafkaSecretSettings) reads its variables
        if not any(
            issubclass(cls, s) and cls.model_fields.keys() == s.model_fields.keys() for s in listed
        )
    }
    assert not missing, f"settings classes missing from scripts/env_reference.py: {missing}"


def test_the_scanner_finds_the_ways_the_code_reads_the_environment(tmp_path):
    source = tmp_path / "example.py"
    source.write_text(
        "import os\n"
        'HOME_ENV = "A_HOME"\n'
        'CONNECT = ("B_REMOTE", "B_MODE")\n'
        "def f(environ=None):\n"
        "    env = os.environ if environ is None else environ\n"
        '    os.environ.get("C_ONE"); os.environ["C_TWO"]; os.getenv("C_THREE")\n'
        "    os.environ.get(HOME_ENV); env.get('C_FOUR'); env['C_FIVE']\n"
        "    [v for v in CONNECT if env.get(v)]\n"
        "    os.environ.get(secret_env_var(name))\n"
        '    conf.get("spark.master"); {**os.environ}\n'
    )
    assert variables_read(source) == {
        "A_HOME",
        "B_REMOTE",
        "B_MODE",
        "C_ONE",
        "C_TWO",
        "C_THREE",
        "C_FOUR",
        "C_FIVE",
        "SECRET_<NAME>",
    }


@pytest.mark.parametrize("folder", SCANNED)
def test_every_variable_the_code_reads_is_documented(folder):
    read = {
        name: path.relative_to(REPO)
        for path in sorted((REPO / folder).rglob("*.py"))
        for name in variables_read(path)
    }
    missing = {name: str(path) for name, path in read.items() if name not in documented()}
    assert not missing, f"read but not in docs/ENVIRONMENT.md (scripts/env_reference.py): {missing}"
