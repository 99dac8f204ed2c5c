"""known_hosts reading and writing, checked against OpenSSH's own ssh-keygen."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import asyncssh
import pytest

from ddptui.remote.hostkeys import KnownHosts, append_lines, fingerprint, key_line


def new_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519").convert_to_public()


def public(key: asyncssh.SSHKey) -> str:
    return key.export_public_key("openssh").decode().strip()


def test_keys_for_names_the_lines_that_record_a_host(tmp_path: Path) -> None:
    mine, other, hashed = new_key(), new_key(), new_key()
    hashed_file = tmp_path / "hashed"
    hashed_file.write_text(f"10.0.0.7 {public(hashed)}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(hashed_file)], check=True, capture_output=True)
    text = "\n".join(
        [
            "# a comment",
            f"10.0.0.5 {public(mine)}",
            "garbage that is not a known_hosts line",
            f"10.0.0.6,gpu-b {public(other)}",
            hashed_file.read_text().strip(),
            f"gpu-*,10.0.0.5 {public(other)}",
        ]
    )
    known = KnownHosts(tmp_path / "kh", text)
    assert [(k.lineno, k.key) for k in known.keys_for("10.0.0.5", 22)] == [(2, mine), (6, other)]
    assert [(k.lineno, k.key) for k in known.keys_for("gpu-b", 22)] == [(4, other), (6, other)]
    assert [(k.lineno, k.key) for k in known.keys_for("10.0.0.7", 22)] == [(5, hashed)]
    assert known.keys_for("10.0.0.9", 22) == []


def test_a_port_entry_hides_the_plain_one_as_in_asyncssh(tmp_path: Path) -> None:
    on_port, plain = new_key(), new_key()
    known = KnownHosts(tmp_path / "kh", f"[h]:2222 {public(on_port)}\nh {public(plain)}\n")
    assert [k.key for k in known.keys_for("h", 2222)] == [on_port]
    assert [k.key for k in known.keys_for("h", 22)] == [plain]
    assert [k.key for k in known.keys_for("h", 2200)] == [plain]


def test_an_entry_for_the_resolved_ip_counts(tmp_path: Path) -> None:
    key = new_key()
    known = KnownHosts(tmp_path / "kh", f"192.0.2.1 {public(key)}\n")
    assert known.keys_for("gpu-a", 22) == []
    assert [k.key for k in known.keys_for("gpu-a", 22, "192.0.2.1")] == [key]


def test_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert KnownHosts.read(tmp_path / "nope").keys_for("h", 22) == []


def test_keys_recorded_in_other_files_count_and_say_where(tmp_path: Path) -> None:
    user, system = new_key(), new_key()
    (tmp_path / "user").write_text(f"h {public(user)}\n")
    (tmp_path / "system").write_text(f"# admins\nh,g {public(system)}\n")
    known = KnownHosts.read(tmp_path / "user", tmp_path / "system", tmp_path / "absent")
    assert known.path == tmp_path / "user"
    assert known.files == (tmp_path / "user", tmp_path / "system")
    assert [(k.file.name, k.lineno, k.key) for k in known.keys_for("h", 22)] == [
        ("user", 1, user),
        ("system", 2, system),
    ]
    assert [(k.file.name, k.key) for k in known.keys_for("g", 22)] == [("system", system)]


@pytest.mark.parametrize("port", [22, 2222])
def test_appended_lines_are_found_by_openssh(port: int, tmp_path: Path) -> None:
    path = tmp_path / "new" / ".ssh" / "known_hosts"
    key = new_key()
    append_lines(path, [key_line("192.0.2.8", port, key)])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    name = "192.0.2.8" if port == 22 else f"[192.0.2.8]:{port}"
    found = subprocess.run(
        ["ssh-keygen", "-F", name, "-f", str(path)], capture_output=True, text=True, check=False
    )
    assert found.returncode == 0
    assert public(key) in found.stdout


def test_appending_keeps_existing_lines_and_mends_a_missing_newline(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    first, second = new_key(), new_key()
    path.write_text(f"a {public(first)}")
    append_lines(path, [key_line("b", 22, second)])
    known = KnownHosts.read(path)
    assert [k.key for k in known.keys_for("a", 22)] == [first]
    assert [(k.lineno, k.key) for k in known.keys_for("b", 22)] == [(2, second)]


def test_fingerprint_is_what_ssh_keygen_prints(tmp_path: Path) -> None:
    key = new_key()
    (tmp_path / "k.pub").write_text(public(key) + "\n")
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(tmp_path / "k.pub")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout.split()[1] == fingerprint(key)


def test_files_read_again_unchanged_are_not_parsed_again_and_a_change_is_seen(
    tmp_path: Path,
) -> None:
    path, system = tmp_path / "known_hosts", tmp_path / "system"
    first, second = new_key(), new_key()
    path.write_text(f"a {public(first)}\n")
    system.write_text(f"c {public(second)}\n")
    known = KnownHosts.read(path, system)
    # Every host of a cluster reads the same files: one parse for all of them.
    assert KnownHosts.read(path, system) is known
    append_lines(path, [key_line("b", 22, second)])
    again = KnownHosts.read(path, system)
    assert again is not known
    assert [k.key for k in again.keys_for("b", 22)] == [second]
    assert known.keys_for("b", 22) == []
    # Another set of files is another parse, and the first is still kept.
    assert KnownHosts.read(path) is not again
    assert KnownHosts.read(path, system) is again
