# sbx's code interpreter: one long-lived context of `POST /v1/sandboxes/{id}/code`.
#
# sbxd starts it inside the sandbox as an ordinary background process (the agent keeps
# it, so it outlives sbxd) with `python3 -u -c BOOT sbx-code CONTEXT LANGUAGE`, this
# program in the environment variable SBX_CODE_INTERPRETER. Standard library only: it
# works in any image with python3.
#
# Protocol. Requests, one JSON object per line on stdin:
#   {"cell": N, "code": "...", "env": {...}}
# Answers, one JSON object per line on the stdout that sbxd follows (`proto` below):
#   {"type": "ready", "language", "pid"}                  once, at start
#   {"cell": N, "type": "stdout" | "stderr", "text"}      output while cell N runs
#   {"cell": N, "type": "result", "is_main_result", "text", "html", "png", ...}
#   {"cell": N, "type": "error", "name", "value", "traceback"}
#   {"cell": N, "type": "end", "execution_count"}         cell N is over
# The cell's fds 1 and 2 are pipes this program reads, so output written by anything
# (print, os.write, a subprocess) comes back in order within its stream. SIGINT (sbxd's
# timeout) raises KeyboardInterrupt in the running cell.
import ast
import base64
import codecs
import json
import linecache
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
import types

LANGUAGE = sys.argv[3] if len(sys.argv) > 3 else "python"
TOKEN = os.urandom(12).hex().encode()

_proto_fd = os.dup(1)
_proto_lock = threading.Lock()
_cell = None  # the cell running now, which output belongs to


def _between_cells(signum, frame):
    pass  # an interrupt that came after its cell ended: nothing to stop


def interruptible(on):
    """In a cell, SIGINT raises KeyboardInterrupt (Python's own handler, no frame of
    ours in the traceback); between cells it is let go."""
    signal.signal(signal.SIGINT, signal.default_int_handler if on else _between_cells)


interruptible(False)


def send(msg):
    # On a line of its own even after a partial line that a cell wrote to this channel.
    data = ("\n" + json.dumps(msg, ensure_ascii=False, default=str) + "\n").encode("utf-8", "replace")
    with _proto_lock:
        view = memoryview(data)
        while view:
            try:
                n = os.write(_proto_fd, view)
            except InterruptedError:
                continue
            view = view[n:]


class Capture(threading.Thread):
    """Reads one of the cell's streams (a pipe on fd 1 or 2) and sends what comes as
    output of the running cell; `sync()` returns once everything written before it
    has been sent."""

    def __init__(self, fd, name):
        super().__init__(daemon=True)
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)
        self.fd, self.r, self.name = fd, r, name
        self.mark = b"\0sbx-sync-" + TOKEN + b"\0"
        self.synced = threading.Event()
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def emit(self, data, final=False):
        text = self.decoder.decode(data, final)
        if text:
            send({"cell": _cell, "type": self.name, "text": text})

    def run(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self.r, 65536)
            except InterruptedError:
                continue
            if not chunk:
                return
            buf += chunk
            while True:
                at = buf.find(self.mark)
                if at < 0:
                    break
                self.emit(buf[:at], final=True)
                buf = buf[at + len(self.mark):]
                self.synced.set()
            # Keep what could be the start of a mark split across reads.
            keep = 0
            for k in range(min(len(self.mark) - 1, len(buf)), 0, -1):
                if self.mark.startswith(buf[-k:]):
                    keep = k
                    break
            self.emit(buf[:len(buf) - keep])
            buf = buf[len(buf) - keep:]

    def sync(self):
        self.synced.clear()
        os.write(self.fd, self.mark)
        self.synced.wait(10)


