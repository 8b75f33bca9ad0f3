"""The tree stays lint-clean and formatted: ruff, configured in pyproject.toml, run as part of the suite.

CI runs exactly the README's test command, so the linter rides along as a test rather than a separate step.
"""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    return subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_check_is_clean():
    result = _ruff("check", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_leaves_the_tree_unchanged():
    result = _ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_lint_check_fails_on_a_violation(tmp_path):
    # The same configuration on a file with an unused import: ruff must refuse it (the check can fail).
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    result = _ruff("check", "--config", str(ROOT / "pyproject.toml"), str(bad))
    assert result.returncode == 1 and "F401" in result.stdout
