"""The live page's preview of a repeated call (guard/preview.py): short, one line, with
secret-looking values masked, and the config key that turns it off."""

from __future__ import annotations

import pytest

from dsh_circuit_breaker import Config, ConfigError
from dsh_circuit_breaker.guard.preview import PREVIEW_CHARS, Repeat, preview


@pytest.mark.parametrize(
    ("arguments", "shown"),
    [
        ({"command": "echo cbprobe4", "description": "step 3"}, "echo cbprobe4"),
        ({"path": "/a/b", "password": "hunter2", "n": 3}, "path=/a/b password=*** n=3"),
        (
            {"command": "curl -H 'Authorization: Bearer abc123def456' x"},
            "curl -H 'Authorization: *** x",
        ),
        ({"command": "export API_KEY=s3cr3t; make"}, "export API_KEY=*** make"),
        ({"command": "git push https://x ghp_abcdefghijklmnop1234"}, "git push https://x ***"),
        ({"command": "echo 0123456789abcdef0123456789abcdef"}, "echo ***"),
        (
            {"command": "ls /home/someone/projects/app/src/a-long-directory"},
            "ls /home/someone/projects/app/src/a-long-directory",
        ),
        ({"command": "echo a\n  b"}, "echo a b"),
    ],
)
def test_a_preview_is_one_masked_line(arguments: dict[str, object], shown: str) -> None:
    assert preview(arguments, ("description",)) == shown


def test_a_preview_is_cut_to_its_length() -> None:
    text = preview({"command": "x" * 500})
    assert len(text) == PREVIEW_CHARS and text.endswith("…")


def test_a_repeat_counts_runs_of_one_call() -> None:
    repeat = Repeat()
    for allowed in [True] * 5 + [False] * 5:  # the probe: five run, the sixth on refused
        repeat.saw("Bash", "echo cbprobe4", allowed)
    assert repeat.to_json() == {"tool": "Bash", "preview": "echo cbprobe4", "ran": 5, "refused": 5}
    repeat.saw("Bash", "ls", True)  # another call starts the count again
    assert (repeat.ran, repeat.refused) == (1, 0)


def test_preview_arguments_is_a_validated_config_key() -> None:
    assert Config().preview_arguments is True
    assert Config.from_mapping({"previewArguments": False}).preview_arguments is False
    with pytest.raises(ConfigError, match="previewArguments"):
        Config.from_mapping({"previewArguments": "no"})
