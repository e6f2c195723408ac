/*
 * rdma.c - the RDMA stack as the kernel shows it: modules, device nodes,
 * ports (state, link layer, speed), the GID table's RoCE v2 IPv4 entry,
 * rdma_cm's default RoCE mode, and P_Keys.  Everything from /proc/modules,
 * /dev/infiniband, /sys/class/infiniband and /sys/kernel/config/rdma_cm,
 * so that a fake tree drives each verdict.
 *
 * The ports found here (and their netdevs) are what net.c and cpu.c look
 * at next: the netdev's MTU, its IRQs, its NUMA node.
 */
#include "tools/doctor/doctor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The verdict for "this host has no RDMA": a failure when a configured
 * stream needs it, a warning when nothing says, skipped otherwise. */
static tb_doctor_verdict_t missing(const tb_doctor_t *d)
{
	return d->softrdma ? TB_DOCTOR_SKIPPED : d->needs_rdma > 0 ? TB_DOCTOR_FAIL
	       : d->needs_rdma < 0 ? TB_DOCTOR_WARN : TB_DOCTOR_SKIPPED;
}

/* The fix for "no RDMA", or why that is fine here. */
#define NO_RDMA_FIX(d) ((d)->softrdma ? softrdma_why : no_rdma_fix)
static const char softrdma_why[] =
	"libibverbs is softrdma, the software device: it needs no kernel "
	"RDMA stack";
static const char no_rdma_fix[] =
	"load the NIC's RDMA driver (modprobe mlx5_ib; or a software RoCE "
	"device: rdma link add rxe0 type rxe netdev eth0); without RDMA "
	"hardware run rc and ud on softrdma: tb-softrdma CMD...";

static int module_loaded(const char *mods, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = mods; p && *p; p = strchr(p, '\n')) {
		if (*p == '\n')
			p++;
		if (!strncmp(p, name, n) && p[n] == ' ')
			return 1;
	}
	return 0;
}

static void modules(tb_doctor_t *d)
{
	static const char *const core[] = {"ib_core", "ib_uverbs", "rdma_ucm",
					   "ib_cm"};
	static const char *const drivers[] = {"mlx5_ib", "mlx4_ib", "irdma",
		"bnxt_re", "qedr", "efa", "erdma", "hns_roce_hw_v2", "rdma_rxe",
		"siw", "mana_ib", "ocrdma", "vmw_pvrdma"};
	static char mods[1 << 16];
	char have[256] = "", lacking[128] = "", fix[256];
	const char *driver = NULL;

	if (tb_doctor_read(d, "/proc/modules", mods, sizeof(mods)) < 0) {
		tb_doctor_report(d, "rdma.modules", "", TB_DOCTOR_SKIPPED,
				 "no /proc/modules: a kernel without loadable "
				 "modules, or a sandbox that hides them",
				 "cannot read /proc/modules");
		return;
	}
	for (size_t i = 0; i < sizeof(core) / sizeof(core[0]); i++) {
		char *dst = module_loaded(mods, core[i]) ? have : lacking;
		size_t cap = dst == have ? sizeof(have) : sizeof(lacking);

		snprintf(dst + strlen(dst), cap - strlen(dst), "%s%s",
			 dst[0] ? " " : "", core[i]);
	}
	for (size_t i = 0; i < sizeof(drivers) / sizeof(drivers[0]); i++)
		if (module_loaded(mods, drivers[i])) {
			driver = drivers[i];
			snprintf(have + strlen(have), sizeof(have) - strlen(have),
				 " %s", driver);
			break;
		}
	if (!have[0] && !driver) {
		tb_doctor_report(d, "rdma.modules", "", missing(d), NO_RDMA_FIX(d),
				 "no RDMA module loaded: this host has no RDMA "
				 "stack");
		return;
	}
	if (!driver) {
		tb_doctor_report(d, "rdma.modules", "", missing(d), NO_RDMA_FIX(d),
				 "loaded: %s; no RDMA NIC driver (mlx5_ib, "
				 "irdma, bnxt_re, rdma_rxe, ...)", have);
		return;
	}
	if (lacking[0]) {
		snprintf(fix, sizeof(fix), "modprobe -a %s (and list them in "
			 "/etc/modules-load.d/rdma.conf)", lacking);
		tb_doctor_report(d, "rdma.modules", "",
				 strstr(lacking, "ib_uverbs") || strstr(lacking,
					"ib_core") ? TB_DOCTOR_FAIL
					: TB_DOCTOR_WARN, fix,
				 "loaded: %s; missing: %s", have, lacking);
		return;
	}
	tb_doctor_report(d, "rdma.modules", "", TB_DOCTOR_OK, NULL,
			 "loaded: %s", have);
}

