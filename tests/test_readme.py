"""The README is the front door and the guides in docs/ stand on their own (issue 16): every
link resolves inside the repository, the first screen shows the two commands and the map, and
the map names every module in the order the import-linter layers enforce."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]
# Code is quoted, not linked: fenced blocks and inline spans are left out of every scan.
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
BARE_URL = re.compile(r"(?<![(<\w])(https?://[^\s)>\]*]+)")
AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")
LOCAL_HOSTS = {"localhost", "127.0.0.1"}


def _prose(path: Path) -> str:
    return INLINE_CODE.sub("", FENCE.sub("", path.read_text()))


def _links(path: Path) -> list[str]:
    return LINK.findall(_prose(path))


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", FENCE.sub("", path.read_text()), re.MULTILINE)
    return {_anchor(heading) for heading in headings}


def _documents_and_links():
    return [
        pytest.param(path, target, id=f"{path.relative_to(ROOT)}:{target}")
        for path in DOCUMENTS
        for target in _links(path)
    ]


@pytest.mark.parametrize(("path", "target"), _documents_and_links())
def test_every_link_resolves_inside_the_repository(path, target):
    """A relative link names a file of this repository (and a heading of it, if it names
    one); an absolute one may only be a localhost example, since a clone has nothing else."""
    parts = urlsplit(target)
    if parts.scheme:
        assert parts.scheme in ("http", "https") and parts.hostname in LOCAL_HOSTS, target
        return
    file = (path.parent / parts.path).resolve() if parts.path else path
    assert file.is_relative_to(ROOT), f"{target} leaves the repository"
    assert file.is_file(), f"{target} names no file"
    if parts.fragment and file.suffix == ".md":
        assert parts.fragment in _anchors(file), f"{target}: no such heading"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_bare_address_points_outside_the_repository(path):
    """GitHub turns a bare address into a link: only localhost examples may appear in prose."""
    prose = _prose(path)
    addresses = BARE_URL.findall(prose) + AUTOLINK.findall(prose)
    assert [a for a in addresses if urlsplit(a).hostname not in LOCAL_HOSTS] == []


def test_the_scans_see_links_and_headings():
    """The checks above could pass by finding nothing: they do find the README's own."""
    links = _links(README)
    assert "#map" in links and "docs/operators.md" in links
    assert {"map", "the-two-commands", "what-it-guarantees"} <= _anchors(README)
    assert _anchor("Forking a run (FORK-1, FORK-2)") == "forking-a-run-fork-1-fork-2"


def test_the_first_screen_shows_the_two_commands_and_links_the_map():
    first_screen = "\n".join(README.read_text().splitlines()[:40])
    assert "make run" in first_screen and "make test" in first_screen
    assert "](#map)" in first_screen


def _map_section() -> str:
    text = README.read_text()
    start = text.index("\n## Map\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _modules(package: str) -> list[str]:
    """Every module and package directly under `package`, as the map spells it."""
    return sorted(
        f"{package}/{entry.name}" + ("/" if entry.is_dir() else "")
        for entry in (ROOT / package).iterdir()
        if entry.name not in ("__init__.py", "__pycache__")
        and (entry.is_dir() or entry.suffix == ".py")
    )


@pytest.mark.parametrize("package", ["agentruns", "playground"])
def test_the_map_names_every_module(package):
    section = _map_section()
    assert [module for module in _modules(package) if f"`{module}`" not in section] == []


def _contract_layers() -> list[set[str]]:
    """The layers of the import-linter contract, lowest first, without the package prefix."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [
        {name.strip().removeprefix("agentruns.") for name in re.split(r"[|:]", layer)}
        for layer in reversed(contract["layers"])
    ]


def test_the_layer_sentence_names_the_enforced_layers_in_order():
    """The README's sentence is the contract read bottom up, sibling for sibling."""
    paragraph = next(p for p in _map_section().split("\n\n") if "←" in p)
    *groups, top = paragraph.split("←")
    groups = [groups[0].split(":")[-1], *groups[1:], top.split(".")[0]]  # the chain alone
    written = [set(re.findall(r"`([a-z_]+)`", group)) for group in groups]
    assert written == _contract_layers()


def test_every_module_of_the_engine_has_a_layer():
    """No module sits outside the layers, so the sentence leaves none out."""
    layered = {name for layer in _contract_layers() for name in layer}
    modules = {
        Path(module.rstrip("/")).stem
        for module in _modules("agentruns")
        if (ROOT / module).is_file() or (ROOT / module / "__init__.py").exists()
    }
    assert modules - layered == set()
