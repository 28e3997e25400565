"""The package's structure, read from its source with ``ast`` (no module is imported).

Every import is counted: absolute and relative, at module level, inside functions and under
``if TYPE_CHECKING:`` (a type-only import still means the two modules know each other). The
unit of the folder-level checks is a top-level folder of ``transformer/`` (``model``,
``training``, ...) or a top-level module (``config.py``, ``cli.py``; ``__init__`` for the
package root).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "transformer"

# The layers, lowest first: a unit imports only from its own layer or the layers below it, so the
# data's way through the package (text -> batches -> model -> training or decoding -> text) reads
# from the bottom up.
LAYERS: list[set[str]] = [
    # settings, the safe reading of a run's files and the user's errors: the standard library and PyTorch only
    {"config", "config_dict", "errors", "lazy", "run_files", "threads"},
    # text -> token ids, the corpora, and the model (the paper in plain PyTorch)
    {"text", "corpus", "model"},
    # batches, decoding algorithms, the CPU and CUDA engines that speed a model up, and the number
    # format a model translates in (inference_precision.py, which asks the engines what the machine
    # can do)
    {"data", "decoding", "cpu", "cuda", "inference_precision"},
    # the run directory: its layout and names, a run's model, configuration, tokenizers,
    # checkpoints, metrics and alignments, and its lock: what the layers above it read and write
    {"run"},
    # the package root (``from transformer import load_model``: it exports from ``run``)
    {"__init__"},
    # what a trained run is used for: translating, looking at its attention, other formats; and
    # the translation memory (SQLite, no torch), which translating and serving consult
    {"translate", "visualize", "interop", "memory"},
    # training: it scores its validation translations with ``translate``
    {"training"},
    # the server (a translator behind HTTP) and the paper's recipes (run configurations)
    {"serve", "recipes"},
    # the entry points: the command line and the demo, the only ones that start a training
    {"cli", "demo"},
]
# The units outside ``training`` that may import it: the ones that start a training run.
TRAINING_STARTERS = {"cli", "demo"}

# Where a run file's name is defined: the run directory's layout, and the tokenizer's own module
# for the tokenizer files (``text`` lies below ``run``; the layout imports those names).
NAME_HOMES = ("transformer/run/layout.py", "transformer/text/tokenizer.py")
# Other formats' files that share a name with a run's: there the name means that format's file.
OTHER_FORMATS = {
    "transformer/interop/hf.py": {"config.json", "model.safetensors"},  # a Hugging Face model directory
    "transformer/interop/hub.py": {"config.json", "model.safetensors"},  # a Hugging Face Hub repository
    "transformer/training/data_cache.py": {".lock"},  # a data cache entry's build lock
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """``{dotted name: path}`` of every module of the package (a package by its ``__init__.py``)."""
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module ``name`` denotes: itself, or its longest prefix that is a module."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(known: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """``{module: the package's modules it imports}``, from every import statement it holds."""
    known = known or modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if (target := _resolve(alias.name, known)) is not None:
                        targets.add(target)
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the module's package, one level up per extra dot
                    package = name if is_package else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{node.module}" if node.module else package
                else:
                    base = node.module or ""
                for alias in node.names:  # ``from pkg import module`` imports the module
                    full = f"{base}.{alias.name}"
                    target = full if full in known else _resolve(base, known)
                    if target is not None:
                        targets.add(target)
        targets.discard(name)
        graph[name] = targets
    return graph


def unit(module: str) -> str:
    """The top-level folder or module of ``module`` (``__init__`` for the package root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    folders: dict[str, set[str]] = defaultdict(set)
    for source, targets in graph.items():
        folders[unit(source)].update(unit(t) for t in targets if unit(t) != unit(source))
    return dict(folders)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def module_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import circles among the modules of one folder (each folder on its own)."""
    inside = {source: {t for t in targets if unit(t) == unit(source)} for source, targets in graph.items()}
    return cycles(inside)


def layer_of() -> dict[str, int]:
    return {name: level for level, names in enumerate(LAYERS) for name in names}


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    """``"importer -> imported"`` for each import of a module in a higher layer."""
    layers = layer_of()
    return sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                  if layers.get(unit(target), -1) > layers.get(unit(source), len(LAYERS)))


def training_importers(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                  if unit(target) == "training" and unit(source) not in {"training", *TRAINING_STARTERS})


def _strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of ``tree`` that are not docstrings."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            docstrings.add(id(node.body[0].value))
    return [node for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def run_file_names() -> set[str]:
    """The names a run directory's files have: the string constants ``*_FILE``/``*_DIR`` of their homes."""
    names = set()
    for home in NAME_HOMES:
        for node in ast.parse((PACKAGE.parent / home).read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str) \
                    and any(isinstance(t, ast.Name) and t.id.endswith(("_FILE", "_DIR")) for t in node.targets):
                names.add(node.value.value)
    return names


def spelled_elsewhere() -> list[str]:
    """``path:line name`` for each run file name written out as a string outside its home."""
    names = run_file_names()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE.parent).as_posix()
        if where in NAME_HOMES:
            continue
        for node in _strings(ast.parse(path.read_text(encoding="utf-8"))):
            if node.value in names and node.value not in OTHER_FORMATS.get(where, ()):
                found.append(f"{where}:{node.lineno} {node.value}")
    return found


