/*
 * transport/verbs.c - device, port and GID selection and queue-pair set-up
 * for rc and ud (the reading of the stream keys is in verbs.h).
 */
#include "bus/transport/verbs.h"

#include "bus/clock.h"
#include "bus/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* ------------------------------------------------------------------ GIDs */

static int gid_is_ipv4_mapped(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	return memcmp(g->raw, prefix, sizeof(prefix)) == 0;
}

static int gid_is_zero(const union ibv_gid *g)
{
	static const union ibv_gid zero;

	return memcmp(g, &zero, sizeof(zero)) == 0;
}

/* The GID of `d`'s port that cfg.gid_index names, or the automatic one for
 * its link layer; its netdev too on RoCE. */
static int pick_gid(tb_verbs_dev_t *d, const tb_stream_cfg_t *cfg, int tbl_len)
{
	struct ibv_gid_entry e;

	if (cfg->gid_index >= 0) {
		if (cfg->gid_index >= tbl_len ||
		    ibv_query_gid(d->ctx, d->port, cfg->gid_index, &d->gid) != 0 ||
		    gid_is_zero(&d->gid))
			return tb_error_set(TB_ECONFIG, "gid_index %d: %s port %u has "
					  "no GID there (a table of %d)",
					  cfg->gid_index, d->name, d->port, tbl_len);
		d->gid_index = cfg->gid_index;
	} else if (d->link_layer == IBV_LINK_LAYER_INFINIBAND) {
		d->gid_index = 0;    /* the port GID */
		if (ibv_query_gid(d->ctx, d->port, 0, &d->gid) != 0)
			return tb_error_sys(errno, "%s port %u: query GID 0",
					    d->name, d->port);
	} else {
		d->gid_index = -1;
		for (int i = 0; i < tbl_len && d->gid_index < 0; i++) {
			if (ibv_query_gid_ex(d->ctx, d->port, (uint32_t)i, &e, 0) != 0 ||
			    e.gid_type != IBV_GID_TYPE_ROCE_V2 ||
			    !gid_is_ipv4_mapped(&e.gid) || gid_is_zero(&e.gid))
				continue;
			d->gid_index = i;
			d->gid = e.gid;
		}
		if (d->gid_index < 0)
			return tb_error_set(TB_ECONFIG, "%s port %u has no RoCE v2 GID "
					  "in IPv4-mapped form (has its netdev an "
					  "IPv4 address?); set gid_index to use "
					  "another", d->name, d->port);
	}
	if (d->link_layer == IBV_LINK_LAYER_ETHERNET &&
	    ibv_query_gid_ex(d->ctx, d->port, (uint32_t)d->gid_index, &e, 0) == 0)
		d->ifindex = (int)e.ndev_ifindex;
	return 0;
}

/* ---------------------------------------------------------------- device */

/* Why neither tickbus transport can run on `dev` (whose attributes are
 * `da`), or NULL when one can.  The tail after the colon is the same for
 * all: what to use instead. */
static const char *unusable(const struct ibv_device *dev,
			    const struct ibv_device_attr *da)
{
	if (dev->transport_type == IBV_TRANSPORT_IWARP ||
	    dev->node_type == IBV_NODE_RNIC)
		return "is an iWARP device: its connections are made through "
		       "rdma_cm (iw_cm), it has no UD queue pairs or multicast, "
		       "and RDMA WRITE with immediate only where its provider "
		       "grants it, so neither rc nor ud can run on it: use "
		       "transport = udp";
	if (da->vendor_id == TB_VERBS_VENDOR_AMAZON ||
	    dev->node_type == IBV_NODE_UNSPECIFIED ||
	    dev->transport_type == IBV_TRANSPORT_UNSPECIFIED)
		return "is an AWS EFA device (or another of unspecified node "
		       "type): it offers UD and SRD queue pairs only, with no "
		       "RC, no multicast attach and unordered delivery, so "
		       "neither rc nor ud can run on it (its port says "
		       "InfiniBand, but it is not): use transport = udp";
	if (dev->transport_type == IBV_TRANSPORT_USNIC ||
	    dev->transport_type == IBV_TRANSPORT_USNIC_UDP ||
	    dev->node_type == IBV_NODE_USNIC || dev->node_type == IBV_NODE_USNIC_UDP)
		return "is a usNIC device: it has no RDMA WRITE and no RC "
		       "queue pairs, so neither rc nor ud can run on it: use "
		       "transport = udp";
	return NULL;
}