static void devnodes(tb_doctor_t *d)
{
	DIR *dir = tb_doctor_opendir(d, "/dev/infiniband");
	char seen[256] = "";
	int uverbs = 0, cm = 0;
	struct dirent *e;

	while (dir && (e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		uverbs += !strncmp(e->d_name, "uverbs", 6);
		cm += !strcmp(e->d_name, "rdma_cm");
		if (strlen(seen) + strlen(e->d_name) + 2 < sizeof(seen))
			snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen),
				 "%s%s", seen[0] ? " " : "", e->d_name);
	}
	if (dir)
		closedir(dir);
	if (!uverbs)
		tb_doctor_report(d, "rdma.devnodes", "", missing(d),
				 d->softrdma ? softrdma_why :
				 "modprobe ib_uverbs (it makes "
				 "/dev/infiniband/uverbsN); in a container, "
				 "pass the device: --device=/dev/infiniband",
				 "/dev/infiniband: %s", seen[0] ? seen
								: "absent");
	else if (!cm)
		tb_doctor_report(d, "rdma.devnodes", "", TB_DOCTOR_WARN,
				 "modprobe rdma_ucm (/dev/infiniband/rdma_cm)",
				 "/dev/infiniband: %s; no rdma_cm", seen);
	else
		tb_doctor_report(d, "rdma.devnodes", "", TB_DOCTOR_OK, NULL,
				 "/dev/infiniband: %s", seen);
}

/* Finds the ports under /sys/class/infiniband and reports each one's
 * state. */
static void ports(tb_doctor_t *d)
{
	DIR *dir = tb_doctor_opendir(d, "/sys/class/infiniband");
	struct dirent *e;

	d->n_ports = 0;
	while (dir && (e = readdir(dir))) {
		char path[512];
		DIR *pd;
		struct dirent *pe;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports",
			 e->d_name);
		pd = tb_doctor_opendir(d, path);
		while (pd && (pe = readdir(pd))) {
			tb_doctor_port_t *p;
			char state[64] = "", phys[64] = "", ll[64] = "",
			     rate[64] = "", subj[96], fix[256];
			int port = atoi(pe->d_name);

			if (port <= 0 || d->n_ports == TB_DOCTOR_NDEVS_MAX)
				continue;
			p = &d->ports[d->n_ports++];
			snprintf(p->dev, sizeof(p->dev), "%s", e->d_name);
			p->port = port;
			p->ndev[0] = '\0';
#define PORT_FILE(name, buf)                                                 \
	do {                                                                 \
		snprintf(path, sizeof(path),                                 \
			 "/sys/class/infiniband/%s/ports/%d/" name, p->dev,  \
			 port);                                              \
		tb_doctor_read(d, path, buf, sizeof(buf));                   \
	} while (0)
			PORT_FILE("state", state);
			PORT_FILE("phys_state", phys);
			PORT_FILE("link_layer", ll);
			PORT_FILE("rate", rate);
			PORT_FILE("gid_attrs/ndevs/0", p->ndev);
#undef PORT_FILE
			p->ethernet = !strcmp(ll, "Ethernet");
			snprintf(subj, sizeof(subj), "%s/%d", p->dev, port);
			if (strstr(state, "ACTIVE")) {
				tb_doctor_report(d, "rdma.port", subj,
						 TB_DOCTOR_OK, NULL,
						 "%s, %s, %s, netdev %s", state,
						 ll, rate, p->ndev[0] ? p->ndev
								      : "-");
				continue;
			}
			if (p->ethernet && p->ndev[0])
				snprintf(fix, sizeof(fix), "bring the netdev "
					 "up (ip link set dev %s up) and check "
					 "the cable and the switch port",
					 p->ndev);
			else
				snprintf(fix, sizeof(fix), "check the cable "
					 "and the subnet manager (opensm; "
					 "sminfo)");
			tb_doctor_report(d, "rdma.port", subj, missing(d) ==
					 TB_DOCTOR_SKIPPED ? TB_DOCTOR_WARN
							   : TB_DOCTOR_FAIL,
					 fix, "state %s, physical %s, %s",
					 state[0] ? state : "?",
					 phys[0] ? phys : "?", ll);
		}
		if (pd)
			closedir(pd);
	}
	if (dir)
		closedir(dir);
	if (d->n_ports == 0)
		tb_doctor_report(d, "rdma.port", "", missing(d), NO_RDMA_FIX(d),
				 "no device under /sys/class/infiniband");
}

