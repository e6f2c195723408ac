/*
 * Unreliable datagram: address handles, multicast groups, and the UD send
 * path.
 *
 * A UD send is one datagram of at most the sender port's active MTU
 * (SOFTRDMA_PORT_MTU): a larger one completes with IBV_WC_LOC_LEN_ERR.  It
 * goes to the QP named by the work request's remote_qpn when the address
 * handle reaches that QP's port (RoCE: the AH's dgid is one of the port's
 * GIDs, of the type of the AH's source GID; InfiniBand: the AH's dlid is
 * the port's LID), or to every QP attached to the group when the dgid is a
 * multicast GID and remote_qpn is the multicast QPN 0xFFFFFF.  Each
 * receiver is handled on its own, as each NIC port behind a switch is:
 *
 *   - its port must be up and take the datagram's size (a datagram larger
 *     than the receiver port's active MTU is dropped on the way: logged as
 *     "mtu" in SOFTRDMA_UD_LOG);
 *   - it must exist, be UD, be in RTR or RTS and have the Q_Key the work
 *     request carries (a Q_Key with the high bit set means "the sender QP's
 *     own Q_Key"), otherwise the datagram is silently not delivered to it;
 *   - it takes one posted receive; none posted = silently dropped (UD has
 *     no receiver-not-ready retry);
 *   - the receive gets the 40-byte GRH area first, then the payload;
 *     byte_len counts both, wc_flags has IBV_WC_GRH, src_qp is the sender.
 *     A receive shorter than 40 + payload is IBV_WC_LOC_LEN_ERR and puts
 *     that receiver's QP in ERR;
 *   - the seeded faults SOFTRDMA_UD_DROP / _DUP / _REORDER draw for it
 *     independently, and each injected event is logged to SOFTRDMA_UD_LOG.
 *
 * The send itself completes locally once every copy is made (or dropped).
 *
 * The GRH area is what the NIC writes for the packet's kind: RoCE v2 to an
 * IPv4-mapped GID, 20 zero bytes then the IPv4 header (source and
 * destination from the GIDs, TTL 64, UDP, checksummed); RoCE v2 to another
 * GID, an IPv6 header (next header UDP); RoCE v1 and InfiniBand, a GRH
 * (next header 0x1B).  On InfiniBand without a GRH the area is zeroed and
 * IBV_WC_GRH is not set.  ibv_init_ah_from_wc reads it back.
 *
 * Multicast membership lives in the fabric file (sr_mcg_shm), changed under
 * the fabric lock by attach/detach, read without it by senders.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SR_MCAST_QPN 0xffffffu
#define SR_IB_NEXT_HDR 0x1b

static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* An IB multicast GID (ff00::/8), or the IPv4-mapped form of an IPv4
 * multicast address (::ffff:224.0.0.0/4) that RoCE uses. */
int sr_gid_is_mcast(const uint8_t *g)
{
	if (g[0] == 0xff)
		return 1;
	return !memcmp(g, v4mapped, 12) && (g[12] & 0xf0) == 0xe0;
}

/* ---- address handles ---- */

SR_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	SR_FAULT_RET("ibv_create_ah", NULL);
	if (!pd || !attr || attr->port_num != 1) {
		errno = EINVAL;
		return NULL;
	}
	struct sr_port_shm *p = sr_port_self(sr_ctx(pd->context)->fab);
	/* A RoCE port needs a GRH in every address vector, from a GID the
	 * table holds. */
	if (p->link_layer == IBV_LINK_LAYER_ETHERNET && !attr->is_global) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->is_global) {
		struct sr_gid_entry e;
		if (sr_port_gid(p, attr->grh.sgid_index, &e) < 0 ||
		    e.type == SR_GID_EMPTY) {
			errno = EINVAL;
			return NULL;
		}
	}
	struct sr_ah *a = calloc(1, sizeof *a);
	if (!a) {
		errno = ENOMEM;
		return NULL;
	}
	a->attr = *attr;
	a->ah.context = pd->context;
	a->ah.pd = pd;
	a->ah.handle = sr_fabric_next_id(sr_ctx(pd->context)->fab);
	atomic_fetch_add(&((struct sr_pd *)pd)->refs, 1);
	return &a->ah;
}
SR_DEFAULT_V11(ibv_create_ah);

