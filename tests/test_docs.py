"""The documentation: the site builds, and no relative link in README.md or docs/ is broken.

README.md is the front door and docs/ the manual, built as a site by mkdocs (mkdocs.yml).
These tests build the site with ``mkdocs build --strict`` (mkdocs.yml turns every link and
anchor problem into a warning, so strict fails on it), check every relative link in
README.md and docs/*.md by hand (the README is not part of the site, and the check runs the
same rule on both), and show on a synthetic page that both checks catch a broken link.

Usage: ``python -m pytest tests/test_docs.py -q``
"""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import yaml  # PyYAML: a dependency of mkdocs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def documentation_pages(root: Path = ROOT) -> list[Path]:
    """README.md and every page under docs/ (not docs/bench/: raw data)."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


# ------------------------------------------------------------------ reading markdown

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+).+?\1")
# [text](target) and ![alt](target); the target may carry a "title" after a space.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
ATX_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) for every line outside fenced code blocks, code spans blanked."""
    lines, fence = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        opening = FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)[0] * len(opening.group(1))
            continue
        if fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) <= {fence[0]}:
                fence = None
            continue
        # Indented code blocks are not used in these pages; code spans are (`[--flag]`).
        lines.append((number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)))
    return lines


def links_in(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline link, image and reference definition in prose.

    A link's text may wrap onto the next line, so the prose is searched as one text (code
    blocks blanked, line numbers kept)."""
    prose = text.splitlines()
    kept = dict(prose_lines(text))
    prose = "\n".join(kept.get(number, "") for number in range(1, len(prose) + 1))
    found = [(prose.count("\n", 0, m.start()) + 1, m.group(1)) for m in INLINE_LINK.finditer(prose)]
    for number, line in kept.items():
        definition = REFERENCE_DEFINITION.match(line)
        if definition:
            found.append((number, definition.group(1)))
    return sorted(found)


def heading_texts(text: str) -> list[str]:
    """The text of every ATX heading outside code, as a renderer sees it (markup removed)."""
    texts = []
    for _, line in prose_lines_keeping_code_spans(text):
        match = ATX_HEADING.match(line)
        if match:
            heading = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", match.group(2))  # links -> their text
            texts.append(heading.replace("`", "").replace("*", ""))
    return texts


def prose_lines_keeping_code_spans(text: str) -> list[tuple[int, str]]:
    """Like prose_lines, but a heading's code spans are part of its text (and of its anchor)."""
    original = text.splitlines()
    return [(number, original[number - 1]) for number, _ in prose_lines(text)]


# ------------------------------------------------------------------ anchors


def _dedup(slugs: list[str], separator: str) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for slug in slugs:
        if slug in seen:
            seen[slug] += 1
            slug = f"{slug}{separator}{seen[slug]}"
        else:
            seen[slug] = 0
        result.add(slug)
    return result


def mkdocs_anchors(text: str) -> set[str]:
    """The ids mkdocs gives the headings (Python-Markdown's toc slugify, duplicates _1, _2)."""
    slugs = []
    for heading in heading_texts(text):
        value = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
        value = re.sub(r"[^\w\s-]", "", value).strip().lower()
        slugs.append(re.sub(r"[-\s]+", "-", value))
    return _dedup(slugs, "_")


def github_anchors(text: str) -> set[str]:
    """The ids GitHub gives the headings (punctuation dropped, each space a hyphen; -1, -2)."""
    slugs = [re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in heading_texts(text)]
    return _dedup(slugs, "-")


def anchors_of(page: Path, docs_dir: Path) -> set[str]:
    """Anchors a link may name: a docs page is read on GitHub and on the site, so only the
    ids both give its headings; other pages (the README) are read on GitHub."""
    text = page.read_text(encoding="utf-8")
    if docs_dir in page.resolve().parents:
        return mkdocs_anchors(text) & github_anchors(text)
    return github_anchors(text)


# ------------------------------------------------------------------ the check

EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # https:, mailto:, ...


def broken_links(pages: list[Path], docs_dir: Path = DOCS) -> list[str]:
    """One line per relative link whose file does not exist or whose #anchor names no heading."""
    problems = []
    for page in pages:
        for number, target in links_in(page.read_text(encoding="utf-8")):
            if EXTERNAL.match(target) or target.startswith("//"):
                continue  # not checked here: CI reaches no network
            path_part, _, anchor = target.partition("#")
            where = f"{page.name}:{number}: {target}"
            if path_part.startswith("/"):
                problems.append(f"{where}: absolute path (use a relative link)")
                continue
            resolved = (page.parent / path_part).resolve() if path_part else page.resolve()
            if not resolved.exists():
                problems.append(f"{where}: no such file")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors_of(resolved, docs_dir):
                problems.append(f"{where}: no heading with this anchor in {resolved.name}")
    return problems


def build_site(config: Path, site_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site_dir),
        ],
        check=False,
        capture_output=True,
        text=True,
        cwd=config.parent,
        timeout=300,
    )


# ------------------------------------------------------------------ the tests