# ------------------------------------------------------------------------------------------------
def test_every_folder_and_top_level_module_has_a_layer():
    units = {unit(name) for name in modules()}
    assert units - set(layer_of()) == set(), "place the new folder or module in LAYERS"


def test_no_two_folders_import_each_other():
    assert cycles(folder_graph(imports())) == []


def test_no_import_circle_inside_a_folder():
    assert module_circles(imports()) == []


def test_only_the_entry_points_import_training():
    assert training_importers(imports()) == []


def test_no_import_goes_up_a_layer():
    assert upward_arrows(imports()) == []


def test_each_run_file_name_is_written_once():
    names = run_file_names()
    assert {"config.json", "model.safetensors", "run_config.json", "metrics.jsonl", "alignments.jsonl", ".lock",
            "tokenizer.json", "trainer_state.json", "latest.json"} <= names
    assert spelled_elsewhere() == []


def _is_test_module(name: str) -> bool:
    return name.startswith("test_") or name.startswith("tests.test_")


def importers_of_test_modules(tests: Path | None = None) -> dict[str, list[str]]:
    """The files of ``tests/`` that import a test module (``test_x`` or ``tests.test_x``), with what
    they import: a test module is run, not shared; what tests share lives in conftest.py (fixtures)
    and the ``*_helpers.py`` modules."""
    tests = tests or Path(__file__).resolve().parent
    found = {}
    for path in sorted(tests.rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names
                                          if node.module == "tests"}
        if imported := sorted(name for name in names if _is_test_module(name)):
            found[path.relative_to(tests).as_posix()] = imported
    return found


def test_the_graph_sees_relative_and_function_level_imports(tmp_path):
    """The reader itself: a relative import and an import inside a function are both edges."""
    known = {"transformer.a": tmp_path / "a.py", "transformer.b": tmp_path / "b.py",
             "transformer.c": tmp_path / "c" / "__init__.py", "transformer.c.d": tmp_path / "c" / "d.py"}
    (tmp_path / "c").mkdir()
    known["transformer.a"].write_text("def f():\n    from transformer.b import x\n", encoding="utf-8")
    known["transformer.b"].write_text("from .c import d\n", encoding="utf-8")
    known["transformer.c"].write_text("from . import d\n", encoding="utf-8")
    known["transformer.c.d"].write_text("from .. import a\n", encoding="utf-8")
    graph = imports(known)
    assert graph == {"transformer.a": {"transformer.b"}, "transformer.b": {"transformer.c.d"},
                     "transformer.c": {"transformer.c.d"}, "transformer.c.d": {"transformer.a"}}
    assert cycles(folder_graph(graph)) == [["a", "b", "c"]]


def test_no_test_module_imports_another():
    assert importers_of_test_modules() == {}


def test_the_test_import_reader_sees_each_spelling(tmp_path):
    """The reader itself: plain, ``from``, package-qualified and function-level imports of a test module
    count; a helper module, and a test function imported from a helper, do not."""
    (tmp_path / "test_a.py").write_text("import test_b\nfrom tests import test_c\n", encoding="utf-8")
    (tmp_path / "b_helpers.py").write_text("def f():\n    from tests.test_d import x\n", encoding="utf-8")
    (tmp_path / "test_e.py").write_text("from b_helpers import test_like\nimport c_helpers\n", encoding="utf-8")
    assert importers_of_test_modules(tmp_path) == {"b_helpers.py": ["tests.test_d"],
                                                   "test_a.py": ["test_b", "tests.test_c"]}


if __name__ == "__main__":  # the figures: python tests/test_structure.py
    graph = imports()
    folders = folder_graph(graph)
    print("upward arrows:", len(upward_arrows(graph)), *upward_arrows(graph), sep="\n  ")
    print("folder loops:", len(cycles(folders)), *cycles(folders), sep="\n  ")
    print("circles inside a folder:", len(module_circles(graph)), *module_circles(graph), sep="\n  ")
    print("training imported from outside:", len(training_importers(graph)), *training_importers(graph), sep="\n  ")
    pairs = sorted((a, b) for a, targets in folders.items() for b in targets if a < b and a in folders.get(b, ()))
    print("folders importing each other:", len(pairs), *pairs, sep="\n  ")
    print("run file names written out elsewhere:", len(spelled_elsewhere()), *spelled_elsewhere(), sep="\n  ")
    print("test files importing a test module:", len(importers_of_test_modules()),
          *(f"{path}: {', '.join(names)}" for path, names in importers_of_test_modules().items()), sep="\n  ")