SR_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	SR_FAULT_RET("ibv_destroy_ah", errno);
	struct sr_ah *a = (struct sr_ah *)ah;
	atomic_fetch_sub(&((struct sr_pd *)ah->pd)->refs, 1);
	free(a);
	return 0;
}
SR_DEFAULT_V11(ibv_destroy_ah);

/* The index of a GID of our port, of that type; -1 if none. */
static int find_gid(struct sr_port_shm *p, const uint8_t *raw, uint32_t type)
{
	for (uint32_t i = 0; i < SR_GID_SLOTS; i++) {
		struct sr_gid_entry e;
		sr_port_gid(p, i, &e);
		if (e.type != SR_GID_EMPTY && !memcmp(e.raw, raw, 16) &&
		    (e.type == type ||
		     (type == IBV_GID_TYPE_ROCE_V1 + 1 && e.type == IBV_GID_TYPE_IB + 1)))
			return (int)i;
	}
	return -1;
}

static uint16_t ip_csum(const uint8_t *h, size_t n)
{
	uint32_t s = 0;
	for (size_t i = 0; i < n; i += 2)
		s += (uint32_t)h[i] << 8 | h[i + 1];
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

/* The reverse of make_grh: an address vector back to the sender of a
 * received datagram, as rdma-core's ibv_init_ah_from_wc reads the GRH. */
SR_EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
				  struct ibv_wc *wc, struct ibv_grh *grh,
				  struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof *ah);
	ah->dlid = wc->slid;
	ah->sl = wc->sl;
	ah->src_path_bits = wc->dlid_path_bits;
	ah->port_num = port_num;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	struct sr_port_shm *p = sr_port_self(sr_ctx(context)->fab);
	const uint8_t *g = (const uint8_t *)grh;
	const uint8_t *ip4 = g + 20;
	ah->is_global = 1;
	if ((g[0] >> 4) != 6 && ip4[0] == 0x45 && ip_csum(ip4, 20) == 0) {
		uint8_t dgid[16];
		if ((ip4[16] & 0xf0) == 0xe0) {
			errno = EINVAL; /* sent to a group: no way back */
			return -1;
		}
		memcpy(dgid, v4mapped, 12);
		memcpy(dgid + 12, ip4 + 16, 4);
		int idx = find_gid(p, dgid, IBV_GID_TYPE_ROCE_V2 + 1);
		if (idx < 0) {
			errno = ENOENT;
			return -1;
		}
		memcpy(ah->grh.dgid.raw, v4mapped, 12);
		memcpy(ah->grh.dgid.raw + 12, ip4 + 12, 4);
		ah->grh.sgid_index = (uint8_t)idx;
		ah->grh.hop_limit = ip4[8];
		ah->grh.traffic_class = ip4[1];
		return 0;
	}
	if ((g[0] >> 4) != 6) {
		errno = EPROTONOSUPPORT;
		return -1;
	}
	if (grh->dgid.raw[0] == 0xff) {
		errno = EINVAL;
		return -1;
	}
	uint32_t type;
	if (grh->next_hdr == 17)
		type = IBV_GID_TYPE_ROCE_V2 + 1;
	else if (grh->next_hdr == SR_IB_NEXT_HDR)
		type = IBV_GID_TYPE_ROCE_V1 + 1;
	else {
		errno = EPROTONOSUPPORT;
		return -1;
	}
	int idx = find_gid(p, grh->dgid.raw, type);
	if (idx < 0) {
		errno = ENOENT;
		return -1;
	}
	uint32_t vtf = ntohl(grh->version_tclass_flow);
	ah->grh.dgid = grh->sgid;
	ah->grh.sgid_index = (uint8_t)idx;
	ah->grh.flow_label = vtf & 0xfffff;
	ah->grh.traffic_class = (uint8_t)(vtf >> 20);
	ah->grh.hop_limit = grh->hop_limit;
	return 0;
}