def test_the_site_builds_strict_with_every_page(tmp_path):
    result = build_site(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    built = {p.parent.name for p in (tmp_path / "site").glob("*/index.html")}
    pages = {p.stem for p in DOCS.glob("*.md") if p.stem != "index"}
    assert pages <= built, f"pages not built: {sorted(pages - built)}"
    assert (tmp_path / "site" / "index.html").is_file()


def test_every_docs_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s*([\w.-]+\.md)\s*$", nav, flags=re.MULTILINE))
    assert listed == {p.name for p in DOCS.glob("*.md")}


def test_every_relative_link_resolves():
    pages = documentation_pages()
    assert len(pages) > 5 and all(p.is_file() for p in pages)
    assert sum(len(links_in(p.read_text(encoding="utf-8"))) for p in pages) > 30  # the check saw links
    assert broken_links(pages) == []


def test_the_readme_links_every_docs_page():
    linked = {target.partition("#")[0] for _, target in links_in((ROOT / "README.md").read_text(encoding="utf-8"))}
    missing = {f"docs/{p.name}" for p in DOCS.glob("*.md") if p.name != "index.md"} - linked
    assert not missing, f"README.md does not link {sorted(missing)}"


def test_ci_reads_the_readme_test_command():
    """.ci/run runs the first ```bash block after the "Install and run the tests" heading."""
    awk_program = re.search(r"awk '([^']+)' README\.md", (ROOT / ".ci" / "run").read_text()).group(1)
    command = subprocess.run(
        ["awk", awk_program, "README.md"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.strip()
    assert command == (
        "python -m pip install -U pip; "
        'python -c "import torch" 2>/dev/null || python -m pip install --no-compile torch==2.13.0; '
        'python -m pip install --no-compile -e ".[test]" && python -m pytest'
    )


# A synthetic manual: one good link of each kind, one broken link of each kind.
SYNTHETIC_README = """# Demo

[good page](docs/page.md) [good anchor](docs/page.md#a-section) [own anchor](#demo)
[missing page](docs/missing.md) [missing anchor](docs/page.md#no-such-section)

```bash
echo "[inside a code block](docs/also-missing.md) is not a link"
```

`[in a code span](docs/nor-this.md)` is not one either; [web](https://example.org) is not checked.
"""
SYNTHETIC_PAGE = """# Page

## A section

Back to [the section](#a-section), [a broken one](#a-sectoin), [raw data](bench/x.json),
[a link whose text
wraps](missing-too.md).
"""
# The project's own link rules (mkdocs.yml's validation) on a one-page site.
SYNTHETIC_MKDOCS = yaml.safe_dump(
    {
        "site_name": "demo",
        "docs_dir": "docs",
        "nav": [{"Page": "page.md"}],
        "validation": yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["validation"],
    }
)


@pytest.fixture
def synthetic_manual(tmp_path) -> Path:
    (tmp_path / "docs" / "bench").mkdir(parents=True)
    (tmp_path / "README.md").write_text(SYNTHETIC_README)
    (tmp_path / "docs" / "page.md").write_text(SYNTHETIC_PAGE)
    (tmp_path / "docs" / "bench" / "x.json").write_text("{}")
    (tmp_path / "mkdocs.yml").write_text(SYNTHETIC_MKDOCS)
    return tmp_path


def test_the_link_check_finds_each_broken_link_and_only_those(synthetic_manual):
    problems = broken_links(documentation_pages(synthetic_manual), synthetic_manual / "docs")
    assert problems == [
        "README.md:4: docs/missing.md: no such file",
        "README.md:4: docs/page.md#no-such-section: no heading with this anchor in page.md",
        "page.md:5: #a-sectoin: no heading with this anchor in page.md",
        "page.md:6: missing-too.md: no such file",
    ]


def test_the_strict_build_fails_on_a_broken_link(synthetic_manual, tmp_path):
    assert "anchors: warn" in SYNTHETIC_MKDOCS  # the project's rules, as strict turns them into errors
    misspelt = build_site(synthetic_manual / "mkdocs.yml", tmp_path / "misspelt")
    assert misspelt.returncode != 0 and "a-sectoin" in misspelt.stdout + misspelt.stderr
    page = synthetic_manual / "docs" / "page.md"
    page.write_text(SYNTHETIC_PAGE.replace("#a-sectoin", "#a-section").replace("missing-too.md", "page.md"))
    fixed = build_site(synthetic_manual / "mkdocs.yml", tmp_path / "fixed")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    page.write_text(page.read_text() + "\n[gone](gone.md)\n")
    broken = build_site(synthetic_manual / "mkdocs.yml", tmp_path / "broken")
    assert broken.returncode != 0 and "gone.md" in broken.stdout + broken.stderr


def test_anchors_follow_both_renderers():
    text = "# Is AMP faster here? The probe\n## What `--amp` chooses\n## Notes\n## Notes\n"
    assert mkdocs_anchors(text) == {"is-amp-faster-here-the-probe", "what-amp-chooses", "notes", "notes_1"}
    assert github_anchors(text) == {"is-amp-faster-here-the-probe", "what---amp-chooses", "notes", "notes-1"}
