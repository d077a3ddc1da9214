"""An HTTP/3 client on aioquic (PyPI; scripts/deps installs it in a virtual environment) for
the end-to-end tests: opens one QUIC connection, sends every request on it at once (one
stream each), and prints one JSON line per response in the order given:
{"request", "status", "headers", "body_len", "sha256", "body" (the first 200 bytes, as text)}.
A request is `PATH` (GET) or `POST:PATH:SIZE` (a body of SIZE bytes of b"u").
The first line says how the connection went: {"alpn", "tls_version", "cipher"}.
It exits 1 with a message when the handshake or a request fails or takes over 20 s.
"""
import argparse
import asyncio
import hashlib
import json
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.streams = {}

    def quic_event_received(self, event):
        for e in self.h3.handle_event(event):
            if not isinstance(e, (HeadersReceived, DataReceived)) or e.stream_id not in self.streams:
                continue
            done, resp = self.streams[e.stream_id]
            if isinstance(e, HeadersReceived):
                fields = [(k.decode(), v.decode()) for k, v in e.headers]
                if resp["headers"] is None:
                    resp["headers"] = fields
                else:
                    resp["trailers"] = fields
            else:
                resp["body"] += e.data
            if e.stream_ended and not done.done():
                done.set_result(resp)

    async def send(self, authority, spec):
        method, path, body = "GET", spec, b""
        if spec.startswith("POST:"):
            _, path, size = spec.split(":", 2)
            method, body = "POST", b"u" * int(size)
        stream = self._quic.get_next_available_stream_id()
        head = [(b":method", method.encode()), (b":scheme", b"https"),
                (b":authority", authority.encode()), (b":path", path.encode()),
                (b"user-agent", b"aioquic-e2e")]
        if body:
            head.append((b"content-length", str(len(body)).encode()))
        self.h3.send_headers(stream, head, end_stream=not body)
        if body:
            self.h3.send_data(stream, body, end_stream=True)
        done = asyncio.get_running_loop().create_future()
        self.streams[stream] = (done, {"headers": None, "body": b""})
        self.transmit()
        return await done


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--sni", required=True)
    ap.add_argument("requests", nargs="+")
    args = ap.parse_args()
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=args.sni)
    config.verify_mode = ssl.CERT_NONE
    authority = f"{args.sni}:{args.port}"
    async with connect(args.host, args.port, configuration=config, create_protocol=Client) as client:
        tls = client._quic.tls
        print(json.dumps({"alpn": tls.alpn_negotiated, "tls_version": "TLSv1.3",
                          "cipher": str(tls.key_schedule.cipher_suite.name) if tls.key_schedule else None}))
        responses = await asyncio.gather(*(client.send(authority, r) for r in args.requests))
        for spec, resp in zip(args.requests, responses):
            head = dict(resp["headers"] or [])
            body = resp["body"]
            print(json.dumps({
                "request": spec, "status": int(head.get(":status", 0)), "headers": head,
                "trailers": dict(resp.get("trailers", [])), "body_len": len(body),
                "sha256": hashlib.sha256(body).hexdigest(),
                "body": body[:200].decode("utf-8", "replace"),
            }))


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(), 20))
    except Exception as e:  # a failed handshake, a reset stream, a timeout
        print(f"h3client: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
