"""The learner's rendezvous from the Slurm allocation alone (wmrl/learner/distributed.py): the master
host is the first of ``SLURM_JOB_NODELIST``, expanded in Python as Slurm expands it; ``scontrol``
(absent from the learner image) is only a fallback for a list the parser refuses."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from wmrl.learner import distributed
from wmrl.learner.distributed import expand_nodelist, first_host, slurm_rendezvous

LISTS = {
    "gpu[03-05,07],login1": ["gpu03", "gpu04", "gpu05", "gpu07", "login1"],
    "node[1-3]": ["node1", "node2", "node3"],
    "a,b": ["a", "b"],
    "rack1-[01-02]": ["rack1-01", "rack1-02"],
    "n[098-101]": ["n098", "n099", "n100", "n101"],
    "n[8-10]": ["n8", "n9", "n10"],
    "r[1-2]-n[08-09]": ["r1-n08", "r1-n09", "r2-n08", "r2-n09"],
    "vm1": ["vm1"],
}


@pytest.mark.parametrize("nodelist", sorted(LISTS))
def test_node_lists_expand_as_slurm_expands_them(nodelist: str) -> None:
    assert expand_nodelist(nodelist) == LISTS[nodelist]


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="needs scontrol")
def test_the_expansion_equals_scontrols_own() -> None:
    for nodelist, hosts in LISTS.items():
        shown = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                               check=True).stdout.split()
        assert shown == hosts, nodelist


@pytest.mark.parametrize("nodelist", ["n[1-3", "n]1[", "n[[1]]", "n[3-1]", "n[a-c]", "", "a,,b", "n[]"])
def test_malformed_node_lists_are_refused_with_the_list_named(nodelist: str) -> None:
    with pytest.raises(ValueError, match="node list"):
        expand_nodelist(nodelist)


def test_rendezvous_works_without_scontrol_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it: no scontrol, as in the learner image

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"a parsable node list must not call out: {args}")

    monkeypatch.setattr(distributed.subprocess, "run", no_subprocess)
    env = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "1", "SLURM_NTASKS": "8", "SLURM_JOB_NODELIST": "gpu[03-05,07],login1"}
    assert slurm_rendezvous(env)["MASTER_ADDR"] == "gpu03"
    # the step's own list wins over the job's
    assert slurm_rendezvous({**env, "SLURM_STEP_NODELIST": "rack1-[01-02]"})["MASTER_ADDR"] == "rack1-01"


def test_an_unparsable_list_without_scontrol_says_what_failed(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"node list 'n\[1-3': unclosed bracket, and scontrol .* failed.*"
                                           r"cannot find the learner's master host"):
        first_host("n[1-3")