SR_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd,
					       struct ibv_wc *wc,
					       struct ibv_grh *grh,
					       uint8_t port_num)
{
	struct ibv_ah_attr a;
	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}

/* ---- multicast groups ---- */

static struct sr_mcg_shm *mcg_find(struct sr_fabric *f, const uint8_t *gid)
{
	for (uint32_t i = 0; i < SR_MAX_MCG; i++) {
		struct sr_mcg_shm *m = sr_fabric_mcg(f, i);
		if (atomic_load_explicit(&m->in_use, memory_order_acquire) == 1 &&
		    !memcmp(m->gid, gid, 16))
			return m;
	}
	return NULL;
}

SR_EXPORT int ibv_attach_mcast(struct ibv_qp *ibqp, const union ibv_gid *gid,
			       uint16_t lid)
{
	(void)lid; /* RoCE: no LIDs; IB: the group is its MGID here */
	SR_FAULT_RET("ibv_attach_mcast", errno);
	struct sr_qp *qp = (struct sr_qp *)ibqp;
	struct sr_fabric *f = qp->ctx->fab;
	if (ibqp->qp_type != IBV_QPT_UD || !gid || !sr_gid_is_mcast(gid->raw))
		return EINVAL;
	if (sr_fabric_lock(f) < 0)
		return errno;
	int ret = 0;
	struct sr_mcg_shm *m = mcg_find(f, gid->raw);
	if (!m) {
		for (uint32_t i = 0; i < SR_MAX_MCG && !m; i++) {
			struct sr_mcg_shm *c = sr_fabric_mcg(f, i);
			if (!atomic_load(&c->in_use)) {
				memcpy(c->gid, gid->raw, 16);
				for (uint32_t k = 0; k < SR_MCG_MEMBERS; k++)
					atomic_store(&c->member[k], 0);
				atomic_store_explicit(&c->in_use, 1,
						      memory_order_release);
				m = c;
			}
		}
	}
	if (!m) {
		ret = ENOMEM; /* max_mcast_grp groups exist */
		goto out;
	}
	int free_at = -1;
	for (int k = 0; k < SR_MCG_MEMBERS; k++) {
		uint32_t q = atomic_load(&m->member[k]);
		if (q == ibqp->qp_num)
			goto out; /* attached already: nothing to do */
		if (!q && free_at < 0)
			free_at = k;
	}
	if (free_at < 0)
		ret = ENOMEM; /* max_mcast_qp_attach */
	else
		atomic_store_explicit(&m->member[free_at], ibqp->qp_num,
				      memory_order_release);
out:
	sr_fabric_unlock(f);
	return ret;
}
SR_DEFAULT_V11(ibv_attach_mcast);

SR_EXPORT int ibv_detach_mcast(struct ibv_qp *ibqp, const union ibv_gid *gid,
			       uint16_t lid)
{
	(void)lid;
	SR_FAULT_RET("ibv_detach_mcast", errno);
	struct sr_qp *qp = (struct sr_qp *)ibqp;
	struct sr_fabric *f = qp->ctx->fab;
	if (ibqp->qp_type != IBV_QPT_UD || !gid || !sr_gid_is_mcast(gid->raw))
		return EINVAL;
	if (sr_fabric_lock(f) < 0)
		return errno;
	int ret = EINVAL; /* not attached */
	struct sr_mcg_shm *m = mcg_find(f, gid->raw);
	if (m) {
		int left = 0;
		for (int k = 0; k < SR_MCG_MEMBERS; k++) {
			if (atomic_load(&m->member[k]) == ibqp->qp_num) {
				atomic_store(&m->member[k], 0);
				ret = 0;
			}
			left += atomic_load(&m->member[k]) != 0;
		}
		if (!left)
			atomic_store(&m->in_use, 0);
	}
	sr_fabric_unlock(f);
	return ret;
}
SR_DEFAULT_V11(ibv_detach_mcast);

