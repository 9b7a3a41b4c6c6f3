#!/usr/bin/python3
# A stand-in origin server on 127.0.0.1 for the network policy tests: prints its port, serves until killed.
import http.server
import socketserver
import io
import os
import zipfile


def make_wheel():
    # A one-module wheel, built in memory with the standard library, for the package-index routes.
    files = {
        "nsboxdemo/__init__.py": 'GREETING = "installed through the proxy"\n',
        "nsboxdemo-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: nsboxdemo\nVersion: 1.0\n",
        "nsboxdemo-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files["nsboxdemo-1.0.dist-info/RECORD"] = "".join(n + ",,\n" for n in files) + "nsboxdemo-1.0.dist-info/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, content in files.items():
            z.writestr(name, content)
    return buffer.getvalue()


WHEEL = make_wheel()


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith("/redirect"):
            target = self.path.split("to=", 1)[1] if "to=" in self.path else "http://refused.test/"
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/simple/nsboxdemo/"):
            body = (b'<!DOCTYPE html><html><body><a href="/files/nsboxdemo-1.0-py3-none-any.whl">'
                    b"nsboxdemo-1.0-py3-none-any.whl</a></body></html>\n")
        elif self.path.startswith("/files/nsboxdemo-1.0-py3-none-any.whl"):
            body = WHEEL
        elif self.path.startswith("/big"):
            body = b"x" * (1 << 20)
        else:
            body = b"hello from the allowed origin\n"
        self.send_response(200)
        if self.path.startswith("/simple/"):
            self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


server = Server(("127.0.0.1", 0), Handler)
# One write of the whole line; the test may close its end as soon as it has read it.
try:
    os.write(1, f"{server.server_address[1]}\n".encode())
    os.close(1)
except BrokenPipeError:
    pass
server.serve_forever()
