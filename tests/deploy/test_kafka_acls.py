"""deploy/kafka/acls.sh grants what the security guide says, and nothing more: publishers may
write the ingest topic only, auditrec's principal owns its topics, groups and transactions,
readers read the lifecycle topic. Run with a stand-in kafka-acls command that records each
call, as the real one would receive it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from consumers.eventlog.values import Topics
from consumers.runtime.names import COMPONENTS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "kafka" / "acls.sh"


def grants(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    calls = tmp_path / "calls.jsonl"
    recorder = tmp_path / "kafka-acls"
    recorder.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    recorder.chmod(0o755)
    done = subprocess.run(
        ["sh", str(SCRIPT)],
        env={"PATH": "/usr/bin:/bin", "KAFKA_ACLS": str(recorder), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = calls.read_text().splitlines() if calls.exists() else []
    return done, [json.loads(line) for line in lines]


def of(calls: list[list[str]], principal: str) -> list[list[str]]:
    return [c for c in calls if c[c.index("--allow-principal") + 1] == principal]


def resource(call: list[str]) -> tuple[str, str]:
    for kind in ("--topic", "--group", "--transactional-id"):
        if kind in call:
            return kind, call[call.index(kind) + 1]
    assert "--cluster" in call, call
    return "--cluster", ""


def operations(call: list[str]) -> set[str]:
    return {call[i + 1] for i, arg in enumerate(call) if arg == "--operation"}


def test_publishers_may_write_the_ingest_topic_and_nothing_else(tmp_path: Path) -> None:
    done, calls = grants(
        tmp_path,
        KAFKA_BOOTSTRAP="kafka:9093",
        KAFKA_COMMAND_CONFIG="admin.properties",
        AUDITREC_PRINCIPAL="User:auditrec",
        PUBLISHERS="User:crawler User:workflows",
        READERS="User:analytics",
        TOPIC_PREFIX="shop",
    )

    assert done.returncode == 0, done.stderr
    assert all(
        c[:4] == ["--bootstrap-server", "kafka:9093", "--command-config", "admin.properties"]
        for c in calls
    )
    for publisher in ("User:crawler", "User:workflows"):
        mine = of(calls, publisher)
        assert {(resource(c), frozenset(operations(c))) for c in mine} == {
            (("--topic", "shop.ingest.v1"), frozenset({"Write", "Describe"})),
            (("--cluster", ""), frozenset({"IdempotentWrite"})),
        }
        assert all("--resource-pattern-type" not in c for c in mine)  # no prefix reaches further
    auditrec = {resource(c): operations(c) for c in of(calls, "User:auditrec")}
    assert auditrec[("--topic", "shop.")] == {"All"}
    assert auditrec[("--group", "shop-")] == {"All"}
    assert auditrec[("--transactional-id", "auditrec-")] == {"Write", "Describe"}
    assert [resource(c) for c in of(calls, "User:analytics")] == [("--topic", "shop.lifecycle.v1")]
    assert operations(of(calls, "User:analytics")[0]) == {"Read", "Describe"}


def test_an_ingest_topic_of_its_own_name_is_auditrecs_too(tmp_path: Path) -> None:
    done, calls = grants(
        tmp_path,
        KAFKA_BOOTSTRAP="kafka:9093",
        AUDITREC_PRINCIPAL="User:auditrec",
        PUBLISHERS="User:crawler",
        INGEST_TOPIC="crawler-events",
    )

    assert done.returncode == 0, done.stderr
    assert ("--topic", "crawler-events") in {resource(c) for c in of(calls, "User:auditrec")}
    assert ("--topic", "crawler-events") in {resource(c) for c in of(calls, "User:crawler")}


def test_without_the_cluster_or_auditrecs_principal_it_grants_nothing(tmp_path: Path) -> None:
    done, calls = grants(tmp_path, AUDITREC_PRINCIPAL="User:auditrec")

    assert done.returncode != 0
    assert "KAFKA_BOOTSTRAP" in done.stderr
    assert calls == []


def test_auditrecs_grants_cover_every_topic_and_group_it_uses(tmp_path: Path) -> None:
    # given the names auditrec derives (the confirmations topic and the subscriber's and
    # confirmer's groups included), with the group prefix set apart
    topics = Topics(prefix="shop", group_prefix="shop-prod")
    done, calls = grants(
        tmp_path,
        KAFKA_BOOTSTRAP="kafka:9093",
        AUDITREC_PRINCIPAL="User:auditrec",
        TOPIC_PREFIX="shop",
        GROUP_PREFIX="shop-prod",
    )

    assert done.returncode == 0, done.stderr
    mine = of(calls, "User:auditrec")

    def granted(kind: str, name: str) -> set[str]:
        found: set[str] = set()
        for call in mine:
            if kind not in call:
                continue
            pattern = call[call.index(kind) + 1]
            prefixed = "--resource-pattern-type" in call
            if name == pattern or (prefixed and name.startswith(pattern)):
                found |= operations(call)
        return found

    assert topics.confirmations == "shop.confirmations.v1"
    for topic in topics.all():
        assert granted("--topic", topic) == {"All"}, topic
    for component in COMPONENTS:
        assert granted("--group", topics.group(component)) == {"All"}, component
    assert granted("--group", "shop-confirmer") == set()  # another environment's group
