"""docs/architecture.md says what the code is (issue 28, item 6).

Why a test: the document is where a newcomer learns the layers, and a layer, module or import
added without it makes the document quietly wrong. Its generated sections (who imports whom,
the module index) must be current; its hand-written parts are checked where they make claims
the code can answer: the tree names every package and leaf module, and no other; the import
rule table says what ``tests/test_layers.py`` enforces; every source, test or document path it
names exists. On a failure, ``python -m tests.gen_architecture`` rewrites the generated
sections; the rest is the writer's to fix.
"""

from __future__ import annotations

import re

from tests.gen_architecture import BEGIN, COMMAND, DOC, END, LAYER_ORDER, ROOT, SRC, render
from tests.test_layers import ALLOWED, LEAVES

TEXT = DOC.read_text(encoding="utf-8")


def _section(title: str) -> str:
    """The text of the ``## title`` section, up to the next ``## ``."""
    _, found, rest = TEXT.partition(f"\n## {title}\n")
    assert found, f"docs/architecture.md has no section '## {title}'"
    return rest.split("\n## ", 1)[0]


def test_the_generated_sections_are_current() -> None:
    assert render(TEXT) == TEXT, f"docs/architecture.md is out of date: run `{COMMAND}`"


def test_the_tree_names_every_package_and_leaf_module() -> None:
    """The tree at the top names each layer (a folder of ``src/greenckpt``) and each leaf
    module, top to bottom as :data:`~tests.gen_architecture.LAYER_ORDER` has them."""
    tree = TEXT.split("```\nsrc/greenckpt/\n", 1)[1].split("```", 1)[0]
    named = re.findall(r"^  (\w+/|\w+\.py) ", tree, flags=re.MULTILINE)
    packages = [p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()]
    leaves = [p.name for p in SRC.glob("*.py") if p.stem not in ("__init__", "__main__")]
    layers = [n.removesuffix("/") for n in named if n.endswith("/")]
    assert sorted(layers) == sorted(packages)
    assert layers == list(LAYER_ORDER)
    assert sorted(n for n in named if n.endswith(".py")) == sorted(leaves)


def _may_import(cell: str, layer: str) -> set[str]:
    """The layers a "may import" cell names: those before its first ``;``, words in brackets
    aside; "every layer but X" names all the others."""
    while re.search(r"\([^()]*\)", cell):
        cell = re.sub(r"\([^()]*\)", "", cell)
    clause = cell.split(";", 1)[0]
    named = {m.group(1) for m in re.finditer(r"`(\w+)(?:/|\.py)`", clause)}
    if clause.strip().startswith("every layer but"):
        layers = {n for n in ALLOWED if n not in LEAVES and n not in ("__init__", "__main__")}
        return layers - named - {layer}
    return named


def test_the_import_rule_table_is_the_enforced_rule() -> None:
    """Each row of "Import rule" names what ``tests/test_layers.py``'s ``ALLOWED`` allows."""
    rows = re.findall(r"^\| `(\w+)(?:/|\.py)` \| (.+) \|$", _section("Import rule"), re.M)
    table = {layer: _may_import(cell, layer) for layer, cell in rows}
    declared = {n for n in ALLOWED if n not in ("__init__", "__main__")}
    assert sorted(table) == sorted(declared), "one row per layer and leaf, as ALLOWED has"
    wrong = {
        layer: {"document": sorted(table[layer]), "tests/test_layers.py": sorted(ALLOWED[layer])}
        for layer in table
        if table[layer] != ALLOWED[layer]
    }
    assert wrong == {}


def test_every_path_the_document_names_exists() -> None:
    """``runtime/agent.py``, ``docs/design/cluster.md``, ``tests/...``: each is there (in the
    hand-written text; the generated sections are the code's own)."""
    text = TEXT
    for name in ("imports", "module index"):
        head, _, rest = text.partition(BEGIN.format(name=name))
        text = head + rest.partition(END.format(name=name))[2]
    missing = []
    roots = ("docs", "tests", "benchmarks", "examples")
    for match in re.finditer(r"(?<![\w/.])((?:\w+/)+[\w.-]+\.(?:py|md|c|h|f90|toml))\b", text):
        path = match.group(1)
        top = path.split("/", 1)[0]
        base = ROOT if top in roots else SRC
        if not (base / path).is_file():
            missing.append(path)
    assert missing == []
