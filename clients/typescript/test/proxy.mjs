// A real TCP proxy in front of serve that misbehaves on the next connections:
// drop(n): forward the request, wait until the server starts answering (it has handled the
// request), then close the client's connection without a byte of the answer;
// refuse(n, status): answer `status` with Retry-After: 0 itself, reaching nothing.
// `dropped` keeps the first bytes of each swallowed answer, `refused` counts refusals.
import { connect, createServer } from "node:net";

export async function startProxy(upstreamPort) {
  const faults = [];
  const sockets = new Set();
  const state = { dropped: [], refused: 0 };
  const server = createServer((client) => {
    sockets.add(client);
    client.on("error", () => {});
    client.on("close", () => sockets.delete(client));
    const fault = faults.shift();
    if (fault?.kind === "refuse") {
      client.once("data", () => {
        state.refused += 1;
        const body = '{"detail": "refused by the test proxy"}';
        client.end(
          `HTTP/1.1 ${fault.status} Refused\r\ncontent-type: application/json\r\nretry-after: 0\r\n` +
            `content-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
        );
      });
      return;
    }
    const upstream = connect(upstreamPort, "127.0.0.1");
    sockets.add(upstream);
    upstream.on("error", () => client.destroy());
    upstream.on("close", () => sockets.delete(upstream));
    client.pipe(upstream);
    if (fault?.kind === "drop") {
      upstream.once("data", (first) => {
        state.dropped.push(first.toString("latin1"));
        client.destroy();
        upstream.destroy();
      });
    } else {
      upstream.pipe(client);
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    state,
    drop(times = 1) {
      for (let i = 0; i < times; i += 1) faults.push({ kind: "drop" });
    },
    refuse(times = 1, status = 503) {
      for (let i = 0; i < times; i += 1) faults.push({ kind: "refuse", status });
    },
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}
