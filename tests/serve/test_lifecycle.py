# tests/serve/test_lifecycle.py: servers of their own: start-up refusals, capacity full, the pool, SIGTERM, SIGKILL.
import json
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
import unittest

from harness import NSBOX, Footprint, Server, files_path, free_port, wait_clean, wait_for
from test_api import SMALL, assert_error, gated, host_processes_with_argv, sleep_marker

_servers = []


def own_server(*args, **kw):
    server = Server(*args, **kw)
    _servers.append(server)
    return server


def shutdown_leftovers():
    while _servers:
        _servers.pop().remove()


def assert_stopped_clean(case, server, before, sig=signal.SIGTERM):
    """Stops server by sig and checks: exit 0, nothing of `before` left, no socket, an empty state directory."""
    rc = server.stop(sig, deadline_s=30)
    case.assertEqual(rc, 0, f"exit status after {signal.Signals(sig).name}: {server.log_tail()}")
    case.assertEqual(wait_clean(before, server, deadline_s=5), [])
    case.assertFalse(os.path.exists(server.socket_path), "the socket file is left")
    case.assertEqual(os.listdir(server.state_dir) if os.path.exists(server.state_dir) else [], [],
                     "the state directory is not empty")


class CommandLine(unittest.TestCase):
    def refused(self, args):
        root = Server().root
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", root]))
        sock = os.path.join(root, "api.sock")
        try:
            run = subprocess.run([NSBOX, "serve", "--socket", sock, "--state-dir", os.path.join(root, "state")] + args,
                                 capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            self.fail(f"nsbox serve {' '.join(args)} did not refuse: it was still running after 15 s")
        lines = [line for line in run.stderr.decode(errors="replace").splitlines() if line.strip()]
        self.assertFalse(os.path.exists(sock), "a refused server left its socket")
        return run.returncode, lines

    def test_tcp_without_a_token_file_refuses_to_start_with_exit_125(self):
        rc, lines = self.refused(["--listen", f"127.0.0.1:{free_port()}"])
        self.assertEqual(rc, 125, lines)
        self.assertEqual(len(lines), 1, f"not a one-line error: {lines}")
        self.assertIn("token", lines[0])

    def test_bad_options_are_one_line_and_exit_125_as_every_verb_s(self):
        root = Server().root
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", root]))
        token = os.path.join(root, "tokens")
        os.makedirs(root, exist_ok=True)
        with open(token, "w") as f:
            f.write(secrets.token_hex(16) + "\n")
        os.chmod(token, 0o600)
        for args, words in [(["--bogus"], "unknown option '--bogus' (see nsbox serve --help)"),
                            (["extra"], "unexpected argument 'extra'"), (["--allow-uid", "-1"], "--allow-uid"),
                            (["--", "a", "b"], "unexpected arguments 'a b' (see nsbox serve --help)"),
                            (["--max-sandboxes", "5", "--max-sandboxes", "6"], "--max-sandboxes given 2 times"),
                            (["--pool", "host=5abc"], "--pool"),
                            # getaddrinfo would keep the low 16 bits of 99999 and bind port 34463
                            (["--listen", "127.0.0.1:99999", "--token-file", token], "from 1 to 65535"),
                            # An option left without its value names itself (it took nsbox's own argument before).
                            (["--pool"], "--pool: its value is missing"), (["--allow-uid"], "--allow-uid"),
                            (["--restricted-hosts", ""], "an empty host name"),
                            (["--restricted-hosts", "bad host"], "'bad host': not a valid domain name"),
                            (["--max-sandboxes", "0"], "'0' is not a number of sandboxes from 1 to"),
                            (["--max-per-client", "0"], "'0' is not a number of sandboxes from 1 to"),
                            (["--max-execs-per-sandbox", "0"], "'0' is not a number of execs from 1 to"),
                            # Decimal digits, said in a line a person reads (CLI11 printed a 300-digit range), and
                            # not uid -1 (4294967295) or hexadecimal.
                            (["--allow-uid", "abc"], "--allow-uid: 'abc' is not a uid from 0 to 4294967294"),
                            (["--allow-uid", "4294967295"], "'4294967295' is not a uid"),
                            (["--allow-uid", "0x10"], "'0x10' is not a uid"),
                            (["--max-timeout", "10s"], "--max-timeout: '10s' is not a number of seconds"),
                            (["--memory-budget", "0"], "--memory-budget must be above 0"),
                            (["--default-timeout", "700"], "--default-timeout 700 is over --max-timeout 600"),
                            (["--pool", "nosuch-image=1"], "--pool 'nosuch-image=1': no image 'nosuch-image'"),
                            (["--max-held-answers", "12Q"], "--max-held-answers"),
                            # A budget that cannot hold one sandbox of the default limits would refuse every create.
                            (["--memory-budget", "100M"], "cannot hold one sandbox of the default limits"),
                            (["--pids-budget", "100"], "--pids-budget: a client's share of it (100)"),
                            # Two clients (the server's uid and 65533) share the answer room: a quarter of 64M cannot
                            # hold one default exec's answer (21 MiB), so every exec would be a 400.
                            (["--allow-uid", "65533", "--max-held-answers", "64M"],
                             "--max-held-answers: a client's share of it (16777216 bytes)"),
                            # More processes than the host has could never be held (a fork bomb's room).
                            (["--pids-budget", "99999999"], "is more than the host's processes"),
                            # A negative count wrapped around to no cap; one past an int refused every exec.
                            (["--max-sandboxes", "-1"], "--max-sandboxes"), (["--max-per-client", "-1"],
                                                                             "--max-per-client"),
                            (["--max-execs-per-sandbox", "3000000000"], "--max-execs-per-sandbox"),
                            (["--pids-budget", "-1"], "--pids-budget"), (["--max-timeout", "-5"], "--max-timeout"),
                            # Every create, or every file, would be refused.
                            (["--max-body", "0"], "--max-body must be at least 4K"),
                            (["--max-file-size", "0"], "--max-file-size must be above 0")]:
            rc, lines = self.refused(args)
            self.assertEqual((rc, len(lines)), (125, 1), (args, lines))
            self.assertIn(words, lines[0])
            self.assertTrue(lines[0].startswith("nsbox serve: "), lines)

    def test_the_default_pids_budget_leaves_the_host_half_its_processes(self):
        with open("/proc/sys/kernel/pid_max") as f, open("/proc/sys/kernel/threads-max") as g:
            host = min(int(f.read()), int(g.read()))
        server = own_server().start()
        capacity = server.api().call("GET", "/v1/capacity")
        self.assertEqual(capacity["pids"]["budget"], min(32768, host // 2), capacity)

    def test_an_empty_socket_or_state_dir_is_refused_not_taken_as_left_out(self):
        # The defaults (/run/nsbox/...) would be used instead: another server's socket and sessions.
        root = Server().root
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", root]))
        for args, words in [(["--socket", "", "--state-dir", os.path.join(root, "state")], "--socket: an empty value"),
                            (["--socket", os.path.join(root, "api.sock"), "--state-dir", ""],
                             "--state-dir: an empty value")]:
            run = subprocess.run([NSBOX, "serve"] + args, capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
            lines = run.stderr.decode(errors="replace").splitlines()
            self.assertEqual((run.returncode, len(lines)), (125, 1), (args, lines))
            self.assertIn(words, lines[0])

    def test_a_default_socket_directory_another_user_made_is_refused(self):
        # With --state-dir given, the socket's default directory (/tmp/nsbox-UID without XDG_RUNTIME_DIR) was used as
        # found: its maker could move the socket aside and bind its own, and read every client's code and secrets.
        uid = 65534
        planted = f"/tmp/nsbox-{uid}"
        if os.path.lexists(planted):
            self.skipTest(f"{planted} exists already")
        os.mkdir(planted)
        os.chmod(planted, 0o777)  # root's, writable by everyone: as another user would leave it
        root = Server().root
        state = os.path.join(root, "state")
        os.mkdir(state, 0o700)
        os.chown(state, uid, uid)
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", root, planted]))
        env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}

        def as_nobody():
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)

        run = subprocess.run([NSBOX, "serve", "--state-dir", state], capture_output=True, timeout=15,
                             stdin=subprocess.DEVNULL, env=env, preexec_fn=as_nobody)
        lines = run.stderr.decode(errors="replace").splitlines()
        self.assertEqual((run.returncode, len(lines)), (125, 1), lines)
        self.assertIn(planted, lines[0])
        self.assertFalse(os.path.exists(os.path.join(planted, "api.sock")))

    def test_a_missing_token_file_refuses_to_start_naming_it(self):
        missing = f"/nonexistent/nsbox-tokens-{secrets.token_hex(4)}"
        rc, lines = self.refused(["--listen", f"127.0.0.1:{free_port()}", "--token-file", missing])
        self.assertNotEqual(rc, 0)
        self.assertEqual(len(lines), 1, f"not a one-line error: {lines}")
        self.assertIn(missing, lines[0])

    def test_a_socket_or_state_dir_that_resolves_into_the_sandboxes_view_is_refused(self):
        root = Server().root
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", root]))
        os.symlink("/usr/local", os.path.join(root, "to-usr"))
        for flag, path, words in [("--socket", os.path.join(root, "to-usr", "api.sock"), "resolves to /usr/local"),
                                  ("--socket", "/tmp/../usr/local/api.sock", "'..'"),
                                  ("--state-dir", os.path.join(root, "to-usr", "state"), "resolves to /usr/local")]:
            argv = {"--socket": os.path.join(root, "api.sock"), "--state-dir": os.path.join(root, "state")}
            argv[flag] = path
            run = subprocess.run([NSBOX, "serve", "--socket", argv["--socket"], "--state-dir", argv["--state-dir"]],
                                 capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
            lines = run.stderr.decode(errors="replace").strip().splitlines()
            self.assertEqual((run.returncode, len(lines)), (125, 1), (flag, path, lines))
            self.assertIn(flag, lines[0])
            self.assertIn(words, lines[0])
        self.assertFalse(os.path.exists("/usr/local/api.sock") or os.path.exists("/usr/local/state"))

    def test_a_second_server_on_the_same_state_dir_is_refused_and_the_first_keeps_its_sandboxes(self):
        first = own_server().start()
        sbx = first.api().create({})
        second = subprocess.run([NSBOX, "serve", "--socket", os.path.join(first.root, "second.sock"), "--state-dir",
                                 first.state_dir], capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
        lines = second.stderr.decode(errors="replace").strip().splitlines()
        self.assertEqual((second.returncode, len(lines)), (125, 1), lines)
        self.assertIn("another nsbox serve", lines[0])
        self.assertEqual(first.api().exec(sbx["id"], {"cmd": "echo alive"})["stdout"], "alive\n")
        self.assertEqual(first.stop(signal.SIGKILL), -signal.SIGKILL)
        # The lock goes with the server however it ends: a successor takes the directory over.
        successor = own_server(root=first.root).start()
        # A server refused the socket (another listens on it) leaves no state directory of its own behind.
        other_state = os.path.join(first.root, "other-state")
        third = subprocess.run([NSBOX, "serve", "--socket", successor.socket_path, "--state-dir", other_state],
                               capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
        self.assertEqual(third.returncode, 125, third.stderr)
        self.assertIn(b"another server is listening on it", third.stderr)
        self.assertFalse(os.path.exists(other_state), "a refused server left its state directory")
        successor.stop()

    def test_a_state_dir_it_cannot_write_in_is_refused_at_start(self):
        if os.geteuid() != 0:
            self.skipTest("mounting a read-only state directory needs root")
        root = Server().root
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", root]))
        state = os.path.join(root, "ro-state")
        os.makedirs(state, mode=0o700)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,mode=0700,size=1m", "tmpfs", state], check=True)
        self.addCleanup(lambda: subprocess.run(["umount", state]))
        run = subprocess.run([NSBOX, "serve", "--socket", os.path.join(root, "api.sock"), "--state-dir", state],
                             capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
        lines = run.stderr.decode(errors="replace").splitlines()
        self.assertEqual((run.returncode, len(lines)), (125, 1), lines)
        self.assertIn("cannot make a session directory in it", lines[0])
        self.assertIn("EROFS", lines[0])
        self.assertFalse(os.path.exists(os.path.join(root, "api.sock")))

    def test_a_state_dir_holding_a_session_no_server_made_is_refused_and_the_session_lives(self):
        root = Server().root
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", root]))
        state = os.path.join(root, "cli-sessions")
        env = dict(os.environ, NSBOX_STATE_DIR=state)
        made = subprocess.run([NSBOX, "session", "create", "--name", "mywork"], capture_output=True, env=env,
                              timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(made.returncode, 0, made.stderr)
        self.addCleanup(lambda: subprocess.run([NSBOX, "session", "rm", "mywork"], env=env, capture_output=True))
        run = subprocess.run([NSBOX, "serve", "--socket", os.path.join(root, "api.sock"), "--state-dir", state],
                             capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
        lines = run.stderr.decode(errors="replace").splitlines()
        self.assertEqual(run.returncode, 125, lines)
        self.assertIn("which no nsbox serve made", lines[-1])
        self.assertFalse(os.path.exists(os.path.join(root, "api.sock")))
        alive = subprocess.run([NSBOX, "exec", "mywork", "--", "echo", "alive"], capture_output=True, env=env,
                               timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(alive.stdout, b"alive\n", alive.stderr)

    def test_help_names_the_options(self):
        run = subprocess.run([NSBOX, "serve", "--help"], capture_output=True, timeout=15)
        text = (run.stdout + run.stderr).decode(errors="replace")
        for option in ("--socket", "--state-dir", "--listen", "--token-file", "--pool", "--max-sandboxes",
                       "--max-per-client", "--max-body", "--max-timeout", "--allow-uid", "--allow-network-host"):
            self.assertIn(option, text)


def counts(capacity):
    sandboxes = capacity.get("sandboxes", {})
    return {k: sandboxes.get(k) for k in ("running", "max", "per_client_max")}


class CapacityFull(unittest.TestCase):
    """--max-sandboxes 2 --max-per-client 1: the socket's client, then token a, then token b."""

    def test_a_full_server_answers_429_with_the_capacity(self):
        tokens = {"a": "tok-a-" + secrets.token_hex(8), "b": "tok-b-" + secrets.token_hex(8)}
        server = own_server(["--max-sandboxes", "2", "--max-per-client", "1", "--max-timeout", "1"],
                            tokens=tokens).start()
        api, a, b = server.api(), server.api(token=tokens["a"]), server.api(token=tokens["b"])
        base = Footprint.of(server)
        self.assertEqual(counts(api.call("GET", "/v1/capacity")), {"running": 0, "max": 2, "per_client_max": 1})
        assert_error(self, api.request("POST", "/v1/sandboxes", {"network": "host"}), 403, "forbidden")
        mine = api.create(SMALL)["id"]
        # --max-timeout 1 caps an exec's own timeout and the default one: per-exec time-outs are always set.
        for body in ({"argv": ["sleep", "20"], "timeout": 100}, {"argv": ["sleep", "20"]}):
            self.assertEqual(api.exec(mine, body)["status"], "timeout", body)
        body = assert_error(self, api.request("POST", "/v1/sandboxes", SMALL), 429, "too_many_requests")
        self.assertEqual(body.get("capacity", {}).get("sandboxes", {}).get("per_client_max"), 1, body)
        theirs = a.create(SMALL)["id"]
        body = assert_error(self, b.request("POST", "/v1/sandboxes", SMALL), 429, "too_many_requests")
        assert_error(self, b.request("POST", "/v1/run", {"cmd": "true"}), 429, "too_many_requests")
        self.assertEqual(counts(body.get("capacity", {})), {"running": 2, "max": 2, "per_client_max": 1}, body)
        for key in ("pool", "memory_bytes", "pids"):
            self.assertIn(key, body["capacity"])
        during = Footprint.of(server)
        self.assertEqual(api.delete(mine).status, 204)
        third = b.create(SMALL)["id"]
        self.assertEqual(b.exec(third, {"argv": ["echo", "room again"]})["stdout"], "room again\n")
        self.assertEqual(api.call("GET", "/v1/capacity")["sandboxes"]["running"], 2)
        for client, sandbox_id in ((a, theirs), (b, third)):
            self.assertEqual(client.delete(sandbox_id).status, 204)
        during.merge(Footprint.of(server))
        self.assertEqual(wait_clean(during, server, base=base), [])
        self.assertEqual(api.call("GET", "/v1/capacity")["sandboxes"]["running"], 0)
        assert_stopped_clean(self, server, during)


class TenantBudgets(unittest.TestCase):
    def test_a_clients_share_of_the_budgets_keeps_it_from_starving_another(self):
        # Three possible clients (the socket's uid, tokens a and b), --max-per-client 2 of --max-sandboxes 4: each may
        # commit half of each budget. Before, one create of pids 1000 - 256 - 20 took the whole pids budget.
        tokens = {"a": "tok-a-" + secrets.token_hex(8), "b": "tok-b-" + secrets.token_hex(8)}
        server = own_server(["--max-sandboxes", "4", "--max-per-client", "2", "--pids-budget", "1000"],
                            tokens=tokens).start()
        a, b = server.api(token=tokens["a"]), server.api(token=tokens["b"])
        base = Footprint.of(server)
        first = a.create({"limits": {"pids": 400}})["id"]
        body = assert_error(self, a.request("POST", "/v1/sandboxes", {"limits": {"pids": 200}}), 429,
                            "too_many_requests")
        self.assertIn("this client's share of the pids budget (500)", body["error"]["message"], body)
        # Each client's "client" part is its own share and what it alone committed: a's, in the 429 and in a GET, is
        # full; b's is untouched by a's sandbox.
        self.assertEqual(body["capacity"]["client"]["pids"], {"budget": 500, "committed": 400, "free": 100}, body)
        own = a.call("GET", "/v1/capacity")["client"]
        self.assertEqual(own["sandboxes"], {"running": 1, "max": 2}, own)
        self.assertEqual(own["pids"], {"budget": 500, "committed": 400, "free": 100}, own)
        other = b.call("GET", "/v1/capacity")
        self.assertEqual(other["client"]["sandboxes"], {"running": 0, "max": 2}, other)
        self.assertEqual(other["client"]["pids"], {"budget": 500, "committed": 0, "free": 500}, other)
        self.assertEqual(other["client"]["memory_bytes"]["committed"], 0, other)
        self.assertGreaterEqual(other["pids"]["committed"], 400, other)  # the server's totals count a's
        # Limits a client's whole share could never hold are the request's fault: 400, not a 429 to try again.
        refused = assert_error(self, b.request("POST", "/v1/sandboxes", {"limits": {"pids": 600}}), 400,
                               "bad_request")
        self.assertIn("pids 600 is more than this client may commit in all (500", refused["error"]["message"])
        theirs = b.create({"limits": {"pids": 400}})["id"]
        self.assertEqual(b.exec(theirs, {"argv": ["echo", "b runs"]})["stdout"], "b runs\n")
        during = Footprint.of(server)
        for client, sandbox_id in ((a, first), (b, theirs)):
            self.assertEqual(client.delete(sandbox_id).status, 204)
        self.assertEqual(wait_clean(during, server, base=base), [])
        assert_stopped_clean(self, server, during)

    def test_the_server_raises_its_descriptor_limit_to_the_hard_one(self):
        # Each exec holds two descriptors (its client's connection and its session's): at the usual soft limit of 1024
        # a few hundred execs ran the server out, and then it could not look its sandboxes up.
        server = own_server([], nofile=(256, 8192)).start()
        with open(f"/proc/{server.proc.pid}/limits") as f:
            line = next(l for l in f if l.startswith("Max open files"))
        self.assertEqual(line.split()[3:5], ["8192", "8192"], line)
        api = server.api()
        sandbox_id = api.create({})["id"]
        self.assertEqual(api.exec(sandbox_id, {"argv": ["echo", "ok"]})["stdout"], "ok\n")
        self.assertEqual(api.delete(sandbox_id).status, 204)
        assert_stopped_clean(self, server, Footprint.of(server))

    def test_the_workspace_counts_in_the_memory_budget(self):
        # Files written through the API are held in the sandbox's /workspace but charged to the server, outside the
        # sandbox's memory group: a sandbox commits its memory limit and its tmpfs size.
        server = own_server(["--memory-budget", "1G"]).start()
        api = server.api()
        spec = {"limits": {"memory": "256M", "tmpfs": "256M"}}
        made = [api.create(spec)["id"] for _ in range(2)]
        capacity = api.call("GET", "/v1/capacity")
        self.assertEqual(capacity["memory_bytes"]["committed"], 1 << 30, capacity)
        body = assert_error(self, api.request("POST", "/v1/sandboxes", spec), 429, "too_many_requests")
        self.assertIn("the memory budget (1073741824 bytes) has no room for 536870912 more", body["error"]["message"], body)
        # Limits the whole budget could never hold are the request's fault: 400, not a 429 to try again.
        body = assert_error(self, api.request("POST", "/v1/sandboxes", {"limits": {"memory": "99999T"}}), 400,
                            "bad_request")
        self.assertIn("more than this client may commit in all (1073741824 bytes", body["error"]["message"], body)
        for sandbox_id in made:
            self.assertEqual(api.delete(sandbox_id).status, 204)
        assert_stopped_clean(self, server, Footprint.of(server))

    def test_a_pool_sandbox_that_ended_while_it_waited_is_replaced(self):
        # A ready sandbox's session can end while it waits (its own idle backstop after hours, a kill from outside):
        # a create must not hand it out (it answered 201 from_pool, then 409 on the first exec).
        server = own_server(["--pool", "host=1"]).start()
        api = server.api()
        self.assertTrue(wait_for(lambda: api.call("GET", "/v1/capacity")["pool"]["host"]["ready"] == 1, 30, 0.2))
        env = dict(os.environ, NSBOX_STATE_DIR=server.state_dir)
        pooled = [line.split()[0] for line in subprocess.run([NSBOX, "session", "ls"], env=env, capture_output=True,
                                                             text=True).stdout.splitlines()[1:] if line.strip()]
        self.assertEqual(len(pooled), 1, pooled)
        subprocess.run([NSBOX, "session", "rm", pooled[0]], env=env, check=True, capture_output=True)
        sbx = api.create({})
        self.assertIs(sbx["from_pool"], False, sbx)
        self.assertEqual(api.exec(sbx["id"], {"argv": ["echo", "alive"]})["stdout"], "alive\n")
        self.assertEqual(api.delete(sbx["id"]).status, 204)
        assert_stopped_clean(self, server, Footprint.of(server))


class AbandonedCreate(unittest.TestCase):
    def test_a_create_whose_client_went_away_leaves_no_sandbox(self):
        # A client that gives up on its create (a time-out, Ctrl-C) never learns the id: a sandbox made for it would
        # hold its share of the server until its idle time-out. Over TCP the 201 would still be written after the
        # client's FIN; over the socket the write fails.
        token = "tok-" + secrets.token_hex(8)
        server = own_server([], tokens={"a": token}).start()
        api, a = server.api(), server.api(token=token)
        base = Footprint.of(server)
        body = json.dumps(SMALL).encode()

        def creates_made():
            with open(server.log_path, errors="replace") as f:
                return f.read().count("POST /v1/sandboxes 201")

        def send_and_leave(tcp):
            if tcp:
                s = socket.create_connection(("127.0.0.1", server.port))
                auth = f"Authorization: Bearer {token}\r\n"
            else:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(server.socket_path)
                auth = ""
            s.sendall(f"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            time.sleep(0.003)  # the create has begun (it takes some 10 ms)
            s.close()

        # libmicrohttpd may drop a request unread when the FIN comes first (then nothing is made), and on a loaded
        # machine every pair may be dropped for a while: the pair is sent again until a create was made (up to 20
        # times, 30 s).
        give_up = time.monotonic() + 30
        for _ in range(20):
            send_and_leave(tcp=False)
            send_and_leave(tcp=True)
            if wait_for(lambda: creates_made() >= 1, 1.0) or time.monotonic() > give_up:
                break

        def made_and_gone():
            # Every create sent is answered (logged) and every one made was removed. A create still being made when
            # the others are done shows in the count of those running.
            with open(server.log_path, errors="replace") as f:
                log = f.read()
            made, removed = log.count("POST /v1/sandboxes 201"), log.count("its creator went away before the answer")
            return made >= 1 and removed == made and not api.call("GET", "/v1/sandboxes")["sandboxes"] and \
                not a.call("GET", "/v1/sandboxes")["sandboxes"] and \
                api.call("GET", "/v1/capacity")["sandboxes"]["running"] == 0

        self.assertTrue(wait_for(made_and_gone, 30, 0.2), server.log_tail())
        # A client that reads its answer keeps its sandbox, also when it closes the connection at once: a first
        # version trusted libmicrohttpd's completion code, which reports an error for some answers that were read.
        lost = []

        def create_exec_delete():
            for _ in range(25):
                sandbox_id = server.api().create({})["id"]
                answer = server.api().request("POST", f"/v1/sandboxes/{sandbox_id}/exec", {"argv": ["true"]})
                if answer.status != 200:
                    lost.append(answer.status)
                server.api().delete(sandbox_id)

        workers = [threading.Thread(target=create_exec_delete) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        self.assertEqual(lost, [], server.log_tail())
        self.assertEqual(wait_clean(Footprint.of(server), server, base=base), [])
        assert_stopped_clean(self, server, Footprint.of(server))


class CompileTimeoutCap(unittest.TestCase):
    def test_max_timeout_caps_the_tables_default_compile_timeout_too(self):
        # An explicit compile_timeout was capped by --max-timeout, the table's default (30 or 60 s) was not: asking
        # for nothing gave more than asking for a lot.
        server = own_server(["--max-timeout", "1"]).start()
        api = server.api()
        sbx = api.create({})["id"]
        # A compile that cannot end, on any machine: it includes a FIFO nothing writes to, whose open blocks.
        made = api.exec(sbx, {"argv": ["mkfifo", "/workspace/never-written"]})
        self.assertEqual(made["exit_code"], 0, made)
        r = api.exec(sbx, {"language": "cpp", "code": '#include "/workspace/never-written"\nint main() {}\n'})
        self.assertEqual((r["status"], r["compile"]["status"]), ("compile_error", "timeout"), r)
        self.assertIn("1000 ms", r["reason"], r)
        self.assertEqual(api.delete(sbx).status, 204)
        assert_stopped_clean(self, server, Footprint.of(server))


class BodyCap(unittest.TestCase):
    def test_a_max_body_over_the_held_bodies_cap_still_lets_one_such_body_in(self):
        # The bodies held at once are capped at 256 MiB, or at --max-body when that is larger: a 300 MB body that
        # --max-body 400M allows is waited for, not answered 503 on an idle server.
        server = own_server(["--max-body", "400M"]).start()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(server.socket_path)
            s.settimeout(1)
            s.sendall(b"PUT /v1/sandboxes/sb-x/files?path=a HTTP/1.1\r\nHost: x\r\nContent-Length: 300000000\r\n\r\nab")
            try:
                answer = s.recv(4096)
            except socket.timeout:
                answer = b""
        self.assertEqual(answer, b"", "answered before the body came")
        assert_stopped_clean(self, server, Footprint.of(server))


class HeldBytes(unittest.TestCase):
    """What one client's connections make the server hold: declared bodies not sent, answers not read."""

    def test_declared_bodies_that_never_come_hold_nothing_of_the_shared_cap(self):
        # 17 heads declaring 16 MB each, and no body byte: before, they reserved the 256 MiB every client's bodies
        # share, and every exec, run and upload got 503 for as long as the connections stayed open.
        server = own_server([]).start()
        api = server.api()
        sandbox_id = api.create({})["id"]
        silent = []
        try:
            for _ in range(17):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(server.socket_path)
                s.sendall(b"PUT /v1/sandboxes/sb-000000000000000000000000/files?path=x HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: %d\r\n\r\n" % (16 << 20))
                silent.append(s)
            time.sleep(0.3)
            result = api.exec(sandbox_id, {"argv": ["echo", "still served"]})
            self.assertEqual(result["stdout"], "still served\n", result)
        finally:
            for s in silent:
                s.close()
        self.assertEqual(api.delete(sandbox_id).status, 204)
        assert_stopped_clean(self, server, Footprint.of(server))

    def test_answers_not_read_are_capped_and_a_later_one_waits_then_503(self):
        # Answers are built whole; a client that asks for a large file on many connections and reads none held them
        # all (40 such made the server 2.5 GB). Past --max-held-answers an answer waits for room, then is a 503.
        server = own_server(["--max-held-answers", "24M"]).start()
        api = server.api()
        sandbox_id = api.create({})["id"]
        r = api.request("PUT", files_path(sandbox_id, "big"), raw=os.urandom(16 << 20))
        self.assertIn(r.status, (200, 201, 204), r.body[:200])
        request = f"GET {files_path(sandbox_id, 'big')} HTTP/1.1\r\nHost: x\r\n\r\n".encode()

        def unread():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(server.socket_path)
            s.sendall(request)
            return s

        def answer_begun(s):
            try:
                return bool(s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
            except BlockingIOError:
                return False

        first = unread()
        try:
            # Its 16 MiB answer has begun to come (its room was reserved before the file was read) and is held: the
            # client reads none of it, it only peeks.
            self.assertTrue(wait_for(lambda: answer_begun(first), 30), "the first read was not answered")
            started = time.monotonic()
            second = api.request("GET", files_path(sandbox_id, "big"))
            waited = time.monotonic() - started
            self.assertEqual(second.status, 503, second.body[:300])
            self.assertIn("answers being built or not yet read by their clients", second.body.decode(),
                          second.body[:300])
            self.assertGreater(waited, 5, "the answer did not wait for room")
            # An exec's result is never replaced (its program ran: a client that took a 503 at its word would run it
            # again); it waits for room instead, and goes once the unread answer does.
            answers = []
            execute = threading.Thread(target=lambda: answers.append(api.exec(sandbox_id, {
                "cmd": "head -c 12000000 /dev/zero | tr '\\0' a; echo ran >> /workspace/log", "output_limit": 16000000})))
            execute.start()
            time.sleep(3)
            self.assertEqual(answers, [], "the exec's result was sent past the cap while the first answer was unread")
        finally:
            first.close()
        execute.join(60)
        self.assertEqual(len(answers), 1)
        self.assertEqual(answers[0]["status"], "ok", {k: v for k, v in answers[0].items() if k != "stdout"})
        self.assertEqual(len(answers[0]["stdout"]), 12000000)
        # The unread answer is freed with its connection: the same request is served again.
        def served():
            r = api.request("GET", files_path(sandbox_id, "big"))
            return r if r.status == 200 else None

        third = wait_for(served, 10)
        self.assertIsNotNone(third)
        self.assertEqual(len(third.body), 16 << 20)
        self.assertEqual(api.delete(sandbox_id).status, 204)
        assert_stopped_clean(self, server, Footprint.of(server))


    def test_a_streamed_exec_not_read_keeps_its_room_and_the_server_small(self):
        # A streamed exec gave its room back when its program ended, with its result line (all its output again)
        # still queued for a client that read nothing: 6 such streams of 60 MB made the server 2.8 GB. Its room is
        # held until the stream is sent, also when what is unsent fits in the stream's queue (300 KB here).
        server = own_server(["--max-held-answers", "48M"]).start()
        api = server.api()
        sandbox_id = api.create({})["id"]
        body = json.dumps({"cmd": "head -c 300000 /dev/zero | tr '\\0' s; : > /workspace/done",
                           "output_limit": 2 << 20}).encode()
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        silent.connect(server.socket_path)
        try:
            silent.sendall(b"POST /v1/sandboxes/%s/exec?stream=true HTTP/1.1\r\nHost: x\r\nContent-Type: "
                           b"application/json\r\nContent-Length: %d\r\n\r\n" % (sandbox_id.encode(), len(body))
                           + body)
            # Its program is done (its last step writes the file): its output and the result line wait for the client.
            self.assertTrue(wait_for(lambda: "done" in [e["name"] for e in api.call(
                "GET", files_path(sandbox_id, ".", list="true"))["entries"]], 30, 0.1),
                "the unread stream's program did not end")
            # 34 MiB of room each (12 x 2M and 10M): the unread stream still holds its own, so this one waits, then 503.
            second = api.request("POST", f"/v1/sandboxes/{sandbox_id}/exec",
                                 body={"cmd": "echo second", "output_limit": 2 << 20})
            self.assertEqual(second.status, 503, second.body[:300])
            self.assertIn("answers being built or not yet read by their clients", second.body.decode())
            with open(f"/proc/{server.proc.pid}/status") as status:
                rss_kb = int(next(line for line in status if line.startswith("VmRSS:")).split()[1])
            self.assertLess(rss_kb, 200 << 10, "the server holds the unread stream's output several times over")
        finally:
            silent.close()
        # Its client gone, the stream's room is free again.
        again = wait_for(lambda: (lambda r: r if r.status == 200 else None)(api.request(
            "POST", f"/v1/sandboxes/{sandbox_id}/exec", body={"cmd": "echo third", "output_limit": 2 << 20})), 20)
        self.assertIsNotNone(again, "the room of a stream whose client went away was not given back")
        self.assertEqual(json.loads(again.body)["stdout"], "third\n")
        self.assertEqual(api.delete(sandbox_id).status, 204)
        assert_stopped_clean(self, server, Footprint.of(server))


class ExecBounds(unittest.TestCase):
    def test_execs_in_one_sandbox_are_capped_and_answers_being_built_wait_for_room(self):
        # Each exec's answer is built whole, in the server and the session's supervisor (root, outside every limit):
        # 16 execs of 64M output made them 2.8 GB. Execs in flight in one sandbox are capped (429), and an exec
        # reserves what its answer may come to (12 x output_limit, its stdin and code, 9 MiB) before it runs; the
        # default output_limit of 1M makes 22 MiB, so two fit in 48M.
        server = own_server(["--max-execs-per-sandbox", "2", "--max-held-answers", "48M"]).start()
        api = server.api()
        one, two = api.create({})["id"], api.create({})["id"]
        answers, order, lock = {}, [], threading.Lock()  # order: the answers' names and "released", as they came

        def run(name, sandbox_id, body):
            r = server.api().request("POST", f"/v1/sandboxes/{sandbox_id}/exec", body=dict(body, timeout=30))
            with lock:
                order.append(name)
                answers[name] = (r.status, json.loads(r.body))

        def release(sandbox_id, gate):
            with lock:
                order.append("released")
            api.call("PUT", files_path(sandbox_id, gate), raw=b"")

        # Two execs held until released, both running, then a third in the same sandbox.
        gate = "go-" + secrets.token_hex(6)
        # Each its own command line: a held shell's forked child has its parent's for a moment, so a count of one
        # command's processes could count one exec twice.
        held = [gated(gate, f"echo held; : {n}") for n in range(2)]
        threads = [threading.Thread(target=run, args=(f"held-{n}", one, {"cmd": cmd})) for n, cmd in enumerate(held)]
        for t in threads:
            t.start()
        try:
            self.assertTrue(wait_for(lambda: all(host_processes_with_argv(["/bin/sh", "-c", cmd]) for cmd in held),
                                     20), "the two held execs did not start")
            third = server.api().request("POST", f"/v1/sandboxes/{one}/exec", body={"cmd": "echo third"})
        finally:
            release(one, gate)
            for t in threads:
                t.join(30)
        refused = assert_error(self, third, 429, "too_many_requests")
        self.assertIn("runs its maximum of 2 execs at once", refused["error"]["message"])
        self.assertIn("capacity", refused)
        self.assertEqual([(a[0], a[1].get("stdout")) for a in answers.values()], [(200, "held\n")] * 2, answers)

        answers.clear()
        order.clear()
        big = {"output_limit": 2 << 20}  # 34 MiB of room each (12 x 2M and 10M): two do not fit in 48M
        gate = "go-" + secrets.token_hex(6)
        held = gated(gate, "echo first")
        first = threading.Thread(target=run, args=("first", one, dict(big, cmd=held)))
        first.start()
        second = threading.Thread(target=run, args=("second", two, dict(big, cmd="echo second")))
        try:
            # Its program runs, so its room is reserved (that comes before the program); it ends only once released.
            self.assertTrue(wait_for(lambda: host_processes_with_argv(["/bin/sh", "-c", held]), 20),
                            "the first exec did not start")
            second.start()
            # A moment for a second run beside the first to show its answer (a waiting one waits up to 10 s).
            wait_for(lambda: "second" in answers, 3)
        finally:
            release(one, gate)
            first.join(30)
            if second.ident is not None:  # started
                second.join(30)
        self.assertEqual({name: (a[0], a[1].get("stdout")) for name, a in answers.items()},
                         {"first": (200, "first\n"), "second": (200, "second\n")}, answers)
        self.assertEqual(order[0], "released", f"the second exec ran beside the first without room: {order}")
        # One exec alone always has room, however large its output_limit.
        alone = api.exec(two, {"cmd": "echo alone", "output_limit": 64 << 20})
        self.assertEqual(alone["stdout"], "alone\n")
        for sandbox_id in (one, two):
            self.assertEqual(api.delete(sandbox_id).status, 204)
        assert_stopped_clean(self, server, Footprint.of(server))


class SocketGroup(unittest.TestCase):
    def test_socket_group_lets_an_allowed_member_connect_and_an_unknown_group_is_refused(self):
        # The socket is 0660 root:root: an --allow-uid client could not even connect without a group of its own.
        from test_api import as_uid
        server = own_server(["--socket-group", "nogroup", "--allow-uid", "65534"]).start()
        st = os.stat(server.socket_path)
        self.assertEqual((st.st_mode & 0o777, st.st_gid), (0o660, 65534))
        answers = as_uid(65534, server.socket_path, [("GET", "/v1/sandboxes", None)])
        self.assertEqual(answers[0][0], 200, answers)
        root = Server().root
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", root]))
        run = subprocess.run([NSBOX, "serve", "--socket", os.path.join(root, "api.sock"), "--state-dir",
                              os.path.join(root, "state"), "--socket-group", "no-such-group-x"],
                             capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
        lines = run.stderr.decode(errors="replace").splitlines()
        self.assertEqual(run.returncode, 125, lines)
        self.assertIn("--socket-group 'no-such-group-x': no such group", lines[-1])
        self.assertFalse(os.path.exists(os.path.join(root, "api.sock")))


class Readiness(unittest.TestCase):
    def test_a_pool_that_cannot_make_sandboxes_is_not_ready_though_alive(self):
        # A node whose engine cannot make a sandbox (no usable cgroup, say) answered healthz 200: a kubelet kept it in
        # rotation while every create failed. readyz says so; healthz (liveness) stays 200, the server lives on.
        server = own_server()
        serve = os.path.join(os.path.dirname(NSBOX), "nsbox-serve")
        server.argv = lambda: [serve, "--socket", server.socket_path, "--state-dir", server.state_dir,
                               "--nsbox-binary", "/bin/false", "--pool", "host=1"]
        server.start()
        api = server.api()
        unready = wait_for(lambda: (lambda r: r if r.status == 503 else None)(api.request("GET", "/v1/readyz")), 15)
        self.assertIsNotNone(unready, "readyz stayed 200 while the pool could not make a sandbox")
        self.assertEqual(unready.json()["status"], "unable")
        self.assertIn("the pool cannot make a 'host' sandbox", unready.json()["error"]["message"])
        self.assertEqual(api.request("GET", "/v1/healthz").status, 200)
        self.assertIn("the pool could not make a 'host' sandbox", server.log_tail())


class PoolAndSigterm(unittest.TestCase):
    """--pool host=2 python=1: ready sandboxes taken by a create, refilled, never reused; SIGTERM ends them."""

    def test_pool_sandboxes_are_taken_refilled_and_never_reused(self):
        server = own_server(["--pool", "host=2", "--pool", "python=1"]).start()
        api = server.api()

        def pool(template="host"):
            return api.call("GET", "/v1/capacity")["pool"].get(template, {})

        self.assertEqual(pool().get("target"), 2, api.call("GET", "/v1/capacity"))
        self.assertTrue(wait_for(lambda: pool().get("ready") == 2, 30, 0.2), f"the pool did not fill: {pool()}")
        first = api.create({"template": "host"})
        self.assertIs(first["from_pool"], True, first)
        api.call("PUT", files_path(first["id"], "secret.txt"), raw=b"first client's")
        api.exec(first["id"], {"cmd": "echo in-home > ~/home.txt; echo in-tmp > /tmp/tmp.txt"})
        self.assertEqual(api.delete(first["id"]).status, 204)
        self.assertTrue(wait_for(lambda: pool().get("ready") == 2, 30, 0.2), f"the pool did not refill: {pool()}")
        seen = set()
        for _ in range(3):  # more than the pool holds: every one is new
            sbx = api.create({"template": "host"})
            self.assertNotIn(sbx["id"], seen | {first["id"]})
            seen.add(sbx["id"])
            r = api.exec(sbx["id"], {"cmd": "ls /workspace ~/home.txt /tmp/tmp.txt 2>&1; true"})
            self.assertNotIn("secret.txt", r["stdout"], "a pool sandbox was reused")
            self.assertIn("No such file", r["stdout"])
        self.assertTrue(wait_for(lambda: pool().get("ready") == 2, 30, 0.2), f"the pool did not refill: {pool()}")
        self.assertTrue(wait_for(lambda: pool("python").get("ready") == 1, 30, 0.2), pool("python"))
        py = api.create({"template": "python", "env": {"NSBOX_POOL_ENV": "given"}})
        self.assertIs(py["from_pool"], True, py)
        # The pool started its interpreter before this client's env existed: the cell has it all the same.
        cell = api.exec(py["id"], {"language": "python", "code": "import os; os.environ.get('NSBOX_POOL_ENV')",
                                   "repl": True})
        self.assertEqual(cell["repl"]["value"], "'given'", cell)
        api.exec(py["id"], {"language": "python", "code": "n = 7919", "repl": True})
        cell = api.exec(py["id"], {"language": "python", "code": "print(n)", "repl": True})
        self.assertEqual(cell["stdout"], "7919\n", cell)
        before = Footprint.of(server)
        self.assertGreaterEqual(len(before.procs), 5, "fewer processes than 3 sandboxes and a pool of 2")
        assert_stopped_clean(self, server, before)


    def test_the_pool_stays_within_the_pids_budget(self):
        # Four ready sandboxes of 256 pids each would commit 1024 against a budget of 600: the pool stops at two.
        server = own_server(["--pool", "host=4", "--pids-budget", "600"]).start()
        api = server.api()
        capacity = lambda: api.call("GET", "/v1/capacity")  # noqa: E731
        self.assertTrue(wait_for(lambda: capacity()["pool"]["host"]["ready"] == 2, 30, 0.2), capacity())
        time.sleep(1.5)  # a refill that ignored the budget would have made a third by now
        now = capacity()
        self.assertEqual(now["pool"]["host"]["ready"], 2, now)
        self.assertLessEqual(now["pids"]["committed"], 600, now)
        # The log says why the pool stays short, once (the line may come a moment after the second is ready).
        def said():
            with open(server.log_path, errors="replace") as f:
                return f.read().count("the pool waits for the budgets")

        wait_for(said, 10)
        self.assertEqual(said(), 1, open(server.log_path, errors="replace").read())
        # A pooled create leaves the committed sum as it was, and the pool does not refill past the budget.
        sbx = api.create({"template": "host"})
        self.assertIs(sbx["from_pool"], True, sbx)
        time.sleep(1.5)
        self.assertLessEqual(capacity()["pids"]["committed"], 600, capacity())
        before = Footprint.of(server)
        assert_stopped_clean(self, server, before)

    def test_a_refill_waits_while_a_client_exec_runs_but_not_past_its_maximum_delay(self):
        # docs/service.md: a pool at least half full refills once no exec has run for 20 ms, or 500 ms after it fell
        # due (half of a pool of one is none).
        server = own_server(["--pool", "host=1"]).start()
        api = server.api()

        def pool():
            return api.call("GET", "/v1/capacity")["pool"]["host"]

        self.assertTrue(wait_for(lambda: pool()["ready"] == 1, 30, 0.05), f"the pool did not fill: {pool()}")
        busy = api.create(SMALL)["id"]  # not from the pool: it has limits of its own
        done = []
        worker = threading.Thread(target=lambda: done.append(
            server.api().exec(busy, {"cmd": "touch /tmp/started; sleep 50"})))
        worker.start()
        self.assertTrue(wait_for(lambda: "started" in api.exec(busy, {"cmd": "ls /tmp"})["stdout"], 10, 0.02))
        taken = []
        seen = []
        for _ in range(5):  # a loaded machine may answer the first look after 450 ms: the take is made again
            taken_at = time.monotonic()
            taken.append(api.create({})["id"])  # from the pool: the refill falls due while the exec runs
            while True:
                state = pool()
                elapsed = time.monotonic() - taken_at  # the server's time since the take is at most this
                if elapsed >= 0.45:
                    break
                seen.append(state)
                self.assertEqual((state["ready"], state["filling"]), (0, 0),
                                 f"a refill started {elapsed:.3f} s after the take, while an exec ran")
            self.assertTrue(wait_for(lambda: pool()["ready"] == 1, 20, 0.05),
                            f"no refill by the maximum delay: {pool()}")
            if seen:
                break
        self.assertTrue(seen, "no look at the pool within 450 ms of a take, in 5 takes")
        self.assertFalse(done, "the exec ended before the pool refilled: the maximum delay was not what let it start")
        for sandbox_id in [busy] + taken:  # the first ends its exec
            self.assertEqual(api.delete(sandbox_id).status, 204)
        worker.join(30)
        assert_stopped_clean(self, server, Footprint.of(server))


class SigkillRestart(unittest.TestCase):
    """SIGKILL leaves the predecessor's sandboxes behind; a server restarted on the same state dir removes them."""

    def test_a_restart_after_sigkill_removes_what_the_predecessor_left(self):
        bare = "bare-" + secrets.token_hex(12)
        server = own_server([], tokens=bare + "\n").start()
        api, tcp = server.api(), server.api(token=bare)
        ids = [api.create(SMALL)["id"], tcp.create(SMALL)["id"]]  # the bare token is the client "default"
        marker = sleep_marker()
        r = api.exec(ids[0], {"cmd": f"setsid sleep {marker} >/dev/null 2>&1 < /dev/null & echo bg"})
        self.assertEqual(r["stdout"], "bg\n", r)
        streaming = threading.Thread(target=lambda: self._stream_until_gone(tcp, ids[1]), daemon=True)
        streaming.start()
        self.assertTrue(wait_for(lambda: host_processes_with_argv(["sleep", marker]), 10))
        before = Footprint.of(server)
        self.assertGreaterEqual(len(before.procs), 2, f"no sandbox process was found: {before.procs}")
        old_dirs = {e for e in before.entries if os.path.isdir(os.path.join(server.state_dir, e))}
        server.proc.kill()
        server.proc.wait()
        server.start()  # the same socket path (its file is left), state dir and token file
        left = wait_clean(before, server, deadline_s=15, check_entries=False)
        left = [line for line in left if not line.startswith("new process")]
        self.assertEqual(left, [], "the restarted server did not remove what its predecessor left")
        self.assertFalse(host_processes_with_argv(["sleep", marker]), "the predecessor's background process lives")
        still = sorted(e for e in old_dirs if os.path.exists(os.path.join(server.state_dir, e)))
        self.assertEqual(still, [], "the predecessor's session directories are left")
        for client, sandbox_id in ((api, ids[0]), (tcp, ids[1])):
            assert_error(self, client.request("GET", f"/v1/sandboxes/{sandbox_id}"), 404, "not_found")
        fresh = tcp.create(SMALL)["id"]
        self.assertEqual(tcp.exec(fresh, {"argv": ["echo", "after restart"]})["stdout"], "after restart\n")
        assert_stopped_clean(self, server, Footprint.of(server).merge(before))

    def test_a_sandbox_whose_session_directory_was_removed_from_outside_is_still_ended(self):
        server = own_server().start()
        api = server.api()
        sandbox_id = api.create(SMALL)["id"]
        marker = sleep_marker()
        r = api.exec(sandbox_id, {"cmd": f"setsid sleep {marker} >/dev/null 2>&1 < /dev/null & echo bg"})
        self.assertEqual(r["stdout"], "bg\n", r)
        self.assertTrue(wait_for(lambda: host_processes_with_argv(["sleep", marker]), 10))
        (session_dir,) = [e for e in os.listdir(server.state_dir) if not e.startswith(".")]
        subprocess.run(["rm", "-rf", os.path.join(server.state_dir, session_dir)], check=True)
        # The next call finds the session gone; the server ends what still runs by the pid it kept.
        r = api.request("POST", f"/v1/sandboxes/{sandbox_id}/exec", {"argv": ["true"]})
        self.assertIn(r.status, (404, 409), r.body)
        self.assertTrue(wait_for(lambda: not host_processes_with_argv(["sleep", marker]), 20),
                        "the sandbox's processes run on after its directory was removed")
        assert_stopped_clean(self, server, Footprint.of(server))

    def test_a_sandbox_whose_supervisor_was_killed_from_outside_is_no_longer_listed(self):
        # It stayed listed as running, with its session directory, until the server ended. The exec it was running
        # answers session_lost, with exit_code -1 as the Result schema says (it was null).
        server = own_server().start()
        api = server.api()
        sandbox_id = api.create(SMALL)["id"]
        (session_dir,) = [e for e in os.listdir(server.state_dir) if not e.startswith(".")]
        answers = []
        marker = sleep_marker()
        running = threading.Thread(target=lambda: answers.append(api.exec(sandbox_id, {"cmd": f"exec sleep {marker}",
                                                                                       "timeout": 30})))
        running.start()
        self.assertTrue(wait_for(lambda: host_processes_with_argv(["sleep", marker]), 20), "the exec did not start")
        with open(os.path.join(server.state_dir, session_dir, "session.json")) as f:
            os.kill(json.load(f)["supervisor_pid"], signal.SIGKILL)
        running.join(30)
        self.assertEqual([(a.get("status"), a.get("exit_code")) for a in answers], [("session_lost", -1)], answers)
        self.assertTrue(wait_for(lambda: api.request("GET", f"/v1/sandboxes/{sandbox_id}").status == 404, 10),
                        "a sandbox whose supervisor is dead is still listed")
        self.assertNotIn(sandbox_id, [s["id"] for s in api.request("GET", "/v1/sandboxes").json()["sandboxes"]])
        self.assertFalse(os.path.exists(os.path.join(server.state_dir, session_dir)))
        assert_stopped_clean(self, server, Footprint.of(server))

    @staticmethod
    def _stream_until_gone(api, sandbox_id):
        try:
            api.stream("POST", f"/v1/sandboxes/{sandbox_id}/exec?stream=true", {"cmd": "sleep 28", "timeout": 30})
        except Exception:  # noqa: BLE001: the server is killed under it
            pass


class SigtermAnswers(unittest.TestCase):
    def test_execs_in_flight_at_sigterm_get_their_whole_answers(self):
        # Their programs ran: a client cut off from the answer (the server logged 200) cannot tell what happened.
        server = own_server().start()
        api = server.api()
        ids = [api.create(SMALL)["id"] for _ in range(2)]
        answers, errors = [], []

        def run(sandbox_id):
            try:
                answers.append(api.request("POST", f"/v1/sandboxes/{sandbox_id}/exec",
                                           {"cmd": "head -c 3000000 /dev/zero | tr '\\0' x; echo started >&2; sleep 60",
                                            "timeout": 90}))
            except Exception as e:  # noqa: BLE001: the failure under test
                errors.append(repr(e))

        threads = [threading.Thread(target=run, args=(sandbox_id,)) for sandbox_id in ids for _ in range(3)]
        for t in threads:
            t.start()
        self.assertTrue(wait_for(lambda: len(host_processes_with_argv(["sleep", "60"])) >= len(threads), 30, 0.1),
                        "the execs did not start")
        self.assertEqual(server.stop(signal.SIGTERM, deadline_s=30), 0, server.log_tail())
        for t in threads:
            t.join(30)
        self.assertEqual(errors, [])
        self.assertEqual(len(answers), len(threads))
        for answer in answers:
            self.assertEqual(answer.status, 200, answer)
            result = answer.json()
            self.assertEqual(result["stderr"], "started\n", result)
            self.assertIn("shutting down", result["reason"], result)


class Sigint(unittest.TestCase):
    def test_a_stopping_server_leaves_the_socket_another_took_over_and_the_dirs_it_did_not_make(self):
        first = own_server().start()
        os.unlink(first.socket_path)  # an operator's mistake: the name is free for a second server
        second = own_server(root=first.root)
        second.state_dir = os.path.join(first.root, "second-state")
        os.mkdir(second.state_dir, 0o700)  # the operator's own
        second.start()
        self.assertEqual(first.stop(), 0, first.log_tail())
        self.assertTrue(os.path.exists(second.socket_path), "the first server removed the second's socket")
        self.assertEqual(second.api().request("GET", "/v1/healthz").status, 200)
        # Directories: the ones the server made go at its end, one the operator made stays.
        nested = os.path.join(first.root, "p1", "p2", "state")
        third = subprocess.Popen([NSBOX, "serve", "--socket", os.path.join(first.root, "third.sock"), "--state-dir",
                                  nested], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        wait_for(lambda: os.path.exists(os.path.join(first.root, "third.sock")) or None, 30)
        third.send_signal(signal.SIGTERM)
        self.assertEqual(third.wait(timeout=30), 0)
        self.assertFalse(os.path.exists(os.path.join(first.root, "p1")), "the server left the directories it made")
        self.assertTrue(os.path.isdir(second.state_dir))
        self.assertEqual(second.stop(), 0)
        self.assertTrue(os.path.isdir(second.state_dir), "the operator's own state directory was removed")

    def test_sighup_ignored_when_started_stays_ignored(self):
        server = own_server()
        server.proc = subprocess.Popen(server.argv(), stdin=subprocess.DEVNULL, stdout=open(server.log_path, "ab"),
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
        wait_for(lambda: os.path.exists(server.socket_path) or None, 30)
        wait_for(lambda: server.api().request("GET", "/v1/healthz").status == 200 or None, 30)
        server.proc.send_signal(signal.SIGHUP)  # as nohup leaves it: the terminal going does not end the service
        time.sleep(1)
        self.assertIsNone(server.proc.poll(), server.log_tail())
        self.assertEqual(server.api().request("GET", "/v1/healthz").status, 200)
        self.assertEqual(server.stop(), 0)

    def test_sigint_ends_every_sandbox_exits_0_and_leaves_nothing(self):
        server = own_server().start()
        api = server.api()
        sandbox_id = api.create(SMALL)["id"]
        self.assertEqual(api.exec(sandbox_id, {"argv": ["echo", "up"]})["stdout"], "up\n")
        before = Footprint.of(server)
        self.assertGreaterEqual(len(before.procs), 1, "no sandbox process was found")
        assert_stopped_clean(self, server, before, signal.SIGINT)


CLASSES = [CapacityFull, TenantBudgets, AbandonedCreate, CompileTimeoutCap, BodyCap, HeldBytes, ExecBounds,
           SocketGroup, Readiness, PoolAndSigterm, SigkillRestart, SigtermAnswers, Sigint]
