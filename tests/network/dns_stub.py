#!/usr/bin/python3
# A stub DNS server for the resolver test: on 127.0.0.1:53 (UDP), answers an A query for a name under the domain
# argv[1] with 127.0.0.1 and any other name with NXDOMAIN; it appends each name asked to the file argv[2].
import socket
import struct
import sys

suffix, log_path = sys.argv[1].lower(), sys.argv[2]
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", 53))
print("ready", flush=True)
while True:
    query, peer = sock.recvfrom(512)
    ident, _flags, qdcount = struct.unpack("!HHH", query[:6])
    at, labels = 12, []
    while query[at]:
        labels.append(query[at + 1:at + 1 + query[at]].decode("ascii", "replace"))
        at += 1 + query[at]
    question_end = at + 5
    qtype = struct.unpack("!H", query[at + 1:at + 3])[0]
    name = ".".join(labels).lower()
    with open(log_path, "a") as log:
        log.write(name + "\n")
    header_flags = 0x8180
    answers = b""
    if name.endswith("." + suffix) and qtype == 1:
        answers = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + socket.inet_aton("127.0.0.1")
    elif not name.endswith("." + suffix):
        header_flags = 0x8183  # NXDOMAIN
    reply = struct.pack("!HHHHHH", ident, header_flags, 1, 1 if answers else 0, 0, 0) + query[12:question_end] + answers
    sock.sendto(reply, peer)
