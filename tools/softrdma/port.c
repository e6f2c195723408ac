/*
 * Ports: each process is a host with one port, whose attributes live in its
 * slot of the fabric (sr_port_shm) so that a peer can check every request
 * against both ends, as two NICs and the wire between them would:
 *
 *   - state: ACTIVE, or DOWN (softrdma-ctl port PID down): nothing leaves or
 *     reaches a down port; RC requests time out, UD datagrams are lost.
 *   - link layer: Ethernet (RoCE, the default) or InfiniBand
 *     (SOFTRDMA_LINK_LAYER=ib).  On InfiniBand the port has a LID
 *     (SOFTRDMA_LID, default 1; SM LID 1) and a request reaches a port only
 *     when its address vector's dlid is that LID.
 *   - active MTU: SOFTRDMA_PORT_MTU (256..4096, default 4096), per process,
 *     so two "hosts" can disagree; max_mtu is always 4096.  A packet larger
 *     than the active MTU of either end is dropped on the wire.
 *   - a GID table laid out as mlx5 lays out a RoCE port with an IPv6
 *     link-local and an IPv4 address: 0 fe80::EUI-64 RoCE v1, 1 the same
 *     RoCE v2, 2 ::ffff:a.b.c.d RoCE v1, 3 the same RoCE v2 (the address is
 *     SOFTRDMA_IPV4, default 127.0.0.1); on InfiniBand one entry, the port
 *     GID fe80::GUID.  gid_tbl_len is 256; the empty entries read as zero
 *     GIDs through ibv_query_gid and ENODATA through ibv_query_gid_ex, as
 *     with rdma-core.  softrdma-ctl changes entries (GID_CHANGE event).
 *
 * The table is written under a sequence lock (gid_seq odd while writing) so
 * that readers on the data path never see half an entry.
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

/* The EUI-64 that the link-local GID and the node GUID carry. */
static const uint8_t sr_eui64[8] = {0x02, 0x00, 0x00, 0xff, 0xfe, 0x5e, 0x00, 0x01};

static void fill_gid(uint8_t raw[16], int link_local, uint32_t ip)
{
	memset(raw, 0, 16);
	if (link_local) {
		/* Another "host" (SOFTRDMA_IPV4) has another MAC, so another
		 * EUI-64: its last two bytes follow the address. */
		raw[0] = 0xfe;
		raw[1] = 0x80;
		memcpy(raw + 8, sr_eui64, 8);
		if (ip != htonl(0x7f000001)) {
			raw[14] = ((const uint8_t *)&ip)[2];
			raw[15] = ((const uint8_t *)&ip)[3];
		}
	} else {
		raw[10] = 0xff;
		raw[11] = 0xff;
		memcpy(raw + 12, &ip, 4);
	}
}

static unsigned env_uint(const char *name, unsigned dflt, unsigned lo,
			 unsigned hi)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return dflt;
	char *end;
	unsigned long v = strtoul(s, &end, 0);
	if (*end || v < lo || v > hi) {
		fprintf(stderr, "softrdma: %s='%s' is not in %u..%u; using %u\n",
			name, s, lo, hi, dflt);
		return dflt;
	}
	return (unsigned)v;
}

uint32_t sr_mtu_bytes(uint32_t mtu)
{
	return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 0;
}

void sr_port_init(struct sr_port_shm *p)
{
	memset(p, 0, sizeof *p);
	const char *ll = getenv("SOFTRDMA_LINK_LAYER");
	int ib = ll && (!strcmp(ll, "ib") || !strcmp(ll, "IB") ||
			!strcmp(ll, "infiniband"));
	if (ll && *ll && !ib && strcmp(ll, "eth") && strcmp(ll, "ethernet"))
		fprintf(stderr, "softrdma: SOFTRDMA_LINK_LAYER='%s' is not ib or "
			"eth; using eth\n", ll);
	unsigned mtu = env_uint("SOFTRDMA_PORT_MTU", 4096, 256, 4096);
	uint32_t mtu_enum = IBV_MTU_4096;
	for (uint32_t m = IBV_MTU_256; m <= IBV_MTU_4096; m++)
		if (sr_mtu_bytes(m) == mtu)
			mtu_enum = m;
	if (sr_mtu_bytes(mtu_enum) != mtu)
		fprintf(stderr, "softrdma: SOFTRDMA_PORT_MTU=%u is not 256, 512, "
			"1024, 2048 or 4096; using 4096\n", mtu);
	p->active_mtu = mtu_enum;
	uint32_t ip = htonl(0x7f000001);
	const char *s = getenv("SOFTRDMA_IPV4");
	struct in_addr a;
	if (s && *s) {
		if (inet_pton(AF_INET, s, &a) == 1)
			ip = a.s_addr;
		else
			fprintf(stderr, "softrdma: SOFTRDMA_IPV4='%s' is not an "
				"IPv4 address; using 127.0.0.1\n", s);
	}
	p->ip = ip;
	if (ib) {
		p->link_layer = IBV_LINK_LAYER_INFINIBAND;
		p->lid = (uint16_t)env_uint("SOFTRDMA_LID", 1, 1, 0xbfff);
		p->sm_lid = 1;
		fill_gid(p->gid[0].raw, 1, ip);
		p->gid[0].type = IBV_GID_TYPE_IB + 1;
	} else {
		p->link_layer = IBV_LINK_LAYER_ETHERNET;
		fill_gid(p->gid[0].raw, 1, ip);
		p->gid[0].type = IBV_GID_TYPE_ROCE_V1 + 1;
		fill_gid(p->gid[1].raw, 1, ip);
		p->gid[1].type = IBV_GID_TYPE_ROCE_V2 + 1;
		fill_gid(p->gid[2].raw, 0, ip);
		p->gid[2].type = IBV_GID_TYPE_ROCE_V1 + 1;
		fill_gid(p->gid[3].raw, 0, ip);
		p->gid[3].type = IBV_GID_TYPE_ROCE_V2 + 1;
	}
	atomic_store(&p->state, IBV_PORT_ACTIVE);
}

