#!/usr/bin/python3
"""Writes the fake hosts tb-doctor is tested against (tests/doctor/roots/).

Each host is a folder with:
  root/    the files tb-doctor reads under --root (a fake /sys, /proc, /dev,
           and cmd/NAME for command outputs)
  args     tb-doctor's other arguments, one a line ("@" = this folder)
  expect   every verdict it must give, "ID SUBJECT VERDICT" a line, in order

The trees are checked in; this script is how they were made (rerun it after
changing a host here: python3 tests/doctor/make-roots.py).  The `expect`
files are written by hand, from what each host is meant to show.
"""
import os
import shutil

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "roots")

MODULES_ALL = """mlx5_ib 466944 0 - Live 0x0
ib_uverbs 163840 1 mlx5_ib, Live 0x0
rdma_ucm 28672 0 - Live 0x0
ib_cm 131072 1 rdma_cm, Live 0x0
ib_core 434176 4 rdma_ucm,ib_cm,ib_uverbs,mlx5_ib, Live 0x0
"""


def put(host, path, text):
    p = os.path.join(HERE, host, "root", path.lstrip("/"))
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text if text.endswith("\n") or not text else text + "\n")


def port(host, dev, n, state, ll, ndev, gids=(), pkey=None, node=0):
    base = "/sys/class/infiniband/%s" % dev
    put(host, base + "/device/numa_node", str(node))
    b = "%s/ports/%d" % (base, n)
    put(host, b + "/state", state)
    put(host, b + "/phys_state", "5: LinkUp" if "ACTIVE" in state
        else "3: Disabled")
    put(host, b + "/link_layer", ll)
    put(host, b + "/rate", "100 Gb/sec (4X EDR)")
    if ndev:
        put(host, b + "/gid_attrs/ndevs/0", ndev)
    for i, (gid, typ) in enumerate(gids):
        put(host, b + "/gids/%d" % i, gid)
        put(host, b + "/gid_attrs/types/%d" % i, typ)
    if pkey is not None:
        put(host, b + "/pkeys/0", pkey)


def common_proc(host, memlock="unlimited", capeff="0000003fffffffff",
                huge=(512, 512), flags="fpu tsc constant_tsc nonstop_tsc"):
    put(host, "/proc/self/limits",
        "Limit                     Soft Limit           Hard Limit   Units\n"
        "Max locked memory         %s            %s        bytes" %
        (memlock, memlock))
    put(host, "/proc/self/status", "Name:\ttb-doctor\nCapEff:\t%s" % capeff)
    put(host, "/proc/meminfo", "MemTotal: 32000000 kB\nHugePages_Total: %d\n"
        "HugePages_Free: %d\nHugepagesize: 2048 kB" % huge)
    put(host, "/proc/cpuinfo", "processor\t: 0\nflags\t\t: %s" % flags)


def cpus(host, isolated, nohz, gov, cores, node=0):
    put(host, "/sys/devices/system/cpu/isolated", isolated)
    put(host, "/sys/devices/system/cpu/nohz_full", nohz)
    for c in cores:
        put(host, "/sys/devices/system/cpu/cpu%d/cpufreq/scaling_governor" %
            c, gov)
        put(host, "/sys/devices/system/cpu/cpu%d/node%d/cpulist" % (c, node),
            "0-7")


def write(host, args, config=None):
    d = os.path.join(HERE, host)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "args"), "w") as f:
        f.write("".join(a + "\n" for a in args))
    if config:
        with open(os.path.join(d, "streams.ini"), "w") as f:
            f.write(config)


GID_V2 = ("0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2")
GID_V1 = ("fe80:0000:0000:0000:0a00:00ff:fe00:0001", "IB/RoCE v1")

HEALTHY_INI = """; A feed handler host: ud market data and a udp copy, pinned to the
; isolated cores 0 and 1 (a test machine may have only two).
[stream md]
id = 1
transport = ud
group = 239.1.1.1:30001
mtu = 4000
ring_size = 4M
publisher_core = 0
subscriber_core = 1

[stream md_udp]
id = 2
transport = udp
group = 239.1.1.2:30002
interface = ens1f0
mtu = 8000
rcvbuf = 8388608
ring_size = 4M
"""


