"""Benchmark: the Workflows simulator's queue under an HTTP pull consumer (no services).

Publishes N status-change messages (one ``errored`` instance each), then pulls them in batches
of ``--batch`` and acknowledges each batch over real HTTP until the queue is empty; prints the
publishing time and the messages pulled and acknowledged per second. Target: a pull consumer
is never slowed by the simulator below Cloudflare's 5,000 messages per second per queue.

    python bench/simulator_queue.py [--messages 100000] [--batch 100]
"""

from __future__ import annotations

import argparse
import time

import httpx

from consumers.workflows.simulator.server import SimulatorServer

TARGET = 5_000  # messages per second per queue, Cloudflare's pull consumer limit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    with SimulatorServer() as server, httpx.Client(timeout=30) as client:
        server.sim.add_queue("q")
        started = time.perf_counter()
        for i in range(args.messages):
            server.sim.set_instance(f"wf-{i}", "errored")
        published = time.perf_counter() - started
        url = f"{server.url}/accounts/bench/queues/q/messages"
        done, started = 0, time.perf_counter()
        while done < args.messages:
            pulled = client.post(url + "/pull", json={"batch_size": args.batch})
            messages = pulled.json()["result"]["messages"]
            client.post(
                url + "/ack", json={"acks": [{"lease_id": m["lease_id"]} for m in messages]}
            )
            done += len(messages)
        took = time.perf_counter() - started
    rate = done / took
    print(f"published {args.messages:,} messages in {published:.2f} s")
    print(f"pulled and acknowledged {done:,} in {took:.2f} s: {rate:,.0f} per second "
          f"(target ≥ {TARGET:,}){'' if rate >= TARGET else '  below target'}")  # fmt: skip


if __name__ == "__main__":
    main()