struct sr_port_shm *sr_port_of(struct sr_fabric *f, uint32_t proc)
{
	return &sr_fabric_proc(f, proc)->port;
}

struct sr_port_shm *sr_port_self(struct sr_fabric *f)
{
	return sr_port_of(f, f->proc);
}

/* One entry, read consistently.  0, or -1 past the slots. */
int sr_port_gid(struct sr_port_shm *p, uint32_t index, struct sr_gid_entry *e)
{
	memset(e, 0, sizeof *e);
	if (index >= SR_GID_SLOTS)
		return index < SR_GID_TBL_LEN ? 0 : -1;
	for (;;) {
		/* A6 pairs with R6 in sr_port_set_gid */
		uint32_t s = atomic_load_explicit(&p->gid_seq, memory_order_acquire);
		if (s & 1) {
			__builtin_ia32_pause();
			continue;
		}
		memcpy(e->raw, p->gid[index].raw, 16);
		e->type = p->gid[index].type;
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&p->gid_seq, memory_order_relaxed) == s)
			return 0;
	}
}

/* Does the port own GID raw of that type (what a packet must match to be
 * taken by this port)? */
int sr_port_has_gid(struct sr_port_shm *p, const uint8_t *raw, uint32_t type)
{
	for (uint32_t i = 0; i < SR_GID_SLOTS; i++) {
		struct sr_gid_entry e;
		sr_port_gid(p, i, &e);
		if (e.type != SR_GID_EMPTY && e.type == type && !memcmp(e.raw, raw, 16))
			return 1;
	}
	return 0;
}

/* Set-up path (softrdma-ctl, under the fabric lock). */
void sr_port_set_gid(struct sr_port_shm *p, uint32_t index, const uint8_t *raw,
		     uint32_t type)
{
	if (index >= SR_GID_SLOTS)
		return;
	uint32_t s = atomic_load_explicit(&p->gid_seq, memory_order_relaxed);
	atomic_store_explicit(&p->gid_seq, s + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	if (raw && type != SR_GID_EMPTY)
		memcpy(p->gid[index].raw, raw, 16);
	else
		memset(p->gid[index].raw, 0, 16);
	p->gid[index].type = raw ? type : SR_GID_EMPTY;
	atomic_store_explicit(&p->gid_seq, s + 2, memory_order_release); /* R6 */
}

/* A port event (PORT_ERR, PORT_ACTIVE, GID_CHANGE) to every context of the
 * process in slot proc. */
void sr_port_event(struct sr_fabric *f, uint32_t proc, uint32_t type)
{
	struct sr_proc_shm *p = sr_fabric_proc(f, proc);
	pid_t pid = atomic_load(&p->pid);
	if (pid <= 0)
		return;
	for (int i = 0; i < SR_CTX_PER_PROC; i++) {
		uint32_t id = atomic_load(&p->ctx[i]);
		if (id)
			sr_async_post(f, pid, id, type, SR_ASYNC_PORT, 1, 0);
	}
}

/* ---- the verbs ---- */

#undef ibv_query_port

/* Fills the first len bytes of a struct ibv_port_attr. */
static int port_attr(struct ibv_context *ctx, uint8_t port,
		     struct ibv_port_attr *out, size_t len)
{
	if (port != 1) {
		errno = EINVAL;
		return EINVAL;
	}
	struct sr_port_shm *p = sr_port_self(sr_ctx(ctx)->fab);
	int ib = p->link_layer == IBV_LINK_LAYER_INFINIBAND;
	int up = atomic_load(&p->state) == IBV_PORT_ACTIVE;
	struct ibv_port_attr a = {
		.state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN,
		.max_mtu = IBV_MTU_4096,
		.active_mtu = p->active_mtu,
		.gid_tbl_len = SR_GID_TBL_LEN,
		.port_cap_flags = IBV_PORT_CM_SUP |
				  (ib ? 0 : IBV_PORT_IP_BASED_GIDS),
		.max_msg_sz = SR_MAX_MSG,
		.pkey_tbl_len = SR_PKEY_TBL_LEN,
		.lid = ib ? p->lid : 0,
		.sm_lid = ib ? p->sm_lid : 0,
		.lmc = 0,
		.max_vl_num = ib ? 4 : 1,
		.sm_sl = 0,
		.active_width = 2,  /* 4x */
		.active_speed = 32, /* 25 Gb/s (EDR) lane */
		.phys_state = up ? 5 : 3, /* LinkUp : Disabled */
		.link_layer = ib ? IBV_LINK_LAYER_INFINIBAND
				 : IBV_LINK_LAYER_ETHERNET,
	};
	memcpy(out, &a, len < sizeof a ? len : sizeof a);
	return 0;
}

int sr_query_port_ex(struct ibv_context *context, uint8_t port_num,
		     struct ibv_port_attr *attr, size_t len);
int sr_query_port_ex(struct ibv_context *context, uint8_t port_num,
		     struct ibv_port_attr *attr, size_t len)
{
	SR_FAULT_RET("ibv_query_port", errno);
	return port_attr(context, port_num, attr, len);
}

/* The exported symbol serves old binaries, whose struct ends at link_layer. */
SR_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
			     struct _compat_ibv_port_attr *attr)
{
	return sr_query_port_ex(context, port_num, (struct ibv_port_attr *)attr,
				offsetof(struct ibv_port_attr, flags));
}
SR_DEFAULT_V11(ibv_query_port);