def healthy():
    h = "healthy"
    put(h, "/proc/modules", MODULES_ALL)
    put(h, "/dev/infiniband/uverbs0", "")
    put(h, "/dev/infiniband/rdma_cm", "")
    port(h, "mlx5_0", 1, "4: ACTIVE", "Ethernet", "ens1f0",
         gids=[GID_V1, GID_V2])
    put(h, "/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_mode",
        "RoCE v2")
    put(h, "/sys/class/net/ens1f0/mtu", "9000")
    put(h, "/sys/class/net/ens1f0/ecn/roce_np/enable/3", "1")
    put(h, "/sys/class/net/ens1f0/ecn/roce_rp/enable/3", "1")
    put(h, "/cmd/dcb-pfc-ens1f0",
        "pfc-cap 8 macsec-bypass off delay 0\n"
        "prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off")
    put(h, "/cmd/ruleset", "table inet filter {\n chain input {\n"
        "  type filter hook input priority 0; policy accept;\n"
        "  udp dport 4791 accept\n }\n}")
    put(h, "/proc/sys/net/ipv4/conf/all/rp_filter", "0")
    put(h, "/proc/sys/net/ipv4/conf/ens1f0/rp_filter", "2")
    put(h, "/proc/sys/net/ipv4/conf/ens1f0/force_igmp_version", "0")
    put(h, "/proc/sys/net/ipv4/igmp_max_memberships", "20")
    put(h, "/proc/sys/net/core/rmem_max", "16777216")
    common_proc(h)
    cpus(h, "0-1", "0-1", "performance", [0, 1])
    put(h, "/proc/interrupts",
        "           CPU0       CPU1\n"
        " 40:  1000  0  IR-PCI-MSI  mlx5_async@pci:0000:3b:00.0\n"
        " 41:  1000  0  IR-PCI-MSI  mlx5_comp0@pci:0000:3b:00.0\n"
        " 42:     0  9  IR-PCI-MSI  nvme0q1")
    put(h, "/proc/irq/40/smp_affinity_list", "4-7")
    put(h, "/proc/irq/41/smp_affinity_list", "4-7")
    put(h, "/proc/irq/42/smp_affinity_list", "0")
    put(h, "/sys/kernel/mm/transparent_hugepage/enabled",
        "always [madvise] never")
    put(h, "/sys/kernel/mm/transparent_hugepage/defrag",
        "always defer defer+madvise [madvise] never")
    put(h, "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        "tsc")
    put(h, "/sys/devices/system/clocksource/clocksource0/"
        "available_clocksource", "tsc hpet acpi_pm")
    write(h, ["--no-verbs", "-c", "@/streams.ini"], HEALTHY_INI)


BROKEN_INI = """; The same streams on a host that gets everything wrong.
[stream md]
id = 1
transport = ud
group = 239.1.1.1:4791
mtu = 4000
ring_size = 64M
publisher_core = 0
subscriber_core = 1

[stream md_udp]
id = 2
transport = udp
group = 239.1.1.2:30002
interface = ens1f0
mtu = 8000
rcvbuf = 8388608
ring_size = 4M

[stream orders]
id = 3
transport = rc
control = 10.0.0.1:17000
ring_size = 4M
"""


def broken():
    h = "broken"
    put(h, "/proc/modules", "mlx5_ib 466944 0 - Live 0x0\n"
        "ib_core 434176 4 mlx5_ib, Live 0x0")
    put(h, "/dev/infiniband/uverbs0", "")
    port(h, "mlx5_0", 1, "1: DOWN", "Ethernet", "ens1f0", gids=[GID_V1],
         node=1)
    port(h, "mlx5_1", 1, "4: ACTIVE", "InfiniBand", "", pkey="0x8001",
         node=1)
    put(h, "/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_mode",
        "IB/RoCE v1")
    put(h, "/sys/class/net/ens1f0/mtu", "1500")
    put(h, "/sys/class/net/ens1f0/ecn/roce_np/enable/3", "0")
    put(h, "/sys/class/net/ens1f0/ecn/roce_rp/enable/3", "1")
    put(h, "/cmd/dcb-pfc-ens1f0",
        "pfc-cap 8 macsec-bypass off delay 0\n"
        "prio-pfc 0:off 1:off 2:off 3:off 4:off 5:off 6:off 7:off")
    put(h, "/cmd/ruleset", "*filter\n:INPUT ACCEPT [0:0]\n"
        "-A INPUT -p udp -m udp --dport 4791 -j DROP\n"
        "-A INPUT -p tcp -m tcp --dport 17000 -j REJECT\nCOMMIT")
    put(h, "/proc/sys/net/ipv4/conf/all/rp_filter", "1")
    put(h, "/proc/sys/net/ipv4/conf/ens1f0/rp_filter", "0")
    put(h, "/proc/sys/net/ipv4/conf/ens1f0/force_igmp_version", "1")
    put(h, "/proc/sys/net/ipv4/igmp_max_memberships", "20")
    put(h, "/proc/sys/net/core/rmem_max", "212992")
    common_proc(h, memlock="65536", capeff="0000000000000000",
                huge=(0, 0), flags="fpu tsc constant_tsc")
    cpus(h, "", "", "powersave", [0, 1], node=0)
    put(h, "/proc/interrupts",
        "           CPU0       CPU1\n"
        " 41:  1000  0  IR-PCI-MSI  mlx5_comp0@pci:0000:3b:00.0")
    put(h, "/proc/irq/41/smp_affinity_list", "0-3")
    put(h, "/sys/kernel/mm/transparent_hugepage/enabled",
        "[always] madvise never")
    put(h, "/sys/kernel/mm/transparent_hugepage/defrag",
        "[always] defer defer+madvise madvise never")
    put(h, "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        "hpet")
    put(h, "/sys/devices/system/clocksource/clocksource0/"
        "available_clocksource", "hpet acpi_pm")
    write(h, ["--no-verbs", "-c", "@/streams.ini"], BROKEN_INI)


RDMA_INI = """; One ud stream: this host must have RDMA.
[stream md]
id = 1
transport = ud
group = 239.1.1.1:30001
"""


def bare():
    # Nothing at all: every check says why it cannot look, and "no RDMA" is
    # a failure because the stream needs it.
    h = "bare"
    os.makedirs(os.path.join(HERE, h, "root"), exist_ok=True)
    put(h, "/README", "an empty host: nothing under /proc, /sys or /dev")
    write(h, ["--no-verbs", "-c", "@/streams.ini"], RDMA_INI)


def bare_noconfig():
    # No config: "no RDMA" is a warning; a small memlock without
    # CAP_IPC_LOCK is one too.
    h = "bare-noconfig"
    common_proc(h, memlock="8388608", capeff="0000000000000000",
                huge=(64, 64), flags="fpu")
    put(h, "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        "tsc")
    write(h, ["--no-verbs"])


MIXED_INI = """; udp only: RDMA is not needed here, and three groups exceed the
; host's IGMP membership limit.
[stream a]
id = 1
transport = udp
group = 239.1.1.1:30001
interface = eth0

[stream b]
id = 2
transport = udp
group = 239.1.1.2:30002
interface = eth0

[stream c]
id = 3
transport = udp
group = 239.1.1.3:30003
interface = eth0
"""


def mixed():
    h = "mixed"
    put(h, "/proc/modules", MODULES_ALL.replace("rdma_ucm 28672 0 - Live 0x0\n",
                                                ""))
    put(h, "/dev/infiniband/uverbs0", "")
    put(h, "/dev/infiniband/rdma_cm", "")
    port(h, "mlx5_0", 1, "1: DOWN", "Ethernet", "eth0", gids=[GID_V2])
    port(h, "mlx5_1", 1, "4: ACTIVE", "InfiniBand", "", pkey="0xffff")
    put(h, "/sys/class/net/eth0/mtu", "1500")
    put(h, "/cmd/ruleset", "table inet filter {\n chain input {\n"
        "  type filter hook input priority 0; policy drop;\n"
        "  tcp dport 22 accept\n }\n}")
    put(h, "/proc/sys/net/ipv4/conf/all/rp_filter", "0")
    put(h, "/proc/sys/net/ipv4/conf/eth0/rp_filter", "0")
    put(h, "/proc/sys/net/ipv4/conf/eth0/force_igmp_version", "0")
    put(h, "/proc/sys/net/ipv4/igmp_max_memberships", "2")
    common_proc(h, memlock="8388608", capeff="0000000000004000")
    put(h, "/proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel")
    write(h, ["--no-verbs", "-c", "@/streams.ini"], MIXED_INI)


def peer():
    # The healthy host with a peer whose MTU differs.
    h = "peer-mtu"
    src = os.path.join(HERE, "healthy", "root")
    dst = os.path.join(HERE, h, "root")
    shutil.copytree(src, dst)
    write(h, ["--no-verbs", "-c", "@/streams.ini", "--peer-mtu", "1500"],
          HEALTHY_INI)


if __name__ == "__main__":
    shutil.rmtree(HERE, ignore_errors=True)
    healthy()
    broken()
    bare()
    bare_noconfig()
    mixed()
    peer()