/* ---- the GRH area ---- */

/* type: the source GID's (SR_GID_*), 0 for an IB packet without GRH. */
static void make_grh(uint8_t grh[SR_GRH_LEN], uint32_t type, const uint8_t *sgid,
		     const uint8_t *dgid, uint32_t len, int has_imm)
{
	/* headers after the network header: UDP 8 (v2), BTH 12, DETH 8,
	 * ImmDt 4, ICRC 4 */
	int v2 = type == IBV_GID_TYPE_ROCE_V2 + 1;
	uint32_t l4 = (v2 ? 8 : 0) + 12 + 8 + (has_imm ? 4 : 0) + len + 4;
	memset(grh, 0, SR_GRH_LEN);
	if (v2 && !memcmp(dgid, v4mapped, 12)) {
		uint8_t *h = grh + 20;
		uint16_t tot = (uint16_t)(20 + l4);
		h[0] = 0x45;
		h[2] = (uint8_t)(tot >> 8);
		h[3] = (uint8_t)tot;
		h[6] = 0x40; /* don't fragment */
		h[8] = 64;   /* TTL */
		h[9] = 17;   /* UDP */
		memcpy(h + 12, sgid + 12, 4);
		memcpy(h + 16, dgid + 12, 4);
		uint16_t c = ip_csum(h, 20);
		h[10] = (uint8_t)(c >> 8);
		h[11] = (uint8_t)c;
	} else {
		grh[0] = 0x60; /* version 6, traffic class 0, flow label 0 */
		grh[4] = (uint8_t)(l4 >> 8);
		grh[5] = (uint8_t)l4;
		grh[6] = v2 ? 17 : SR_IB_NEXT_HDR;
		grh[7] = 64;   /* hop limit */
		memcpy(grh + 8, sgid, 16);
		memcpy(grh + 24, dgid, 16);
	}
}

/* ---- the send path ---- */

#define SR_HELD_IMM 0x80000000u

static void log_event(const char *what, uint32_t qpn, uint32_t imm, int has_imm,
		      uint32_t len)
{
	sr_ud_log(what, qpn, has_imm ? ntohl(imm) : 0, SR_GRH_LEN + len);
}

/* Puts one datagram (payload in liov[1..], liov[0] free for the GRH). */
static void put(struct sr_qp *qp, struct sr_qp_shm *peer, struct iovec *liov,
		int ln, uint32_t type, const uint8_t *sgid, const uint8_t *dgid,
		uint32_t len, uint32_t imm, int has_imm, int solicited)
{
	struct sr_fabric *f = qp->ctx->fab;
	struct sr_port_shm *to = sr_port_of(f, peer->proc);
	if (len > sr_mtu_bytes(to->active_mtu) ||
	    atomic_load(&to->state) != IBV_PORT_ACTIVE) {
		if (sr_ud_faults)
			log_event("mtu", peer->qpn, imm, has_imm, len);
		return; /* too big for that port (or it is down): dropped */
	}
	uint8_t grh[SR_GRH_LEN] = {0};
	int has_grh = type != 0;
	if (has_grh)
		make_grh(grh, type, sgid, dgid, len, has_imm);
	liov[0].iov_base = grh;
	liov[0].iov_len = SR_GRH_LEN;
	int r = sr_ud_put(qp, peer, liov, ln, SR_GRH_LEN + len, imm, has_imm,
			  solicited, has_grh);
	if (r == 0 && sr_ud_faults)
		log_event("norecv", peer->qpn, imm, has_imm, len);
}

/* The receiver QP qpn if a datagram with qkey may go to it now, else NULL. */
static struct sr_qp_shm *receiver(struct sr_qp *qp, uint32_t qpn, uint32_t qkey)
{
	struct sr_qp_shm *p = sr_fabric_qp(qp->ctx->fab, qpn & (SR_MAX_QPS - 1));
	uint32_t st = atomic_load_explicit(&p->state, memory_order_acquire);
	if (atomic_load(&p->in_use) != 1 || p->qpn != qpn ||
	    p->qp_type != IBV_QPT_UD || (st != IBV_QPS_RTR && st != IBV_QPS_RTS) ||
	    atomic_load(&p->qkey) != qkey)
		return NULL;
	return p;
}

