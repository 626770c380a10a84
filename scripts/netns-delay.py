#!/usr/bin/env python3
"""Delays and drops packets handed to it by the kernel's netfilter queue: a stand-in for
`tc netem delay … loss …` on kernels built without netem. Weir's network-partition tests run it
inside a test namespace; only packets that an iptables NFQUEUE rule of that namespace sends to
queue N come here, and every other packet passes untouched.

Usage: netns-delay.py QUEUE DELAY_MS LOSS_PERCENT

Every queued packet is released DELAY_MS after it arrived (in arrival order), except that each
one is dropped with probability LOSS_PERCENT / 100. Runs until killed. Only the standard library:
it speaks nfnetlink_queue over a raw netlink socket.
"""
import collections
import os
import random
import select
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQNL_MSG_VERDICT_BATCH = 3
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NF_DROP = 0
NF_ACCEPT = 1


def attribute(kind, payload):
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def message(kind, queue, attributes, seq=0):
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + b"".join(attributes)
    header = struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, NLM_F_REQUEST, seq, 0)
    return header + body


def attributes(data):
    found = {}
    while len(data) >= 4:
        length, kind = struct.unpack_from("=HH", data)
        if length < 4:
            break
        found[kind & 0x7FFF] = data[4:length]
        data = data[(length + 3) & ~3:]
    return found


def main():
    queue, delay_ms, loss = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    delay = delay_ms / 1000.0
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
    sock.bind((0, 0))
    sock.send(message(NFQNL_MSG_CONFIG, queue, [attribute(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0))]))
    sock.send(message(NFQNL_MSG_CONFIG, queue, [attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))]))
    sock.send(message(NFQNL_MSG_CONFIG, queue, [attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", 65536))]))
    print(f"netns-delay: queue {queue}, {delay_ms:g} ms delay, {loss:g} % loss", file=sys.stderr, flush=True)
    held = collections.deque()  # (release time, packet id), in arrival order
    while True:
        now = time.monotonic()
        last = None
        while held and held[0][0] <= now:
            last = held.popleft()[1]
        if last is not None:
            # Every packet up to `last` still queued is released at once; dropped ones are
            # gone already.
            sock.send(message(NFQNL_MSG_VERDICT_BATCH, queue, [attribute(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, last))]))
        wait = max(0.0, held[0][0] - now) if held else 1.0
        readable, _, _ = select.select([sock], [], [], wait)
        if not readable:
            continue
        try:
            data = sock.recv(1 << 20)
        except OSError:
            continue  # ENOBUFS: the kernel dropped packets it could not hand over
        arrived = time.monotonic()
        while len(data) >= 16:
            length, kind, _, _, _ = struct.unpack_from("=IHHII", data)
            if length < 16:
                break
            if kind == NLMSG_ERROR:
                (error,) = struct.unpack_from("=i", data, 16)
                if error != 0:
                    print(f"netns-delay: netlink error {os.strerror(-error)}", file=sys.stderr, flush=True)
                    sys.exit(1)
            elif kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                header = attributes(data[20:length]).get(NFQA_PACKET_HDR)
                if header is not None:
                    (packet,) = struct.unpack_from("!I", header)
                    if random.random() * 100.0 < loss:
                        sock.send(message(NFQNL_MSG_VERDICT, queue, [attribute(NFQA_VERDICT_HDR, struct.pack("!II", NF_DROP, packet))]))
                    else:
                        held.append((arrived + delay, packet))
            data = data[(length + 3) & ~3:]


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
