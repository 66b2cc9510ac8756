"""The README's quickstart as a new user meets it: its commands, verbatim and
in order, against `strom server config/server.properties` on the default
port, with the tools finding the broker on their own. They run in a network
namespace of the test's own (`unshare --net`), so port 9092 is free whatever
else the machine runs and nothing outside is touched.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from harness import strom_binary

REPO = Path(__file__).resolve().parents[2]
QUICKSTART_TIMEOUT_S = 240
BROKER_START_POLLS = 400  # of 50 ms each


def quickstart_blocks() -> list[str]:
    """The `sh` blocks of the README from the Quickstart up to the tests."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Quickstart"):text.index("## Running the tests")]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def quickstart_script(blocks: list[str], bin_dir: Path) -> str:
    """A bash script that runs the blocks as a user would: the install
    block (but for `cargo install`, the binary under test stands in), the
    broker in the background, then every other block, each after a marker."""
    install, server, *steps = blocks
    assert install.splitlines()[0] == "cargo install --path crates/cli", install
    assert server.strip() == "strom server config/server.properties", server
    lines = [
        "set -euo pipefail",
        "ip link set lo up",
        f'export PATH="{bin_dir}:$PATH"',
        "unset STROM_BOOTSTRAP_SERVER",
        "echo '@@step install'",
        *install.splitlines()[1:],
        f"{server.strip()} > server.log 2>&1 &",
        "broker=$!",
        "trap 'kill $broker; wait $broker; echo \"@@broker exit $?\"' EXIT",
        f"for _ in $(seq {BROKER_START_POLLS}); do"
        " (exec 3<>/dev/tcp/127.0.0.1/9092) 2>/dev/null && break; sleep 0.05; done",
        "(exec 3<>/dev/tcp/127.0.0.1/9092)",
    ]
    for number, block in enumerate(steps):
        lines += [f"echo '@@step {number}'", block]
    return "\n".join(lines) + "\n"


def run_quickstart(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "strom").symlink_to(strom_binary())
    shutil.copytree(REPO / "config", tmp_path / "config")
    script = tmp_path / "quickstart.sh"
    script.write_text(quickstart_script(quickstart_blocks(), bin_dir))
    # Root can make a network namespace directly; anyone else needs a user namespace around it.
    own_network = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--net"]
    done = subprocess.run(
        [*own_network, "bash", str(script)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=QUICKSTART_TIMEOUT_S,
    )
    server_log = (tmp_path / "server.log").read_text() if (tmp_path / "server.log").exists() else "(no log)"
    assert done.returncode == 0, f"quickstart failed:\n{done.stdout}\n--- server log ---\n{server_log}"
    assert "panicked" not in server_log, server_log
    outputs = dict(re.findall(r"^@@(step \w+|broker exit \d+)\n(.*?)(?=^@@|\Z)", done.stdout, re.S | re.M))
    assert "broker exit 0" in outputs, done.stdout
    return outputs


def test_readme_quickstart_runs_top_to_bottom(tmp_path):
    out = run_quickstart(tmp_path)
    version = re.search(r'^version = "(.+)"', (REPO / "Cargo.toml").read_text(), re.M)[1]
    assert out["step install"].strip() == f"strom {version}"

    kcat = out["step 0"]
    assert "user-1 => signed up (partition 0, offset 0)" in kcat, kcat
    assert "user-2 => paid (partition 0, offset 1)" in kcat, kcat
    assert '"greetings" with 1 partitions' in kcat, kcat

    tools = out["step 1"]
    assert "Created topic events." in tools, tools
    assert re.search(r"^Offset:\d+\tuser-1\tsigned up$", tools, re.M), tools
    assert re.search(r"^Offset:\d+\tuser-2\tpaid$", tools, re.M), tools
    assert "Processed a total of 2 messages" in tools, tools
    assert "100000 records sent" in tools, tools
    assert re.search(r"^\d{4}-\d\d-\d\d [\d:]+, [\d\-: ]+, 97\.6562, [\d.]+, 100000, ", tools, re.M), tools

    admin = out["step 2"]
    assert re.search(r"^billing +events +2 +", admin, re.M), admin
    assert "Request succeeded for deleting offsets from group billing." in admin, admin
    assert "Completed updating config for topic events." in admin, admin
    assert "Records delete operation completed:" in admin, admin
    assert "Produce(0)" in admin, admin