static void put_held(struct sr_qp *qp, struct sr_ud_held *h)
{
	h->used = 0;
	struct sr_qp_shm *p = sr_fabric_qp(qp->ctx->fab, h->dqpn & (SR_MAX_QPS - 1));
	uint32_t st = atomic_load(&p->state);
	if (atomic_load(&p->in_use) != 1 || p->qpn != h->dqpn ||
	    (st != IBV_QPS_RTR && st != IBV_QPS_RTS))
		return; /* gone while held: lost */
	struct iovec liov[2] = {{0}, {h->data, h->length}};
	put(qp, p, liov, 2, h->sgid_type, h->sgid, h->dgid, h->length, h->imm_data,
	    (h->flags & SR_HELD_IMM) != 0, (h->flags & IBV_SEND_SOLICITED) != 0);
}

void sr_ud_release_held(struct sr_qp *qp, int all)
{
	if (!qp->held)
		return;
	uint64_t now = all ? 0 : sr_now_ns();
	for (int i = 0; i < SR_UD_HOLD; i++) {
		struct sr_ud_held *h = &qp->held[i];
		if (h->used && (all || now - h->since_ns > SR_UD_HOLD_NS))
			put_held(qp, h);
	}
}

static struct sr_ud_held *held_for(struct sr_qp *qp, uint32_t qpn)
{
	for (int i = 0; i < SR_UD_HOLD; i++)
		if (qp->held[i].used && qp->held[i].dqpn == qpn)
			return &qp->held[i];
	return NULL;
}

/* One receiver: faults, then the datagram, then any datagram held for it. */
static void deliver(struct sr_qp *qp, struct sr_qp_shm *peer, struct iovec *liov,
		    int ln, uint32_t type, const uint8_t *sgid, const uint8_t *dgid,
		    uint32_t len, uint32_t imm, int has_imm, int solicited)
{
	if (SR_LIKELY(!sr_ud_faults)) {
		put(qp, peer, liov, ln, type, sgid, dgid, len, imm, has_imm, solicited);
		return;
	}
	if (sr_ud_drop_p > 0 && sr_ud_rand() < sr_ud_drop_p) {
		log_event("drop", peer->qpn, imm, has_imm, len);
		return;
	}
	int dup = sr_ud_dup_p > 0 && sr_ud_rand() < sr_ud_dup_p;
	struct sr_ud_held *old = qp->held ? held_for(qp, peer->qpn) : NULL;
	if (!old && qp->held && sr_ud_reorder_p > 0 &&
	    sr_ud_rand() < sr_ud_reorder_p) {
		for (int i = 0; i < SR_UD_HOLD; i++) {
			struct sr_ud_held *h = &qp->held[i];
			if (h->used)
				continue;
			h->used = 1;
			h->dqpn = peer->qpn;
			h->imm_data = imm;
			h->flags = (has_imm ? SR_HELD_IMM : 0) |
				   (solicited ? IBV_SEND_SOLICITED : 0);
			h->length = len;
			h->sgid_type = type;
			memcpy(h->dgid, dgid, 16);
			memcpy(h->sgid, sgid, 16);
			h->since_ns = sr_now_ns();
			uint8_t *d = h->data;
			for (int k = 1; k < ln; k++) {
				memcpy(d, liov[k].iov_base, liov[k].iov_len);
				d += liov[k].iov_len;
			}
			log_event("reorder", peer->qpn, imm, has_imm, len);
			return;
		}
	}
	put(qp, peer, liov, ln, type, sgid, dgid, len, imm, has_imm, solicited);
	if (dup) {
		log_event("dup", peer->qpn, imm, has_imm, len);
		put(qp, peer, liov, ln, type, sgid, dgid, len, imm, has_imm, solicited);
	}
	if (old)
		put_held(qp, old);
}

