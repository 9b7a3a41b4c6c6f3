# tests/containers/podman.py: runs the nsbox image under podman with the least privilege of docs/containers.md.
"""The podman command lines of the container tests, and the delegated cgroup they give the container.

The privileges, each a switch so that a test can leave one out and see nsbox refuse:
  runtime   --runtime runc: crun refuses a hybrid host ("cgroups in hybrid mode not supported")
  seccomp   the engine's default profile plus sethostname, setdomainname, setns (tools/container-seccomp)
  proc      --security-opt unmask=/proc/*: an unmasked /proc (a new proc mount) and a writable /proc/sys
  cgroup    a delegated cgroup: the container's --cgroup-parent, bind-mounted writable over the controllers
  caps      of all capabilities only CAP_SETUID and CAP_SETGID (the sandbox's id maps); without it, none at all
"""
import json
import os
import subprocess
import time

CONTROLLERS = ["memory", "pids", "cpu", "cpuacct", "freezer"]
CGROUP_ROOT = "/sys/fs/cgroup"


def ulimit_args():
    """This session may lack CAP_SYS_RESOURCE, so podman's defaults (1048576 files) cannot be set: ask for the hard
    limits we have (processes capped: runc could not set more than 32768 here)."""
    import resource
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = 32768 if nproc == resource.RLIM_INFINITY else min(nproc, 32768)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


class DelegatedCgroup:
    """A group per v1 controller that the host hands to one container: its memory and pids limits bound the
    container and every sandbox in it. Removed again, with whatever podman made inside, by close()."""

    def __init__(self, name, memory="1G", pids=4096):
        self.name = name
        for c in CONTROLLERS:
            os.makedirs(f"{CGROUP_ROOT}/{c}/{name}", exist_ok=True)
        with open(f"{CGROUP_ROOT}/memory/{name}/memory.limit_in_bytes", "w") as f:
            f.write(memory)
        with open(f"{CGROUP_ROOT}/pids/{name}/pids.max", "w") as f:
            f.write(str(pids))

    def args(self):
        out = [f"--cgroup-parent=/{self.name}"]
        for c in CONTROLLERS:
            out += ["-v", f"{CGROUP_ROOT}/{c}/{self.name}:{CGROUP_ROOT}/{c}:rw"]
        return out

    def children(self, controller="memory"):
        base = f"{CGROUP_ROOT}/{controller}/{self.name}"
        return sorted(e for e in os.listdir(base) if os.path.isdir(f"{base}/{e}")) if os.path.isdir(base) else []

    def tasks(self, controller="memory"):
        with open(f"{CGROUP_ROOT}/{controller}/{self.name}/tasks") as f:
            return f.read().split()

    def close(self):
        # podman made the parent in every hierarchy (blkio, devices, the v2 tree ...), and leaves conmon's group behind.
        # Its own cleanup of that group may take a while on a loaded machine: 30 s for all the hierarchies together.
        deadline = time.monotonic() + 30
        for entry in os.listdir(CGROUP_ROOT):
            top = f"{CGROUP_ROOT}/{entry}/{self.name}"
            if not os.path.isdir(top):
                continue
            for _ in range(300):
                dirs = [d for d, _, _ in os.walk(top, topdown=False)]
                for d in dirs:
                    try:
                        os.rmdir(d)
                    except OSError:
                        pass
                if not os.path.isdir(top) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)


class Podman:
    def __init__(self, image, seccomp_profile, cgroup):
        self.image = image
        self.seccomp_profile = seccomp_profile
        self.cgroup = cgroup

    def args(self, runtime=True, seccomp=True, proc=True, cgroup=True, caps=True, add_caps=(), extra=()):
        out = ["podman"]
        if runtime:
            out += ["--runtime", "runc"]
        # no-new-privileges as Kubernetes' allowPrivilegeEscalation: false: nsbox needs no setuid program.
        out += ["run", "--rm", "--cgroupns=private", "--security-opt", "no-new-privileges"] + ulimit_args()
        out += ["--cap-drop", "ALL"]
        for cap in (["SETUID", "SETGID"] if caps else []) + list(add_caps):
            out += ["--cap-add", cap]
        if seccomp:
            out += ["--security-opt", f"seccomp={self.seccomp_profile}"]
        if proc:
            out += ["--security-opt", "unmask=/proc/*"]
        if cgroup:
            out += self.cgroup.args()
        return out + list(extra)

    def run(self, nsbox_args, timeout=120, **privileges):
        """podman run IMAGE NSBOX_ARGS...: (exit code, stdout, stderr)."""
        cmd = self.args(**privileges) + [self.image] + list(nsbox_args)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr

    def run_json(self, nsbox_args, **privileges):
        rc, out, err = self.run(["run", "--json"] + list(nsbox_args), **privileges)
        try:
            return rc, json.loads(out), err
        except ValueError:
            raise AssertionError(f"nsbox printed no JSON result (exit {rc}): {out[-300:]} {err[-300:]}")