/* The NUMA node sysfs gives the device at `ibdev_path`, or -1. */
static int read_numa_node(const char *ibdev_path)
{
	char path[IBV_SYSFS_PATH_MAX + 32], buf[16];
	FILE *f;
	int node = -1;

	if (!ibdev_path[0])
		return -1;
	snprintf(path, sizeof(path), "%s/device/numa_node", ibdev_path);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fgets(buf, sizeof(buf), f)) {
		char *end;
		long v = strtol(buf, &end, 10);

		if (end != buf && v >= 0 && v < 4096)
			node = (int)v;
	}
	fclose(f);
	return node;
}

/* The port of d->ctx to use: cfg.rdma_port, or the first active one;
 * InfiniBand ones are passed over (*ib_seen set) when `no_ib`.  0 if none;
 * *pa holds the port's attributes. */
static int pick_port(tb_verbs_dev_t *d, const struct ibv_device_attr *dap,
		     int want, const char *no_ib, struct ibv_port_attr *pa,
		     int *ib_seen)
{
	struct ibv_device_attr da = *dap;
	int first, last;

	first = want ? want : 1;
	last = want ? want : da.phys_port_cnt;
	for (int p = first; p <= last && p <= da.phys_port_cnt; p++) {
		if (ibv_query_port(d->ctx, (uint8_t)p, pa) != 0 ||
		    pa->state != IBV_PORT_ACTIVE)
			continue;
		if (no_ib && pa->link_layer != IBV_LINK_LAYER_ETHERNET) {
			*ib_seen = 1;
			continue;
		}
		return p;
	}
	return 0;
}

/* Why no port was found, once the devices have all been looked at. */
static int no_port(const tb_stream_cfg_t *cfg, int named_seen, int ib_seen,
		   const char *no_ib, const char *names)
{
	const char *dev = cfg->rdma_device[0] ? cfg->rdma_device
					      : "the RDMA devices here";

	if (cfg->rdma_device[0] && !named_seen)
		return tb_error_set(TB_ENOENT, "no RDMA device named '%s' (this "
				  "host has: %s)", cfg->rdma_device, names);
	if (ib_seen && cfg->rdma_port)
		return tb_error_set(TB_ENOTSUP, "port %d of %s is InfiniBand, and "
				  "%s: use a RoCE port", cfg->rdma_port, dev,
				  no_ib);
	if (ib_seen)
		return tb_error_set(TB_ENOTSUP, "the active ports of %s are "
				  "InfiniBand, and %s: use a RoCE port", dev,
				  no_ib);
	if (cfg->rdma_port)
		return tb_error_set(TB_ENOENT, "%s: no active port %d", dev,
				  cfg->rdma_port);
	return tb_error_set(TB_ENOENT, "%s: no active port", dev);
}

int tb_verbs_open(tb_verbs_dev_t *d, const tb_stream_cfg_t *cfg,
		  const char *no_ib)
{
	struct ibv_device **list;
	struct ibv_port_attr pa;
	char names[128] = "", refused[IBV_SYSFS_NAME_MAX + 400] = "";
	int n = 0, port = 0, named_seen = 0, ib_seen = 0, rc;

	memset(d, 0, sizeof(*d));
	errno = 0;
	list = ibv_get_device_list(&n);
	if (!list || n == 0) {
		int e = errno;

		if (list)
			ibv_free_device_list(list);
		return tb_error_set(TB_ENOTSUP, "no RDMA device on this host (%s); "
				  "without an RDMA NIC, run on softrdma: "
				  "LD_LIBRARY_PATH=build/softrdma",
				  e ? strerror(e) : "none listed");
	}
	for (int i = 0; i < n && !port; i++) {
		const char *name = ibv_get_device_name(list[i]);
		size_t used = strlen(names);

		snprintf(names + used, sizeof(names) - used, "%s%s",
			 used ? ", " : "", name);
		if (cfg->rdma_device[0] && strcmp(cfg->rdma_device, name) != 0)
			continue;
		named_seen = 1;
		d->ctx = ibv_open_device(list[i]);
		if (!d->ctx)
			continue;
		{
			struct ibv_device_attr da;
			const char *why;

			if (ibv_query_device(d->ctx, &da) == 0) {
				why = unusable(list[i], &da);
				if (why && !refused[0])
					snprintf(refused, sizeof(refused), "%s %s",
						 name, why);
				port = why ? 0 : pick_port(d, &da, cfg->rdma_port,
							   no_ib, &pa, &ib_seen);
			}
		}
		if (port) {
			snprintf(d->name, sizeof(d->name), "%s", name);
			snprintf(d->ibdev_path, sizeof(d->ibdev_path), "%s",
				 list[i]->ibdev_path);
			break;
		}
		ibv_close_device(d->ctx);
		d->ctx = NULL;
	}
	ibv_free_device_list(list);
	if (!port && refused[0] && (cfg->rdma_device[0] || !ib_seen))
		return tb_error_set(TB_ENOTSUP, "%s", refused);
	if (!port)
		return no_port(cfg, named_seen, ib_seen, no_ib, names);
	d->port = (uint8_t)port;
	d->link_layer = pa.link_layer == IBV_LINK_LAYER_INFINIBAND
				? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
	d->global = d->link_layer == IBV_LINK_LAYER_ETHERNET;
	d->mtu = pa.active_mtu;
	d->lid = d->global ? 0 : pa.lid;
	d->numa_node = read_numa_node(d->ibdev_path);
	if ((rc = pick_gid(d, cfg, pa.gid_tbl_len)) < 0)
		goto fail;
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd) {
		rc = tb_error_sys(errno, "%s: ibv_alloc_pd", d->name);
		goto fail;
	}
	return 0;