def start_captures():
    """The requests come on a copy of stdin; the cell's own stdin is /dev/null (what it
    reads must not be the next request), its stdout and stderr pipes read here."""
    global _requests
    _requests = os.fdopen(os.dup(0), "rb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout.flush()
    sys.stderr.flush()
    caps = [Capture(1, "stdout"), Capture(2, "stderr")]
    for c in caps:
        c.start()
    # Line-buffered text on the new pipes, as a terminal would have it.
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
    return caps


def flush_captures(caps):
    for f in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            f.flush()
        except Exception:
            pass
    try:  # what C code (an extension's printf) left in the C library's buffers
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except Exception:
        pass
    for c in caps:
        c.sync()


# ---- Python -------------------------------------------------------------------------

_FORMATS = (("html", "_repr_html_"), ("markdown", "_repr_markdown_"), ("svg", "_repr_svg_"),
            ("png", "_repr_png_"), ("jpeg", "_repr_jpeg_"), ("pdf", "_repr_pdf_"),
            ("latex", "_repr_latex_"), ("json", "_repr_json_"), ("javascript", "_repr_javascript_"))
_MIME = {"text/plain": "text", "text/html": "html", "text/markdown": "markdown", "image/svg+xml": "svg",
         "image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf", "text/latex": "latex",
         "application/json": "json", "application/javascript": "javascript"}


def _encoded(kind, v):
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode() if kind in ("png", "jpeg", "pdf") else bytes(v).decode(
            "utf-8", "replace")
    if kind == "json":
        return v
    return str(v)


def render(obj, main):
    """E2B's result shape: `text` and the rich forms the object offers."""
    out = {"type": "result", "is_main_result": main}
    try:
        out["text"] = repr(obj)
    except Exception as e:
        out["text"] = "<repr failed: %s>" % type(e).__name__
    bundle = getattr(obj, "_repr_mimebundle_", None)
    if callable(bundle):
        try:
            got = bundle()
            data = got[0] if isinstance(got, tuple) else got
            for mime, v in (data or {}).items():
                if mime in _MIME and v is not None:
                    out[_MIME[mime]] = _encoded(_MIME[mime], v)
        except Exception:
            pass
    for kind, meth in _FORMATS:
        if kind in out:
            continue
        f = getattr(obj, meth, None)
        if not callable(f):
            continue
        try:
            v = f()
        except Exception:
            continue
        if isinstance(v, tuple):  # (data, metadata)
            v = v[0]
        if v is not None:
            out[kind] = _encoded(kind, v)
    return out


def figures():
    """Open matplotlib figures as PNG results, then closed (as a notebook shows them)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    import io
    out = []
    try:
        for num in plt.get_fignums():
            fig = plt.figure(num)
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
            out.append({"type": "result", "is_main_result": False, "text": repr(fig),
                        "png": base64.b64encode(buf.getvalue()).decode()})
        plt.close("all")
    except Exception as e:
        out.append({"type": "result", "is_main_result": False, "text": "<figure failed: %r>" % e})
    return out


class Python:
    def __init__(self):
        os.environ.setdefault("MPLBACKEND", "Agg")
        # The cells' module is __main__, so that pickle and multiprocessing find what
        # they define.
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        self.globals = main.__dict__
        self.globals["__builtins__"] = __builtins__
        self.globals["display"] = self.display
        self.results = []

    def display(self, *objs):
        for o in objs:
            self.results.append(render(o, False))

    def reseed(self):
        if "random" in sys.modules:
            sys.modules["random"].seed()

    def error(self, e, filename):
        tb = e.__traceback__
        # The cell's own frames: the interpreter's are not the user's business.
        while tb is not None and tb.tb_frame.f_code.co_filename != filename:
            tb = tb.tb_next
        lines = traceback.format_exception(type(e), e, tb)
        return {"type": "error", "name": type(e).__name__, "value": str(e), "traceback": "".join(lines)}

    def run(self, n, code, env):
        self.results = []
        filename = "<cell-%d>" % n
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        err = None
        try:
            tree = ast.parse(code, filename, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, filename, "exec"), self.globals)
            if last is not None:
                value = eval(compile(last, filename, "eval"), self.globals)
                if value is not None:
                    self.globals["_"] = value
                    self.results.append(render(value, True))
        except SyntaxError as e:
            err = {"type": "error", "name": type(e).__name__, "value": str(e),
                   "traceback": "".join(traceback.format_exception_only(type(e), e))}
        except BaseException as e:  # KeyboardInterrupt and SystemExit too: the context lives on
            err = self.error(e, filename)
        return self.results + figures(), err


# ---- bash ---------------------------------------------------------------------------

class Bash:
    """A bash session: each cell is sourced in the same shell, so its variables, functions
    and working directory last."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sbx-code-")
        self.start()

    def start(self):
        self.ctl_r, ctl_w = os.pipe()
        self.ctl_fd = ctl_w
        self.shell = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE,
                                      pass_fds=(ctl_w,), close_fds=True)
        os.close(ctl_w)
        self.ctl = os.fdopen(self.ctl_r, "rb", buffering=0)
        # An interrupt stops the running command, not the session.
        self.write("trap : INT\n")

    def write(self, text):
        self.shell.stdin.write(text.encode())
        self.shell.stdin.flush()

    def reseed(self):
        self.write("RANDOM=%d\n" % int.from_bytes(os.urandom(4), "big"))

    def run(self, n, code, env):
        for k in env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                return [], {"type": "error", "name": "ValueError", "value": "env: %r is not a shell variable name" % k,
                            "traceback": ""}
        path = os.path.join(self.dir, "cell-%d.sh" % n)
        with open(path, "w") as f:
            f.write(code)
            if not code.endswith("\n"):
                f.write("\n")
        # The cell's env lasts for the cell: set before, put back after (its status kept).
        before = "".join("__sbx_had_%s=${%s+1}; __sbx_old_%s=${%s-}; export %s=%s\n" % (k, k, k, k, k, shlex.quote(v))
                         for k, v in env.items())
        after = "".join('if [ -n "$__sbx_had_%s" ]; then %s=$__sbx_old_%s; else unset %s; fi; unset __sbx_had_%s __sbx_old_%s\n'
                        % (k, k, k, k, k, k) for k in env)
        # An interrupt ends the cell (the sourced file returns 130), not the session. The
        # cell's commands get no stdin and not the control pipe (what they start in the
        # background must not hold it); the mark names the cell.
        self.write("%strap 'return 130' INT\n. %s </dev/null %d>&-\n__sbx_rc=$?\ntrap : INT\n%sprintf '%%s %%d %%d\\n' %s %d $__sbx_rc >&%d\n"
                   % (before, shlex.quote(path), self.ctl_fd, after, TOKEN.decode(), n, self.ctl_fd))
        while True:
            line = b""
            while not line.endswith(b"\n"):
                try:
                    ch = self.ctl.read(1)
                except KeyboardInterrupt:
                    continue  # the command got it too; the shell goes on to the mark
                if not ch:
                    break
                line += ch
            parts = line.split()
            # Another cell's mark (one that was interrupted before its own came): skipped.
            if not (len(parts) == 3 and parts[0] == TOKEN and parts[1] != str(n).encode()):
                break
        os.unlink(path)
        if len(parts) == 3 and parts[0] == TOKEN:
            rc = int(parts[2])
            if rc == 0:
                return [], None
            return [], {"type": "error", "name": "ExitCodeError", "value": "exit status %d" % rc, "traceback": ""}
        status = self.shell.wait()
        self.ctl.close()
        self.start()
        return [], {"type": "error", "name": "ShellExited",
                    "value": "the shell exited with status %d; a new one started (its state is gone)" % status,
                    "traceback": ""}