/* A RoCE v2 GID of an IPv4 address ("0000:0000:0000:0000:0000:ffff:..."). */
static void gids(tb_doctor_t *d)
{
	for (int i = 0; i < d->n_ports; i++) {
		tb_doctor_port_t *p = &d->ports[i];
		char subj[96], path[512], gid[64], type[32], found[160] = "";
		int n_v2 = 0;

		if (!p->ethernet)
			continue;
		snprintf(subj, sizeof(subj), "%s/%d", p->dev, p->port);
		for (int g = 0; g < 256; g++) {
			snprintf(path, sizeof(path), "/sys/class/infiniband/%s/"
				 "ports/%d/gids/%d", p->dev, p->port, g);
			if (tb_doctor_read(d, path, gid, sizeof(gid)) < 0)
				break;
			snprintf(path, sizeof(path), "/sys/class/infiniband/%s/"
				 "ports/%d/gid_attrs/types/%d", p->dev, p->port,
				 g);
			if (tb_doctor_read(d, path, type, sizeof(type)) < 0)
				continue;
			if (strcasecmp(type, "RoCE v2"))
				continue;
			n_v2++;
			if (!strncmp(gid, "0000:0000:0000:0000:0000:ffff:", 30)) {
				snprintf(found, sizeof(found), "index %d %s", g,
					 gid);
				break;
			}
		}
		if (found[0])
			tb_doctor_report(d, "rdma.gid", subj, TB_DOCTOR_OK, NULL,
					 "RoCE v2 IPv4 GID at %s (gid_index "
					 "default picks it)", found);
		else
		{
			char fix[512];

			snprintf(fix, sizeof(fix), "give %s an IPv4 address "
				 "(ip addr add A.B.C.D/NN dev %s): its RoCE v2 "
				 "GID appears with it; both hosts must use "
				 "RoCE v2 IPv4 GIDs, or connections fail with "
				 "a GID mismatch", p->ndev[0] ? p->ndev
							      : "the netdev",
				 p->ndev[0] ? p->ndev : "NDEV");
			tb_doctor_report(d, "rdma.gid", subj, TB_DOCTOR_FAIL,
					 fix, "no RoCE v2 IPv4 GID (%d RoCE v2 "
					 "GIDs, netdev %s)", n_v2,
					 p->ndev[0] ? p->ndev : "-");
		}
	}
}