fail:
	tb_verbs_close(d);
	return rc;
}

void tb_verbs_close(tb_verbs_dev_t *d)
{
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	memset(d, 0, sizeof(*d));
}

uint32_t tb_verbs_psn_random(void)
{
	uint32_t v = 0;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint32_t)tb_clock_now_ns();
	return v & TB_VERBS_PSN_MASK;
}

/* ----------------------------------------------------------- queue pairs */

/* ibv_create_qp_ex with only c->send_ops, writing the granted
 * capabilities back to *cap; NULL with errno set. */
static struct ibv_qp *create_ex(tb_verbs_dev_t *d, struct ibv_pd *pd,
				const tb_verbs_qp_cfg_t *c, struct ibv_qp_cap *cap)
{
	struct ibv_qp_init_attr_ex ix = {
		.send_cq = c->cq, .recv_cq = c->cq, .qp_type = c->type,
		.cap = *cap,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd, .send_ops_flags = c->send_ops,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(d->ctx, &ix);

	if (qp)
		*cap = ix.cap;
	return qp;
}

/* The extended call, or the plain one where the provider lacks it. */
static struct ibv_qp *create_one(tb_verbs_dev_t *d, struct ibv_pd *pd,
				 const tb_verbs_qp_cfg_t *c,
				 struct ibv_qp_init_attr *ia)
{
	struct ibv_qp *qp;

	if (c->send_ops) {
		qp = create_ex(d, pd, c, &ia->cap);
		if (qp || (errno != EOPNOTSUPP && errno != ENOSYS))
			return qp;
	}
	return ibv_create_qp(pd, ia);
}

struct ibv_qp *tb_verbs_qp_create(tb_verbs_dev_t *d, const tb_verbs_qp_cfg_t *c,
				  uint32_t *inline_got)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = c->cq, .recv_cq = c->cq, .qp_type = c->type,
		.cap = {.max_send_wr = c->send_wr, .max_recv_wr = c->recv_wr,
			.max_send_sge = c->send_sge, .max_recv_sge = 1,
			.max_inline_data = c->inline_want},
	};
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0,
				.port_num = d->port};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	const char *kind = c->type == IBV_QPT_UD ? "UD" : "RC";
	struct ibv_pd *pd = c->pd ? c->pd : d->pd;
	struct ibv_qp *qp = create_one(d, pd, c, &ia);
	int e;

	if (!qp && c->inline_min < c->inline_want) {
		ia.cap = (struct ibv_qp_cap){.max_send_wr = c->send_wr,
					     .max_recv_wr = c->recv_wr,
					     .max_send_sge = c->send_sge,
					     .max_recv_sge = 1,
					     .max_inline_data = c->inline_min};
		qp = create_one(d, pd, c, &ia);
	}
	if (!qp) {
		tb_error_sys(errno, "%s: ibv_create_qp (%s, %u send and %u receive "
			     "WRs, %u bytes inline)", d->name, kind, c->send_wr,
			     c->recv_wr, c->inline_min);
		return NULL;
	}
	if (inline_got)
		*inline_got = ia.cap.max_inline_data;
	if (c->type == IBV_QPT_UD) {
		a.qkey = c->qkey;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = c->access;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	if ((e = ibv_modify_qp(qp, &a, mask)) != 0) {
		tb_error_sys(e, "%s: ibv_modify_qp (%s) to INIT", d->name, kind);
		ibv_destroy_qp(qp);
		return NULL;
	}
	return qp;
}

