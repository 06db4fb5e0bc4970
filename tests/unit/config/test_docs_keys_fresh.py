"""docs/operators.md carries the key table that `autorecovery config keys --markdown` prints."""

from pathlib import Path

from click.testing import CliRunner

from autorecovery.cli.config import config

DOC = Path(__file__).resolve().parents[3] / "docs" / "operators.md"


def test_operator_doc_lists_every_key_as_the_code_declares_it():
    out = CliRunner().invoke(config, ["keys", "--markdown"])
    assert out.exit_code == 0, out.output
    rows = [line for line in out.output.splitlines() if line.startswith("| `")]
    assert len(rows) > 50
    doc = DOC.read_text()
    stale = [row for row in rows if row not in doc]
    assert not stale, "docs/operators.md key table is stale; regenerate it with `autorecovery config keys --markdown`:\n" + "\n".join(stale[:5])
