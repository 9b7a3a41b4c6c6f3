#!/usr/bin/python3
# A stand-in origin server on 127.0.0.1 for the network policy tests: prints its port, serves until killed.
import http.server
import socketserver
import sys


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
        if self.path.startswith("/big"):
            body = b"x" * (1 << 20)
        else:
            body = b"hello from the allowed origin\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
sys.stdout.close()
server.serve_forever()
