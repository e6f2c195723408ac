/*
 * softrdma-ctl: what a fabric operator (or a test) does to a port from the
 * outside, and what the NIC then tells its users:
 *
 *   softrdma-ctl [-f FABRIC] show
 *   softrdma-ctl [-f FABRIC] port PID|all down|up
 *       the port of that process ("host") goes down or up: nothing leaves
 *       or reaches a down port; every context of the process gets
 *       IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE.
 *   softrdma-ctl [-f FABRIC] gid PID|all INDEX GID v1|v2|ib|none
 *       sets (or, with none, empties) a GID table entry, as an address
 *       added to or removed from the netdev does; IBV_EVENT_GID_CHANGE.
 *       Packets to a GID the port no longer has are lost.
 *   softrdma-ctl [-f FABRIC] qp-fatal QPN
 *       the QP goes to ERR and its owner gets IBV_EVENT_QP_FATAL (as after
 *       a catastrophic error on its work queue).
 *
 * FABRIC defaults to $SOFTRDMA_FABRIC, then "default".  The program is a
 * two-line main (ctl/softrdma-ctl.c) over softrdma_ctl(), which the library
 * exports in its own version node (SOFTRDMA_PRIVATE_1) so that the tool
 * shares the fabric layout and its locking with the library; rdma-core
 * binaries never bind to it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

SR_EXPORT int softrdma_ctl(int argc, char **argv);

static int usage(void)
{
	fprintf(stderr,
		"usage: softrdma-ctl [-f FABRIC] show\n"
		"       softrdma-ctl [-f FABRIC] port PID|all down|up\n"
		"       softrdma-ctl [-f FABRIC] gid PID|all INDEX GID v1|v2|ib|none\n"
		"       softrdma-ctl [-f FABRIC] qp-fatal QPN\n");
	return 2;
}

static const char *type_name(uint32_t t)
{
	switch (t) {
	case IBV_GID_TYPE_IB + 1: return "ib";
	case IBV_GID_TYPE_ROCE_V1 + 1: return "v1";
	case IBV_GID_TYPE_ROCE_V2 + 1: return "v2";
	default: return "-";
	}
}

static void show(struct sr_fabric *f)
{
	for (uint32_t i = 0; i < SR_MAX_PROCS; i++) {
		struct sr_proc_shm *p = sr_fabric_proc(f, i);
		if (!atomic_load(&p->pid) || !sr_proc_alive(p))
			continue;
		struct sr_port_shm *port = &p->port;
		printf("pid %d: port %s, %s, mtu %u", (int)atomic_load(&p->pid),
		       atomic_load(&port->state) == IBV_PORT_ACTIVE ? "ACTIVE" : "DOWN",
		       port->link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand"
								      : "Ethernet",
		       sr_mtu_bytes(port->active_mtu));
		if (port->link_layer == IBV_LINK_LAYER_INFINIBAND)
			printf(", lid %u", port->lid);
		printf("\n");
		for (uint32_t g = 0; g < SR_GID_SLOTS; g++) {
			struct sr_gid_entry e;
			char txt[INET6_ADDRSTRLEN];
			sr_port_gid(port, g, &e);
			if (e.type == SR_GID_EMPTY)
				continue;
			inet_ntop(AF_INET6, e.raw, txt, sizeof txt);
			printf("  gid %u %s %s\n", g, txt, type_name(e.type));
		}
		for (uint32_t q = 0; q < SR_MAX_QPS; q++) {
			struct sr_qp_shm *s = sr_fabric_qp(f, q);
			if (atomic_load(&s->in_use) == 1 && s->pid == atomic_load(&p->pid))
				printf("  qp %u %s state %u dest %u\n", s->qpn,
				       s->qp_type == IBV_QPT_UD ? "UD" : "RC",
				       atomic_load(&s->state), atomic_load(&s->dest_qpn));
		}
	}
}

/* Applies fn to the process pid ("all": every live one); -1 if none. */
static int each_proc(struct sr_fabric *f, const char *pid_s,
		     void (*fn)(struct sr_fabric *, uint32_t, void *), void *arg)
{
	int all = !strcmp(pid_s, "all"), n = 0;
	pid_t pid = all ? 0 : (pid_t)atoi(pid_s);
	for (uint32_t i = 0; i < SR_MAX_PROCS; i++) {
		struct sr_proc_shm *p = sr_fabric_proc(f, i);
		pid_t q = atomic_load(&p->pid);
		if (!q || (!all && q != pid) || !sr_proc_alive(p))
			continue;
		fn(f, i, arg);
		n++;
	}
	return n ? 0 : -1;
}