static void roce_mode(tb_doctor_t *d)
{
	int any = 0;

	for (int i = 0; i < d->n_ports; i++) {
		tb_doctor_port_t *p = &d->ports[i];
		char subj[96], path[512], mode[64], fix[512];

		if (!p->ethernet)
			continue;
		any = 1;
		snprintf(subj, sizeof(subj), "%s/%d", p->dev, p->port);
		snprintf(path, sizeof(path), "/sys/kernel/config/rdma_cm/%s/"
			 "ports/%d/default_roce_mode", p->dev, p->port);
		snprintf(fix, sizeof(fix), "mkdir -p /sys/kernel/config/"
			 "rdma_cm/%s && echo 'RoCE v2' > /sys/kernel/config/"
			 "rdma_cm/%s/ports/%d/default_roce_mode", p->dev,
			 p->dev, p->port);
		if (tb_doctor_read(d, path, mode, sizeof(mode)) < 0) {
			if (!tb_doctor_exists(d, "/sys/kernel/config/rdma_cm"))
				tb_doctor_report(d, "rdma.roce_mode", subj,
						 TB_DOCTOR_SKIPPED,
						 "modprobe rdma_cm; mount -t "
						 "configfs none "
						 "/sys/kernel/config",
						 "rdma_cm's configfs is not "
						 "mounted: its default cannot "
						 "be read");
			else
				tb_doctor_report(d, "rdma.roce_mode", subj,
						 TB_DOCTOR_WARN, fix,
						 "no rdma_cm entry for %s: "
						 "rdma_cm uses the kernel's "
						 "default", p->dev);
		} else if (strcasecmp(mode, "RoCE v2")) {
			tb_doctor_report(d, "rdma.roce_mode", subj,
					 TB_DOCTOR_WARN, fix,
					 "default RoCE mode '%s': peers on "
					 "RoCE v2 will not connect through "
					 "rdma_cm", mode);
		} else {
			tb_doctor_report(d, "rdma.roce_mode", subj,
					 TB_DOCTOR_OK, NULL,
					 "default RoCE mode RoCE v2");
		}
	}
	if (!any && d->n_ports)
		tb_doctor_report(d, "rdma.roce_mode", "", TB_DOCTOR_SKIPPED,
				 "InfiniBand ports have no RoCE mode",
				 "no Ethernet (RoCE) port");
}

static void pkeys(tb_doctor_t *d)
{
	for (int i = 0; i < d->n_ports; i++) {
		tb_doctor_port_t *p = &d->ports[i];
		char subj[96], path[512];
		long pkey;

		snprintf(subj, sizeof(subj), "%s/%d", p->dev, p->port);
		if (p->ethernet) {
			tb_doctor_report(d, "rdma.pkey", subj,
					 TB_DOCTOR_SKIPPED,
					 "P_Keys partition InfiniBand; RoCE "
					 "uses the default", "RoCE port");
			continue;
		}
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/"
			 "%d/pkeys/0", p->dev, p->port);
		if (tb_doctor_read_long(d, path, &pkey) != 0) {
			tb_doctor_report(d, "rdma.pkey", subj, TB_DOCTOR_WARN,
					 "check the port with ibstat",
					 "no P_Key table");
		} else if ((pkey & 0x7fff) != 0x7fff) {
			tb_doctor_report(d, "rdma.pkey", subj, TB_DOCTOR_WARN,
					 "tickbus uses P_Key index 0: put both "
					 "hosts in the same partition on the "
					 "subnet manager (opensm partitions."
					 "conf), or connections fail with a "
					 "P_Key mismatch",
					 "P_Key[0] = 0x%04lx, not the default "
					 "partition", pkey);
		} else {
			tb_doctor_report(d, "rdma.pkey", subj, TB_DOCTOR_OK,
					 NULL, "P_Key[0] = 0x%04lx (%s member)",
					 pkey, pkey & 0x8000 ? "full"
							     : "limited");
		}
	}
}

void tb_doctor_check_rdma(tb_doctor_t *d)
{
	modules(d);
	devnodes(d);
	ports(d);
	gids(d);
	roce_mode(d);
	pkeys(d);
}
