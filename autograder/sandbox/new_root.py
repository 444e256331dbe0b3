"""Run inside a child's new namespaces, before its interpreter: build the file system it will see, then exec it.

`python -I -S new_root.py SPEC -- cmd...` (standard library only; run by namespaces.wrap). SPEC (JSON) lists
what the child may see, and nothing else is made visible: a new root (tmpfs) gets the system's software
folders and the interpreter's read-only, the scratch folder writable, the usual character devices, a
private capped /tmp, /var/tmp and /dev/shm, and a /proc; the old root is then detached (pivot_root), so
home, the checkout, dist/, a batch or /srv do not exist for the child, wherever they lie. Last, the uid is
dropped (as root) and the command is exec'd in the scratch folder.

The mounts are system calls made here (ctypes), not one `mount` process each: the whole view costs a
few milliseconds.
"""
import ctypes
import json
import os
import subprocess
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                  data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def bind(source: str, target: str, read_only: bool) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    if read_only:  # a bind mount takes its flags only from a remount
        _mount("none", target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def tmpfs(target: str, size: str, mode: str) -> None:
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode={mode}")


def pivot(new_root: str) -> None:
    os.chdir(new_root)
    os.mkdir(".old")
    if hasattr(libc, "pivot_root"):
        if libc.pivot_root(b".", b".old") != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"pivot_root: {os.strerror(err)}")
    else:  # an older C library without the wrapper: util-linux's command makes the same call
        subprocess.run([spec_tool("pivot_root"), ".", ".old"], check=True)
    os.chdir("/")
    if libc.umount2(b"/.old", MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"detaching the old root: {os.strerror(err)}")
    os.rmdir("/.old")


def spec_tool(name: str) -> str:
    for folder in (*os.environ.get("PATH", "").split(os.pathsep), "/usr/sbin", "/sbin"):
        if folder and os.access(os.path.join(folder, name), os.X_OK):
            return os.path.join(folder, name)
    return name


def main(spec: dict, cmd: list[str]) -> None:
    r = spec["root"]
    _mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the machine's mounts
    tmpfs(spec["parent"], "1m", "755")
    os.mkdir(r)
    tmpfs(r, spec["tmp_size"], "755")
    for path, target in spec["links"].items():  # /bin -> usr/bin on a merged-/usr system: the same link
        os.symlink(target, r + path)
    for path in spec["system"]:
        os.makedirs(r + path, exist_ok=True)
        bind(path, r + path, read_only=True)
    for path in spec["hidden"]:  # out of sight even where a system folder holds it
        tmpfs(r + path, "1m", "755")
    for path in ("/dev", "/tmp", "/var/tmp", "/dev/shm", "/proc"):
        os.makedirs(r + path, exist_ok=True)
    for path in ("/tmp", "/var/tmp", "/dev/shm"):  # private and capped; the scratch folder goes inside below
        tmpfs(r + path, spec["tmp_size"], "1777")
    for i, path in enumerate(spec["kept"]):  # the scratch first (writable), then the interpreter's folders
        os.makedirs(r + path, exist_ok=True)
        bind(path, r + path, read_only=i > 0)
    for dev in spec["devices"]:
        with open(r + "/dev/" + dev, "w"):
            pass
        bind("/dev/" + dev, r + "/dev/" + dev, read_only=False)
    if spec["proc"] == "own":  # its own pid space: /proc shows its own processes only
        _mount("proc", r + "/proc", "proc", MS_NOSUID | MS_NODEV)
    elif spec["proc"] == "hidepid":  # a fork server's: each child (a uid of its own) sees only its own processes
        _mount("proc", r + "/proc", "proc", MS_NOSUID | MS_NODEV, "hidepid=2")
    else:  # an ordinary user's fork server cannot make a /proc of its own: the machine's, for its own uid
        bind("/proc", r + "/proc", read_only=False)
    pivot(r)
    os.chdir(spec["scratch"])
    uid = spec["uid"]
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    sep = sys.argv.index("--")
    try:
        main(json.loads(sys.argv[1]), sys.argv[sep + 1:])
    except OSError as e:
        print(f"attn-child: the sandbox's file system could not be made: {e}", file=sys.stderr)
        sys.exit(126)
