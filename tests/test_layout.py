"""The layers' contract, checked from the source: imports flow cli -> web / library / research -> model ->
shared modules, with no cycle (imports inside functions count), and no module grows past 400 lines."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "imgtxt"
SHARED = {"imgtxt", "imgtxt.errors", "imgtxt.paths", "imgtxt.safe_text"}
ENTRY = "imgtxt.__main__"   # `python -m imgtxt`: the command, so it stands above the cli layer
# what each layer may import besides itself and the shared modules
ALLOWED = {
    "entry": {"cli"},
    "model": set(),
    "library": {"model"},
    "research": {"model"},
    "web": {"library", "model"},
    "cli": {"library", "model", "research", "web"},
}


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every imgtxt module `name` imports, at module level or inside functions."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            # `import imgtxt.a.b` also runs imgtxt.a's __init__; count the deepest known module
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def layer(name: str) -> str | None:
    parts = name.split(".")
    if name == ENTRY:
        return "entry"
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if state.get(nxt) is None:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_find_cycle_sees_a_cycle_through_a_function_level_import():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    # a package's __init__ is not an edge to its children: `imgtxt` re-exports lazily, by name
    edges = {name: {t for t in targets if not name.startswith(t + ".") and t != "imgtxt"}
             for name, targets in graph().items()}
    assert find_cycle(edges) is None


def test_imports_follow_the_layers():
    wrong = []
    for name, targets in graph().items():
        source = layer(name)
        for target in targets:
            dest = layer(target)
            if source and dest and dest != source and dest not in ALLOWED[source]:
                wrong.append(f"{name} -> {target}")
            if source and not dest and target not in SHARED:
                wrong.append(f"{name} -> {target} (not a shared module)")
            if name in SHARED and dest:
                # shared modules import nothing of the layers (the package's lazy re-export is by name, not import)
                wrong.append(f"{name} -> {target}")
    assert wrong == []


def test_every_module_is_in_a_layer_or_shared():
    assert sorted(n for n in modules() if not layer(n) and n not in SHARED) == []


def test_no_module_over_400_lines():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert long == {}


def test_every_package_is_listed_for_the_wheel():
    """pyproject.toml lists the packages by hand (weights/ is mapped into imgtxt.weights): a new package missing
    there would be left out of the wheel."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(PACKAGE.parent).parts) for p in PACKAGE.rglob("__init__.py")}
    assert found <= listed and "imgtxt.weights" in listed