_host = os.uname().nodename


def renew_if_copied(kernel):
    """A copy of this process in another sandbox (a memory template's or a fork's, each
    with a hostname of its own) draws random numbers of its own: Python's `random`, or
    bash's $RANDOM, is seeded again from the kernel's pool, which sbx renewed in the copy."""
    global _host
    name = os.uname().nodename
    if name != _host:
        _host = name
        kernel.reseed()


def self_env():
    """The sandbox this process runs in now, with its live token: sbx keeps them in
    $SBX_ENV_FILE. This process may have come with a memory template's copy, whose
    environment names the template's source, with a token the capture killed."""
    out = {}
    try:
        with open(os.environ.get("SBX_ENV_FILE", "/run/sbx.env")) as f:
            for line in f:
                k, sep, v = line.rstrip("\n").partition("=")
                if sep and k in ("SBX_SANDBOX_ID", "SBX_TOKEN"):
                    out[k] = v
    except OSError:
        pass
    return out


def main():
    caps = start_captures()
    global _cell
    kernel = Bash() if LANGUAGE == "bash" else Python()
    send({"type": "ready", "language": LANGUAGE, "pid": os.getpid()})
    count = 0
    while True:
        line = _requests.readline()
        if not line:
            return
        try:
            req = json.loads(line)
            n = int(req["cell"])
            code = str(req.get("code", ""))
            env = {str(k): str(v) for k, v in (req.get("env") or {}).items()}
        except Exception:
            continue
        count += 1
        renew_if_copied(kernel)
        env = {**self_env(), **env}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        _cell = n
        try:
            interruptible(True)
            results, err = kernel.run(n, code, env)
            interruptible(False)
        except KeyboardInterrupt:
            interruptible(False)
            results, err = [], {"type": "error", "name": "KeyboardInterrupt", "value": "", "traceback": ""}
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        flush_captures(caps)
        for r in results:
            r["cell"] = n
            send(r)
        if err:
            err["cell"] = n
            send(err)
        _cell = None
        send({"cell": n, "type": "end", "execution_count": count})


main()