tb_verbs_path_t tb_verbs_path_of(const tb_stream_cfg_t *cfg, enum ibv_mtu mtu)
{
	return (tb_verbs_path_t){.mtu = mtu, .sl = (uint8_t)cfg->rdma_sl,
				 .traffic_class = (uint8_t)cfg->rdma_traffic_class,
				 .timeout = (uint8_t)cfg->rdma_timeout,
				 .retry = (uint8_t)cfg->rdma_retry};
}

int tb_verbs_rc_connect(tb_verbs_dev_t *d, struct ibv_qp *qp,
			const tb_verbs_peer_t *peer, uint32_t my_psn,
			const tb_verbs_path_t *path)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = path->mtu,
		.dest_qp_num = peer->qpn, .rq_psn = peer->psn,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 1,
		.ah_attr = {.port_num = d->port, .is_global = (uint8_t)d->global},
	};
	int e;

	if (d->global && peer->lid)
		return tb_error_set(TB_EINVAL, "%s port %u is RoCE and the peer is "
				  "on InfiniBand (LID %u): both ends must be on "
				  "the same link layer", d->name, d->port,
				  peer->lid);
	if (!d->global && !peer->lid)
		return tb_error_set(TB_EINVAL, "%s port %u is InfiniBand and the "
				  "peer sent no LID (it is on RoCE): both ends "
				  "must be on the same link layer", d->name,
				  d->port);
	if (d->global) {
		/* RoCE: routed by the GRH; its traffic class picks the
		 * switch queue (DSCP) on a lossless fabric. */
		memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.grh.traffic_class = path->traffic_class;
	} else {
		/* InfiniBand: switched by LID within the subnet, on the
		 * service level's virtual lane. */
		a.ah_attr.dlid = peer->lid;
		a.ah_attr.sl = path->sl;
		a.ah_attr.src_path_bits = 0;
	}
	e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (e != 0)
		return tb_error_sys(e, "%s: ibv_modify_qp (RC) to RTR", d->name);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = path->timeout;  /* 4.096 us * 2^timeout per try */
	a.retry_cnt = path->retry;  /* a dead peer fails the QP after
				     * (retry + 1) of them */
	a.rnr_retry = 7;     /* never: credits keep receives ahead of writes */
	a.sq_psn = my_psn;
	a.max_rd_atomic = 1;
	e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			  IBV_QP_MAX_QP_RD_ATOMIC);
	if (e != 0)
		return tb_error_sys(e, "%s: ibv_modify_qp (RC) to RTS", d->name);
	return 0;
}

int tb_verbs_ud_ready(tb_verbs_dev_t *d, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR};
	int e = ibv_modify_qp(qp, &a, IBV_QP_STATE);

	if (e == 0) {
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 0;
		e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	if (e != 0)
		return tb_error_sys(e, "%s: bring the UD QP to RTS", d->name);
	return 0;
}

/* -------------------------------------------------------- NUMA, refresh */

/* The CPU list of NUMA node `node` from sysfs ("0-7,16-23"), or "?". */
static void node_cpus(int node, char *buf, size_t len)
{
	char path[64];
	FILE *f;

	snprintf(buf, len, "?");
	snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist",
		 node);
	f = fopen(path, "r");
	if (!f)
		return;
	if (fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = '\0';
	else
		snprintf(buf, len, "?");
	fclose(f);
}

int tb_verbs_numa_check(const tb_verbs_dev_t *d, int ring_node,
			const char *what)
{
	char cpus[128];

	if (d->numa_node < 0 || ring_node < 0 || d->numa_node == ring_node)
		return 0;
	node_cpus(d->numa_node, cpus, sizeof(cpus));
	tb_warn("%s: its ring is on NUMA node %d but %s is attached to node "
		"%d, so every RDMA transfer crosses between sockets: pin the "
		"polling thread (publisher_core / subscriber_core) to a core of "
		"node %d (cpus %s)", what, ring_node, d->name, d->numa_node,
		d->numa_node, cpus);
	return 1;
}

int tb_verbs_refresh(tb_verbs_dev_t *d)
{
	struct ibv_port_attr pa;
	union ibv_gid gid;
	int e, changed;

	if ((e = ibv_query_port(d->ctx, d->port, &pa)) != 0)
		return tb_error_sys(e, "%s port %u: ibv_query_port", d->name, d->port);
	if (ibv_query_gid(d->ctx, d->port, d->gid_index, &gid) != 0)
		return tb_error_sys(errno, "%s port %u: query GID %d", d->name,
				    d->port, d->gid_index);
	changed = memcmp(&gid, &d->gid, sizeof(gid)) != 0 ||
		  (!d->global && pa.lid != d->lid);
	d->gid = gid;
	d->mtu = pa.active_mtu;
	if (!d->global)
		d->lid = pa.lid;
	return changed;
}
