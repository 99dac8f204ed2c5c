"""Bad hosts files, run through the real CLI: one message naming the key, exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.cli import main

TWO_HOSTS = """
[[hosts]]
name = "gpu-a"
address = "10.0.0.1"

[[hosts]]
name = "gpu-b"
address = "10.0.0.2"
"""
A = '[[hosts]] #1 "gpu-a"'
B = '[[hosts]] #2 "gpu-b"'


def _cluster(lines: str) -> str:
    return f"[cluster]\n{lines}\n{TWO_HOSTS}"


def _second_host(lines: str) -> str:
    return f"{TWO_HOSTS}{lines}\n"


def _job(lines: str) -> str:
    return f"{TWO_HOSTS}\n[job]\n{lines}\n"


# (test id, file text, the message after "ddptui config: FILE: ")
BAD_FILES = [
    (
        "port-string",
        _second_host('port = "22"'),
        f'{B}: port: expected an integer 1–65535, found "22" (a string)',
    ),
    (
        "port-bool",
        _cluster("port = true"),
        "[cluster]: port: expected an integer 1–65535, found true (a boolean)",
    ),
    ("port-zero", _cluster("port = 0"), "[cluster]: port: expected an integer 1–65535, found 0"),
    ("port-high", _second_host("port = 65536"), f"{B}: port: expected an integer 1–65535"),
    (
        "port-date",
        _cluster("port = 1979-05-27"),
        "[cluster]: port: expected an integer 1–65535, found 1979-05-27 (a date)",
    ),
    (
        "typo-cluster",
        _cluster('identity_fle = "~/.ssh/id"'),
        '[cluster]: unknown key "identity_fle" — did you mean "identity_file"?',
    ),
    (
        "typo-host",
        '[[hosts]]\nname = "gpu-a"\nadress = "10.0.0.1"\n',
        f'{A}: unknown key "adress" — did you mean "address"?',
    ),
    (
        "typo-job",
        _job("nproc_per_nodes = 2"),
        '[job]: unknown key "nproc_per_nodes" — did you mean "nproc_per_node"?',
    ),
    (
        "typo-table",
        f"[clustr]\nport = 22\n{TWO_HOSTS}",
        'unknown top-level key "clustr" — did you mean "cluster"?',
    ),
    (
        "cluster-key-in-host",
        _second_host("master_port = 29400"),
        f'{B}: "master_port" is cluster-wide: set it in [cluster]',
    ),
    (
        "host-key-in-cluster",
        _cluster('address = "10.0.0.9"'),
        '[cluster]: "address" is per host: set it in each [[hosts]] entry',
    ),
    (
        "machine-key-at-top",
        f'user = "alice"\n{TWO_HOSTS}',
        '"user" must be inside a table: [cluster]',
    ),
    ("user-spaces", _cluster('user = "al ice"'), "[cluster]: user: expected a user name"),
    ("gpus-negative", _second_host("gpus = -1"), f'{B}: gpus: expected "all", a number of GPUs'),
    ("gpus-word", _cluster('gpus = "some"'), '[cluster]: gpus: expected "all"'),
    ("gpus-empty", _second_host("gpus = []"), f"{B}: gpus: expected"),
    ("gpus-twice", _second_host("gpus = [0, 1, 0]"), f"{B}: gpus[2]: GPU 0 is listed twice"),
    (
        "gpus-element",
        _second_host('gpus = [0, "1"]'),
        f'{B}: gpus[1]: expected a GPU index (an integer ≥ 0), found "1" (a string)',
    ),
    (
        "ifname-long",
        _cluster('socket_ifname = "a-very-long-interface"'),
        "[cluster]: socket_ifname: expected",
    ),
    (
        "master-port-word",
        _cluster('master_port = "automatic"'),
        '[cluster]: master_port: expected "auto" or an integer 1–65535, found "automatic"',
    ),
    ("backend", _cluster('backend = "mpi"'), '[cluster]: backend: expected "auto", "nccl" or'),
    (
        "timeout-zero",
        _cluster("connect_timeout = 0"),
        "[cluster]: connect_timeout: expected a number of seconds > 0, found 0",
    ),
    (
        "timeout-nan",
        _cluster("connect_timeout = nan"),
        "[cluster]: connect_timeout: expected a number of seconds > 0, found nan (a float)",
    ),
    (
        "torch-timeout-negative",
        _cluster("torch_import_timeout = -5"),
        "[cluster]: torch_import_timeout: expected a number of seconds > 0, found -5",
    ),
    (
        "parallel-zero",
        _cluster("max_parallel_connects = 0"),
        "[cluster]: max_parallel_connects: expected an integer ≥ 1, found 0",
    ),
    (
        "disk-negative",
        _cluster("min_free_disk_gb = -1.5"),
        "[cluster]: min_free_disk_gb: expected a number of GB ≥ 0, found -1.5 (a float)",
    ),
    (
        "skew-string",
        _cluster('max_clock_skew_s = "2s"'),
        '[cluster]: max_clock_skew_s: expected a number of seconds > 0, found "2s"',
    ),
    (
        "name-missing",
        '[[hosts]]\nname = "gpu-a"\naddress = "10.0.0.1"\n[[hosts]]\naddress = "10.0.0.2"\n',
        "[[hosts]] #2: name: missing",
    ),
    (
        "address-missing",
        '[[hosts]]\nname = "gpu-a"\n',
        f"{A}: address: missing",
    ),
    (
        "name-spaces",
        '[[hosts]]\nname = "gpu a"\naddress = "10.0.0.1"\n',
        "[[hosts]] #1: name: expected a name of letters, digits",
    ),
    (
        "address-with-user",
        '[[hosts]]\nname = "gpu-a"\naddress = "alice@10.0.0.1"\n',
        f"{A}: address: expected a hostname or an IP address",
    ),
    (
        "name-duplicate",
        TWO_HOSTS.replace('"gpu-b"', '"GPU-A"'),
        '[[hosts]] #2 "GPU-A": name: [[hosts]] #1 "gpu-a" already uses this name',
    ),
    (
        "address-duplicate",
        TWO_HOSTS.replace('"10.0.0.2"', '"10.0.0.1"'),
        f"{B}: address: {A} already uses 10.0.0.1 port 22",
    ),
    ("no-hosts", '[cluster]\nuser = "alice"\n', "no hosts: add a [[hosts]] entry"),
    ("hosts-empty", "hosts = []\n", "no hosts"),
    (
        "hosts-table",
        '[hosts]\nname = "gpu-a"\naddress = "10.0.0.1"\n',
        "hosts: expected an array of tables",
    ),
    ("hosts-scalars", "hosts = [1, 2]\n", "[[hosts]] #1: expected a table, found 1 (an integer)"),
    ("cluster-scalar", f"cluster = 3\n{TWO_HOSTS}", "cluster: expected a table ([cluster])"),
    ("job-array", f"job = [1]\n{TWO_HOSTS}", "job: expected a table ([job]), found [1] (an array)"),
    (
        "rank0-twice",
        TWO_HOSTS.replace('"10.0.0.1"', '"10.0.0.1"\nrank0 = true').replace(
            '"10.0.0.2"', '"10.0.0.2"\nrank0 = true'
        ),
        f"{B}: rank0: {A} already sets rank0 = true",
    ),
    ("rank0-string", _second_host('rank0 = "yes"'), f"{B}: rank0: expected true or false"),
    (
        "python-and-conda",
        _cluster('python = "python3"\nconda_env = "pt"'),
        "[cluster]: conda_env: python and conda_env are alternatives",
    ),
    ("conda-path", _second_host('conda_env = "envs/pt"'), f"{B}: conda_env: expected"),
    (
        "env-int",
        _cluster("env = { OMP_NUM_THREADS = 4 }"),
        '[cluster]: env.OMP_NUM_THREADS: expected a string, found 4 (an integer) — quote it: "4"',
    ),
    (
        "env-bad-name",
        _second_host('env = { "NCCL DEBUG" = "WARN" }'),
        f'{B}: env."NCCL DEBUG": expected an environment variable name',
    ),
    ("env-string", _cluster('env = "A=1"'), "[cluster]: env: expected a table of environment"),
    ("nproc-zero", _job("nproc_per_node = 0"), '[job]: nproc_per_node: expected "gpus" or an'),
    (
        "nproc-gpus-on-cpu-host",
        _second_host("gpus = 0"),
        f'{B}: gpus: 0 GPUs, but [job] nproc_per_node = "gpus"',
    ),
    (
        "checkpoint-float",
        _job("checkpoint_every = 1.5"),
        "[job]: checkpoint_every: expected a number of steps ≥ 1, found 1.5 (a float)",
    ),
    ("args-string", _job('args = "--epochs 3"'), "[job]: args: expected an array of strings"),
    (
        "args-element",
        _job('args = ["--epochs", 3]'),
        "[job]: args[1]: expected a string, found 3 (an integer)",
    ),
    (
        "identity-unset-variable",
        _cluster('identity_file = "$DDPTUI_TEST_UNSET/id_ed25519"'),
        "[cluster]: identity_file: $DDPTUI_TEST_UNSET is not set",
    ),
    (
        "known-hosts-empty",
        _second_host('known_hosts = ""'),
        f'{B}: known_hosts: expected a path (a non-empty string), found ""',
    ),
    ("workdir-int", _cluster("workdir = 5"), "[cluster]: workdir: expected a path"),
    (
        "recovery-mode",
        f'[recovery]\nmode = "auto"\n{TWO_HOSTS}',
        '[recovery]: mode: expected "off" or "resume", found "auto" (a string)',
    ),
    (
        "spare-in-cluster",
        _cluster("spare = true"),
        '[cluster]: "spare" is per host: set it in each [[hosts]] entry',
    ),
]


@pytest.mark.parametrize(
    ("text", "message"), [case[1:] for case in BAD_FILES], ids=[case[0] for case in BAD_FILES]
)
def test_bad_hosts_file_names_the_key_and_exits_2(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(text, encoding="utf-8")

    assert main(["config", str(path)]) == 2

    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"ddptui config: {path}: {message}"), err
    assert err.count("\n") == 1, err


def test_toml_syntax_error_gives_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text('[cluster]\nuser = "alice"\nport = = 22\n', encoding="utf-8")

    assert main(["config", str(path)]) == 2

    assert capsys.readouterr().err == f"ddptui config: {path}:3:8: invalid TOML: invalid value\n"


def test_toml_duplicate_table_is_a_syntax_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(f"[cluster]\nport = 22\n[cluster]\nport = 23\n{TWO_HOSTS}", encoding="utf-8")

    assert main(["config", str(path)]) == 2

    assert capsys.readouterr().err.startswith(f"ddptui config: {path}:3:")


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope.toml"

    assert main(["config", str(path)]) == 2

    err = capsys.readouterr().err
    assert err.startswith(f"ddptui config: {path}: no such file")
    assert f"ddptui init {path}" in err


def test_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", str(tmp_path)]) == 2

    assert (
        capsys.readouterr().err == f"ddptui config: {tmp_path}: is a directory, not a hosts file\n"
    )


def test_unreadable_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(TWO_HOSTS, encoding="utf-8")

    # chmod cannot make a file unreadable when the tests run as root, so refuse the read itself.
    def refuse(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", refuse)

    assert main(["config", str(path)]) == 2

    assert capsys.readouterr().err == f"ddptui config: {path}: permission denied\n"


def test_not_utf8_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hosts.toml"
    path.write_bytes(b'[cluster]\nuser = "caf\xe9"\n' + TWO_HOSTS.encode())

    assert main(["config", str(path)]) == 2

    assert capsys.readouterr().err.startswith(
        f"ddptui config: {path}:2:12: not UTF-8 text (byte 0xe9)"
    )


def test_deeply_nested_toml_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text("x = " + "[" * 100_000, encoding="utf-8")

    assert main(["config", str(path)]) == 2

    assert "invalid TOML" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["port-string", "typo-cluster", "no-hosts"])
def test_python_dash_m_reports_without_traceback(name: str, tmp_path: Path) -> None:
    text, message = next(case[1:] for case in BAD_FILES if case[0] == name)
    path = tmp_path / "hosts.toml"
    path.write_text(text, encoding="utf-8")

    result = subprocess.run(
        [sys.executable, "-m", "ddptui", "config", str(path)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"ddptui config: {path}: {message}")
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1