static void set_port(struct sr_fabric *f, uint32_t proc, void *arg)
{
	int up = *(int *)arg;
	struct sr_port_shm *p = sr_port_of(f, proc);
	uint32_t want = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
	if (atomic_exchange(&p->state, want) != want)
		sr_port_event(f, proc, up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
}

struct gid_arg {
	uint32_t index, type;
	uint8_t raw[16];
};

static void set_gid(struct sr_fabric *f, uint32_t proc, void *arg)
{
	struct gid_arg *g = arg;
	sr_port_set_gid(sr_port_of(f, proc), g->index,
			g->type == SR_GID_EMPTY ? NULL : g->raw, g->type);
	sr_port_event(f, proc, IBV_EVENT_GID_CHANGE);
}

int softrdma_ctl(int argc, char **argv)
{
	const char *name = getenv(SR_FABRIC_ENV);
	if (!name || !*name)
		name = SR_FABRIC_DEFAULT;
	int i = 1;
	if (i + 1 < argc && !strcmp(argv[i], "-f")) {
		name = argv[i + 1];
		i += 2;
	}
	if (i >= argc)
		return usage();
	struct sr_fabric f;
	if (sr_fabric_map(&f, name) < 0) {
		fprintf(stderr, "softrdma-ctl: fabric '%s': %s\n", name,
			errno == ENOENT ? "no such fabric (no process has the "
					  "device open)" : strerror(errno));
		return 1;
	}
	const char *cmd = argv[i++];
	int rc = 0;
	if (!strcmp(cmd, "show") && i == argc) {
		show(&f);
	} else if (!strcmp(cmd, "port") && i + 2 == argc &&
		   (!strcmp(argv[i + 1], "down") || !strcmp(argv[i + 1], "up"))) {
		int up = !strcmp(argv[i + 1], "up");
		sr_fabric_lock(&f);
		rc = each_proc(&f, argv[i], set_port, &up);
		sr_fabric_unlock(&f);
	} else if (!strcmp(cmd, "gid") && i + 4 == argc) {
		struct gid_arg g = {.index = (uint32_t)atoi(argv[i + 1])};
		const char *t = argv[i + 3];
		g.type = !strcmp(t, "v1") ? IBV_GID_TYPE_ROCE_V1 + 1 :
			 !strcmp(t, "v2") ? IBV_GID_TYPE_ROCE_V2 + 1 :
			 !strcmp(t, "ib") ? IBV_GID_TYPE_IB + 1 : SR_GID_EMPTY;
		if ((g.type == SR_GID_EMPTY && strcmp(t, "none")) ||
		    g.index >= SR_GID_SLOTS ||
		    (g.type != SR_GID_EMPTY &&
		     inet_pton(AF_INET6, argv[i + 2], g.raw) != 1)) {
			fprintf(stderr, "softrdma-ctl: gid: want INDEX < %u, an IPv6 "
				"form GID and v1, v2, ib or none\n", SR_GID_SLOTS);
			rc = 2;
		} else {
			sr_fabric_lock(&f);
			rc = each_proc(&f, argv[i], set_gid, &g);
			sr_fabric_unlock(&f);
		}
	} else if (!strcmp(cmd, "qp-fatal") && i + 1 == argc) {
		uint32_t qpn = (uint32_t)strtoul(argv[i], NULL, 0);
		struct sr_qp_shm *q = sr_fabric_qp(&f, qpn & (SR_MAX_QPS - 1));
		if (atomic_load(&q->in_use) == 1 && q->qpn == qpn)
			sr_qp_fatal(&f, q);
		else
			rc = -1;
	} else {
		rc = usage();
	}
	if (rc == -1) {
		fprintf(stderr, "softrdma-ctl: no such process or QP in fabric '%s'\n",
			name);
		rc = 1;
	}
	if (f.evsock >= 0)
		close(f.evsock);
	munmap(f.base, f.size);
	close(f.fd);
	return rc;
}