/* Does the datagram's address reach this receiver's port (unicast)? */
static int reaches(struct sr_fabric *f, struct sr_port_shm *from,
		   const struct ibv_ah_attr *ah, uint32_t type,
		   struct sr_qp_shm *peer)
{
	struct sr_port_shm *to = sr_port_of(f, peer->proc);
	if (to->link_layer != from->link_layer)
		return 0;
	if (to->link_layer == IBV_LINK_LAYER_INFINIBAND)
		return ah->dlid == to->lid &&
		       (!ah->is_global ||
			sr_port_has_gid(to, ah->grh.dgid.raw, IBV_GID_TYPE_IB + 1));
	return sr_port_has_gid(to, ah->grh.dgid.raw, type);
}

int sr_ud_execute(struct sr_qp *qp, struct sr_swqe *w, struct iovec *liov,
		  int ln)
{
	struct sr_fabric *f = qp->ctx->fab;
	struct sr_port_shm *me = sr_port_self(f);
	/* A NIC refuses a UD message larger than its MTU with a local length
	 * error on the send (hardware then holds the QP in SQE; softrdma,
	 * which has no SQE, puts it in ERR). */
	if (SR_UNLIKELY(w->length > sr_mtu_bytes(me->active_mtu)))
		return IBV_WC_LOC_LEN_ERR;
	if (atomic_load(&me->state) != IBV_PORT_ACTIVE)
		return IBV_WC_SUCCESS; /* the link is down: sent into nothing */
	struct sr_ah *ah = (struct sr_ah *)w->ah;
	const uint8_t *dgid = ah->attr.grh.dgid.raw;
	int ib = me->link_layer == IBV_LINK_LAYER_INFINIBAND;
	struct sr_gid_entry src = {{0}, 0};
	if (ah->attr.is_global) {
		sr_port_gid(me, ah->attr.grh.sgid_index, &src);
		if (src.type == SR_GID_EMPTY)
			return IBV_WC_SUCCESS; /* its GID went away: lost */
	}
	uint32_t qkey = (w->remote_qkey & 0x80000000u)
				? atomic_load(&qp->shm->qkey) : w->remote_qkey;
	int has_imm = w->opcode == IBV_WR_SEND_WITH_IMM;
	int sol = (w->flags & IBV_SEND_SOLICITED) != 0;

	if (ah->attr.is_global && sr_gid_is_mcast(dgid)) {
		if (w->remote_qpn != SR_MCAST_QPN || (ib && ah->attr.dlid < 0xc000))
			return IBV_WC_SUCCESS; /* no QP takes it: lost */
		struct sr_mcg_shm *m = mcg_find(f, dgid);
		if (!m)
			return IBV_WC_SUCCESS; /* nobody joined: lost */
		int block = (qp->shm->create_flags &
			     IBV_QP_CREATE_BLOCK_SELF_MCAST_LB) != 0;
		for (int k = 0; k < SR_MCG_MEMBERS; k++) {
			uint32_t q = atomic_load_explicit(&m->member[k],
							  memory_order_acquire);
			if (!q || (block && q == qp->qp.qp_num))
				continue;
			struct sr_qp_shm *p = receiver(qp, q, qkey);
			if (p && sr_port_of(f, p->proc)->link_layer == me->link_layer)
				deliver(qp, p, liov, ln, src.type, src.raw, dgid,
					w->length, w->imm_data, has_imm, sol);
		}
		return IBV_WC_SUCCESS;
	}
	if (w->remote_qpn == SR_MCAST_QPN)
		return IBV_WC_SUCCESS;
	struct sr_qp_shm *p = receiver(qp, w->remote_qpn, qkey);
	if (p && reaches(f, me, &ah->attr, src.type, p))
		deliver(qp, p, liov, ln, src.type, src.raw, dgid, w->length,
			w->imm_data, has_imm, sol);
	return IBV_WC_SUCCESS;
}