/* An empty entry reads as the zero GID, as rdma-core does it. */
SR_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num,
			    int index, union ibv_gid *gid)
{
	SR_FAULT_RET("ibv_query_gid", -1);
	if (port_num != 1 || index < 0 || index >= SR_GID_TBL_LEN) {
		errno = EINVAL;
		return -1;
	}
	struct sr_gid_entry e;
	sr_port_gid(sr_port_self(sr_ctx(context)->fab), (uint32_t)index, &e);
	memcpy(gid->raw, e.raw, 16);
	return 0;
}
SR_DEFAULT_V11(ibv_query_gid);

SR_EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
				uint32_t gid_index, struct ibv_gid_entry *entry,
				uint32_t flags, size_t entry_size)
{
	if (flags)
		return EOPNOTSUPP;
	if (entry_size < sizeof *entry || port_num != 1 ||
	    gid_index >= SR_GID_TBL_LEN)
		return EINVAL;
	struct sr_port_shm *p = sr_port_self(sr_ctx(context)->fab);
	struct sr_gid_entry e;
	sr_port_gid(p, gid_index, &e);
	if (e.type == SR_GID_EMPTY)
		return ENODATA;
	memset(entry, 0, entry_size);
	memcpy(entry->gid.raw, e.raw, 16);
	entry->gid_index = gid_index;
	entry->port_num = port_num;
	entry->gid_type = e.type - 1;
	entry->ndev_ifindex = p->link_layer == IBV_LINK_LAYER_ETHERNET ? 1 : 0;
	return 0;
}

SR_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context,
				       struct ibv_gid_entry *entries,
				       size_t max_entries, uint32_t flags,
				       size_t entry_size)
{
	if (flags)
		return -EOPNOTSUPP;
	if (entry_size < sizeof *entries)
		return -EINVAL;
	ssize_t n = 0;
	for (uint32_t i = 0; i < SR_GID_SLOTS; i++) {
		struct ibv_gid_entry e;
		if (_ibv_query_gid_ex(context, 1, i, &e, 0, sizeof e))
			continue;
		if ((size_t)n == max_entries)
			return -EINVAL; /* too small, as the kernel says */
		memset((uint8_t *)entries + (size_t)n * entry_size, 0, entry_size);
		memcpy((uint8_t *)entries + (size_t)n * entry_size, &e, sizeof e);
		n++;
	}
	return n;
}

SR_EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num,
			     int index, __be16 *pkey)
{
	(void)context;
	if (port_num != 1 || index < 0 || index >= SR_PKEY_TBL_LEN) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htons(SR_DEFAULT_PKEY);
	return 0;
}
SR_DEFAULT_V11(ibv_query_pkey);

SR_EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num,
				 __be16 pkey)
{
	(void)context;
	if (port_num == 1 && (ntohs(pkey) & 0x7fff) == 0x7fff)
		return 0;
	errno = ENOENT;
	return -1;
}
