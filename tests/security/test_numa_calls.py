"""The NUMA placement calls (mbind, set_mempolicy, move_pages, migrate_pages), which
Docker allows only with CAP_SYS_NICE, are refused in a container sandbox, for root in it
too: no sandbox has that capability. (The main leg only: the container wall's filter.)"""

PROBE = r'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in (("set_mempolicy", 238, (0, 0, 0)), ("mbind", 237, (0, 0, 0, 0, 0, 0)),
                       ("migrate_pages", 256, (0, 0, 0, 0)), ("move_pages", 279, (0, 0, 0, 0, 0, 0))):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *args)
    print(name, r, ctypes.get_errno())
'''


def test_numa_placement_calls_are_refused(daemon):
    sb = daemon.client().create(image="default", user="root")
    try:
        sb.files.write("/tmp/numa.py", PROBE)
        out = sb.exec("python3 /tmp/numa.py", check=True).stdout
        seen = {line.split()[0]: (int(line.split()[1]), int(line.split()[2])) for line in out.splitlines()}
        assert set(seen) == {"set_mempolicy", "mbind", "migrate_pages", "move_pages"}, out
        for name, (r, err) in seen.items():
            assert (r, err) == (-1, 1), (name, r, err)  # EPERM
    finally:
        sb.delete()
