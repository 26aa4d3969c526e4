"""The suite's split over pytest-xdist's workers (tests/conftest.py): the files that share the session's demo run
or start a SLURM test cluster are told apart by their text, since the scheduler sees test ids only. Checked here
against what pytest itself collects: a test that reaches one of those fixtures any other way (a fixture of its
own built on demo_run, say) would run the five-minute demo a second time on another worker, or start a second
SLURM cluster in CI's one HEADPRUNE_SLURM_ROOT."""
import os
import subprocess
import sys

from conftest import DEMO_GROUP, DEMO_GROUP_FIXTURES, ROOT, in_demo_group

LISTER = '''
def pytest_collection_finish(session):
    for item in session.items:
        print("FIXTURES", item.nodeid.split("::", 1)[0], " ".join(getattr(item, "fixturenames", ())))
'''


def collected_fixtures(tmp_path):
    """{test file: the fixtures its tests use}, from a collection of the whole suite in one process."""
    (tmp_path / "fixture_lister.py").write_text(LISTER)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             "-p", "fixture_lister", "-n", "0", str(ROOT / "tests")],
                            capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    files: dict[str, set] = {}
    for line in result.stdout.splitlines():
        if line.startswith("FIXTURES "):
            _, test_file, *names = line.split()
            files.setdefault(test_file, set()).update(names)
    return files


def test_the_files_that_use_the_demo_or_a_slurm_cluster_are_the_demo_group(tmp_path):
    files = collected_fixtures(tmp_path)
    assert len(files) > 50, sorted(files)
    using = {f for f, names in files.items() if set(DEMO_GROUP_FIXTURES) & names}
    assert {"tests/test_daily_use.py", "tests/test_slurm.py", "tests/test_slurm_faults.py"} <= using, using
    grouped = {f for f in files if in_demo_group(f)}
    assert using <= grouped, f"use the demo or a SLURM cluster but run outside the demo group: {using - grouped}"
    # and the group holds no file that needs neither (the other worker would do its work)
    assert grouped - using == set(), grouped - using
    taking = "def test_x(tmp_path, {}):"
    assert DEMO_GROUP.search(taking.format("demo_run")) and not DEMO_GROUP.search(taking.format("demo_runs"))
