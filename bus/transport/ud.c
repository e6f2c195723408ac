/*
 * transport/ud.c - RDMA UD multicast under the datagram core (see
 * transport/ud.h for the design).  Device and QP set-up, the post path and
 * the poll loop, and bringing a QP back after an error; packing, signing
 * and checking datagrams is dgram.h's.
 */
#include "bus/transport/ud.h"

#include "bus/clock.h"
#include "bus/error.h"
#include "bus/memlock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Polls of a full send queue before the post gives up: a completion is a
 * few microseconds away on a NIC, so this many empty polls mean the device
 * stopped (the datagram is dropped and subscribers see a gap). */
#define TB_UD_SQ_SPINS (1u << 22)
/* A datagram posted this long ago has left the NIC: 1 ms is hundreds of
 * times a send's time on the wire and in the send queue. */
#define TB_UD_BEAT_SETTLE_NS 1000000L
/* How long set-up and teardown wait for one completion. */
#define TB_UD_WAIT_NS 2000000000ull

static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

int tb_ud_mgid(const char *group, union ibv_gid *mgid)
{
	struct in_addr a;

	if (inet_pton(AF_INET, group, &a) != 1 || (ntohl(a.s_addr) >> 28) != 0xe)
		return tb_error_set(TB_ECONFIG, "ud: group '%s' is not an IPv4 "
				  "multicast address", group);
	memset(mgid, 0, sizeof(*mgid));
	memcpy(mgid->raw, v4_prefix, sizeof(v4_prefix));
	memcpy(mgid->raw + 12, &a.s_addr, 4);
	return 0;
}

/* ------------------------------------------------------------- device */

/* Why ud passes InfiniBand ports over (tb_verbs_open's no_ib). */
#define UD_NO_IB "multicast there needs a subnet manager join, which " \
	"tickbus does not make"

static void dev_close(tb_ud_dev_t *d)
{
	tb_verbs_close(&d->v);
}

/* The group, then the device (verbs.h), its limits, then the group's
 * datagram bound. */
static int dev_open(tb_ud_dev_t *d, const tb_stream_cfg_t *cfg)
{
	struct ibv_device_attr da;
	int rc;

	memset(d, 0, sizeof(*d));
	rc = tb_ud_mgid(cfg->group.host, &d->mgid);
	if (rc < 0)
		return rc;
	rc = tb_verbs_open(&d->v, cfg, UD_NO_IB);
	if (rc < 0)
		return tb_error_prepend(rc, "ud");
	if ((rc = ibv_query_device(d->v.ctx, &da)) != 0) {
		rc = tb_error_sys(rc, "ud: %s: ibv_query_device", d->v.name);
		dev_close(d);
		return rc;
	}
	d->max_qp_wr = (uint32_t)da.max_qp_wr;
	d->max_cqe = da.max_cqe;
	d->gid_cfg = cfg->gid_index;
	if ((rc = tb_verbs_events_init(&d->v)) < 0) {
		dev_close(d);
		return tb_error_prepend(rc, "ud");
	}
	d->path_mtu = tb_verbs_mtu_bytes(d->v.mtu);
	d->mtu = d->path_mtu;
	if (cfg->mtu) {
		if (cfg->mtu > d->path_mtu) {
			rc = tb_error_set(TB_ECONFIG, "ud: mtu %u exceeds the path MTU "
					"%u of %s port %u: the group's mtu must fit "
					"every member's port", cfg->mtu, d->path_mtu,
					d->v.name, d->v.port);
			dev_close(d);
			return rc;
		}
		d->mtu = cfg->mtu;
	}
	return 0;
}

/* What a registration that failed most likely ran into. */
static int reg_failed(int e, const tb_ud_dev_t *d, const char *what, size_t len)
{
	if (e == ENOMEM || e == EPERM || e == EAGAIN)
		return tb_error_sys(e, "ud: %s: register %s (%zu bytes): the locked "
				  "memory limit (ulimit -l, LimitMEMLOCK= for a "
				  "service, or CAP_IPC_LOCK) is too low for it; raise "
				  "it, or lower ring_size, rcvbuf or mtu", d->v.name,
				  what, len);
	return tb_error_sys(e, "ud: %s: register %s (%zu bytes)", d->v.name, what,
			  len);
}

/* A UD QP in RTS with `qkey`, `inline_max` bytes of inline data or, if
 * the device refuses that, `inline_min` (0: a device without inline
 * sends gets none). */
static struct ibv_qp *ud_qp(tb_ud_dev_t *d, struct ibv_cq *cq, uint32_t sq,
			    uint32_t rq, uint32_t inline_max,
			    uint32_t inline_min, uint32_t qkey,
			    uint32_t *inline_got)
{
	tb_verbs_qp_cfg_t c = {
		.type = IBV_QPT_UD, .cq = cq, .send_wr = sq, .recv_wr = rq,
		.send_sge = 2, .inline_want = inline_max,
		.inline_min = inline_min,
		.qkey = qkey,
		/* The one operation ud posts: a provider sizes its WQEs for
		 * it alone (ibv_create_qp_ex, verbs.h). */
		.send_ops = IBV_QP_EX_WITH_SEND_WITH_IMM,
	};
	struct ibv_qp *qp = tb_verbs_qp_create(&d->v, &c, inline_got);

	if (!qp) {
		tb_error_prepend(TB_ESYS, "ud");
		return NULL;
	}
	if (tb_verbs_ud_ready(&d->v, qp) < 0) {
		tb_error_prepend(TB_ESYS, "ud");
		ibv_destroy_qp(qp);
		return NULL;
	}
	return qp;
}

/* Brings a UD QP whose send queue failed back to RTS: from SQE (a NIC
 * after a send error) straight back, from ERR through RESET and INIT.
 * Returns 1 when it moved it, 0 when it was in RTS already, or < 0 with a
 * message. */
static int qp_back_to_rts(tb_ud_dev_t *d, struct ibv_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int e;

	if ((e = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia)) != 0)
		return tb_error_sys(e, "ud: %s: ibv_query_qp", d->v.name);
	if (a.qp_state == IBV_QPS_RTS)
		return 0;
	if (a.qp_state == IBV_QPS_SQE) {
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.cur_qp_state = IBV_QPS_SQE;
		if ((e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE)) != 0)
			return tb_error_sys(e, "ud: %s: ibv_modify_qp SQE -> RTS",
					  d->v.name);
		return 1;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RESET;
	if ((e = ibv_modify_qp(qp, &a, IBV_QP_STATE)) != 0)
		return tb_error_sys(e, "ud: %s: ibv_modify_qp -> RESET", d->v.name);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = d->v.port;
	a.qkey = qkey;
	if ((e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			       IBV_QP_PORT | IBV_QP_QKEY)) != 0)
		return tb_error_sys(e, "ud: %s: ibv_modify_qp RESET -> INIT",
				  d->v.name);
	return tb_verbs_ud_ready(&d->v, qp) < 0 ? TB_ESYS : 1;
}

/* Waits (set-up, teardown and the heartbeat thread only) until `cq`
 * yields a completion. */
static int wait_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	uint64_t end = tb_clock_mono_ns() + TB_UD_WAIT_NS;
	int n;

	while ((n = ibv_poll_cq(cq, 1, wc)) == 0 && tb_clock_mono_ns() < end) {
		struct timespec ts = {0, 20000};

		nanosleep(&ts, NULL);
	}
	return n;
}

/* After an address event: the GID index ud would choose now (cfg's, or
 * the first RoCE v2 GID in IPv4-mapped form), -1 when there is none; the
 * GID and its netdev go to *gid and *ifindex. */
static int gid_now(tb_ud_dev_t *d, union ibv_gid *gid, int *ifindex)
{
	static const union ibv_gid zero;
	struct ibv_port_attr pa;
	struct ibv_gid_entry e;

	*ifindex = 0;
	if (ibv_query_port(d->v.ctx, d->v.port, &pa) != 0)
		return -1;
	for (int i = d->gid_cfg >= 0 ? d->gid_cfg : 0; i < pa.gid_tbl_len; i++) {
		if (ibv_query_gid_ex(d->v.ctx, d->v.port, (uint32_t)i, &e, 0) == 0 &&
		    memcmp(&e.gid, &zero, sizeof(zero)) != 0 &&
		    (d->gid_cfg >= 0 || (e.gid_type == IBV_GID_TYPE_ROCE_V2 &&
					 !memcmp(e.gid.raw, v4_prefix,
						 sizeof(v4_prefix))))) {
			*gid = e.gid;
			*ifindex = (int)e.ndev_ifindex;
			return i;
		}
		if (d->gid_cfg >= 0)
			break;
	}
	return -1;
}

/* ---------------------------------------------------------- publishing */

/* Takes the completions the send CQ holds.  An error among them means the
 * data QP left RTS: flagged for tx_recover.  Returns what ibv_poll_cq
 * did (< 0: the CQ failed, flagged too). */
int tb_ud_reap(tb_ud_tx_t *u)
{
	struct ibv_wc wc[8];
	int n = ibv_poll_cq(u->cq, 8, wc);

	u->cq_polls++;
	if (tb_unlikely(n < 0)) {
		tb_atomic_store_relaxed(&u->broken, 1);
		return n;
	}
	for (int i = 0; i < n; i++) {
		/* A flush of a WR posted before the last recovery is old
		 * news. */
		if (tb_unlikely(wc[i].status != IBV_WC_SUCCESS) &&
		    wc[i].wr_id > u->recovered_at) {
			u->send_errors++;
			tb_atomic_store_relaxed(&u->broken, 1);
		}
		/* Everything before it too; a flushed WR's id is no newer
		 * (the fast WR's is at most its own number, ud.h). */
		if (wc[i].wr_id > u->completed)
			u->completed = wc[i].wr_id;
	}
	return n;
}

/* A post the provider refused: the QP is flagged for repair before the
 * next post.  Cold. */
__attribute__((noinline, cold)) int tb_ud_post_failed(tb_ud_tx_t *u)
{
	u->send_errors++;
	tb_atomic_store_relaxed(&u->broken, 1);
	return TB_EIO;
}

/* After a signalled post: takes without waiting what completed before it,
 * so that a failed send is seen within signal_every posts, and sets the
 * next group: signal_every posts, fewer when the queue has less room, so
 * that the unsignalled ones never need to look (ud.h's bound on the
 * queue), and at least one, whose signalled post waits for room. */
static void next_group(tb_ud_tx_t *u)
{
	uint64_t room;

	u->signalled++;
	tb_ud_reap(u);
	room = u->sq_depth - (u->posted - u->completed);
	u->left = room >= u->signal_every ? u->signal_every
					  : room ? (uint32_t)room : 1;
}

/*
 * The post that ends a group of `left` (or one its caller wants signalled:
 * the last END): makes room if the queue is full, posts it signalled with
 * its number, then next_group.  Hot path, one post in signal_every: out of
 * line.
 */
int tb_ud_post_signalled(tb_ud_tx_t *u, const tb_packet_hdr_t *hdr,
			 const void *frames, uint32_t frames_len)
{
	struct ibv_send_wr *bad;

	u->left = 1; /* until the post below went: the next comes here */
	if (tb_unlikely(u->posted - u->completed >= u->sq_depth) &&
	    tb_ud_sq_room(u) < 0)
		return TB_EIO;
	u->wr.send_flags = tb_ud_wr_set_(u, hdr, frames, frames_len) |
			   IBV_SEND_SIGNALED;
	if (tb_unlikely(ibv_post_send(u->qp, &u->wr, &bad) != 0))
		return tb_ud_post_failed(u);
	u->posted++;
	next_group(u);
	return 0;
}

/* tb_ud_send's fast post when it ends a group: the same datagram and WR,
 * signalled and numbered for this one post, then next_group.  Hot path,
 * one post in signal_every: out of line. */
static int post_fast_signalled(tb_ud_tx_t *u, const tb_frame_hdr_t *f,
			       uint32_t space, uint64_t seq, uint64_t to)
{
	struct ibv_send_wr *bad;
	int rc;

	u->one_sge[1].addr = (uintptr_t)f;
	u->one_sge[1].length = space;
	u->one_wr.imm_data = htobe32((uint32_t)seq);
	tb_dgram_tx_one_sign(&u->dg, f, seq, space, to);
	u->left = 1; /* until the post below went: the next comes here */
	if (tb_unlikely(u->posted - u->completed >= u->sq_depth) &&
	    tb_ud_sq_room(u) < 0)
		return TB_EIO;
	u->one_wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
	u->one_wr.wr_id = u->posted + 1;
	rc = ibv_post_send(u->qp, &u->one_wr, &bad);
	u->one_wr.send_flags = IBV_SEND_INLINE; /* wr_id stays (ud.h) */
	if (tb_unlikely(rc != 0))
		return tb_ud_post_failed(u);
	u->posted++;
	next_group(u);
	return 0;
}

int tb_ud_send_one_signalled(tb_ud_tx_t *u, const tb_frame_hdr_t *f,
			     uint32_t space, uint64_t seq, uint64_t to)
{
	int rc = post_fast_signalled(u, f, space, seq, to);

	tb_dgram_tx_sent_to(&u->dg, seq + 1); /* sent or not, it is gone */
	return rc;
}

/* tb_ud_send's one frame when it is too large to go inline: the same
 * datagram, its header copied to the slab, posted with the other WR.
 * Hot path, out of line. */
int tb_ud_send_one_slow(tb_ud_tx_t *u, const tb_frame_hdr_t *f,
			uint32_t space, uint64_t to)
{
	const tb_packet_hdr_t *h = tb_dgram_tx_one_sign(&u->dg, f, f->seq,
							       space, to);
	int rc = tb_ud_post_one(u, h, f, space, 0);

	tb_dgram_tx_sent_one(&u->dg); /* sent or not, it is gone */
	return rc;
}

/* Makes room in the send queue: polls the CQ only when it is full.  Hot
 * path; the loop is bounded. */
int tb_ud_sq_room(tb_ud_tx_t *u)
{
	uint32_t spins = 0;

	while (u->posted - u->completed >= u->sq_depth) {
		int n = tb_ud_reap(u);

		if (tb_unlikely(n < 0 || tb_atomic_load_relaxed(&u->broken)))
			return TB_EIO;
		if (n == 0 && ++spins > TB_UD_SQ_SPINS)
			return TB_EIO;
	}
	return 0;
}

/* The group's address handle from GID index `gid_index`. */
static struct ibv_ah *group_ah(tb_ud_tx_t *u, int gid_index)
{
	struct ibv_ah_attr ah = {.is_global = 1, .port_num = u->dev.v.port};

	ah.grh.dgid = u->dev.mgid;
	ah.grh.sgid_index = (uint8_t)gid_index;
	ah.grh.hop_limit = u->hop_limit;
	ah.grh.traffic_class = u->traffic_class;
	return ibv_create_ah(u->dev.v.pd, &ah);
}

static int tx_qp_open(tb_ud_tx_t *u);

/*
 * Repairs what the heartbeat thread or the publishing thread's own reaping
 * found wrong, before the next post (publishing thread; A2 pairs with R2 in
 * ud_tx_beat, tx_events and reap): a data CQ that failed is made anew with
 * its QP; a QP out of RTS is brought back; a GID that moved gets a new
 * address handle (A3 pairs with R3 in tx_events).  Under qp_lock, which the
 * heartbeat thread holds when it looks at the QP, so that it never sees
 * one half-way.  What the CQ held is taken, and every WR the QP held
 * counts as complete (flushed: the loss is named by the next heartbeat);
 * flushes of those that turn up later are not taken for a new failure.
 * Error path: system calls; after a try that failed, the next waits
 * TB_UD_REBUILD_NS.
 */
static int tx_recover(tb_ud_tx_t *u)
{
	int rc = 0;

	if (u->recover_ns &&
	    tb_clock_now_ns_inline() - u->recover_ns < TB_UD_REBUILD_NS)
		return TB_EIO;
	pthread_mutex_lock(&u->qp_lock);
	if (tb_atomic_load_acquire(&u->readdress)) {
		struct ibv_ah *ah = group_ah(u, u->new_gid_index);

		if (ah) {
			tb_atomic_store_relaxed(&u->readdress, 0);
			ibv_destroy_ah(u->ah);
			u->ah = ah;
			u->wr.wr.ud.ah = ah;
			u->one_wr.wr.ud.ah = ah;
			u->readdresses++;
		} else {
			rc = TB_ESYS;
		}
	}
	if (tb_atomic_load_relaxed(&u->remake)) {
		if (u->qp)
			ibv_destroy_qp(u->qp);
		if (u->cq)
			ibv_destroy_cq(u->cq);
		u->qp = NULL;
		u->cq = NULL;
		if (tx_qp_open(u) < 0) {
			rc = TB_ESYS;
		} else {
			tb_atomic_store_relaxed(&u->remake, 0);
			u->remakes++;
		}
	} else {
		int moved;

		while (tb_ud_reap(u) > 0)
			;
		moved = qp_back_to_rts(&u->dev, u->qp, u->qkey);
		if (moved < 0)
			rc = moved;
		else
			u->recoveries += (uint64_t)moved;
	}
	if (rc < 0) {
		u->recover_ns = tb_clock_now_ns_inline() | 1;
		tb_atomic_store_relaxed(&u->broken, 1); /* the next post tries again */
	} else {
		u->recover_ns = 0;
		u->recovered_at = u->posted;
		u->completed = u->posted;
		u->one_wr.wr_id = u->posted + 1;
		u->left = u->signal_every;
		tb_atomic_store_relaxed(&u->broken, 0);
	}
	pthread_mutex_unlock(&u->qp_lock);
	return rc;
}


static int post_ready(void *ctx, int n)
{
	tb_ud_tx_t *u = ctx;
	int rc = 0;

	/* A2 pairs with R2 in ud_tx_beat and tx_events: the heartbeat thread
	 * saw the QP out of RTS, or an event.  Not repaired yet: these are
	 * lost (the next heartbeat names them), not posted into a QP that
	 * only flushes. */
	if (tb_unlikely(tb_atomic_load_relaxed(&u->broken)) && tx_recover(u) < 0) {
		u->send_errors += (uint64_t)n;
		tb_dgram_tx_sent(&u->dg);
		return TB_EIO;
	}
	for (int i = 0; i < n; i++) {
		const tb_dgram_out_t *o = &u->dg.out[i];

		if (tb_unlikely(tb_ud_post_one(u, o->hdr, o->frames, o->frames_len, 0) < 0))
			rc = TB_EIO;
	}
	/* Posted or not, they are gone: a receiver sees a loss as a gap. */
	tb_dgram_tx_sent(&u->dg);
	return rc;
}

/* tb_ud_send's way for everything but one frame without batching: the
 * datagram core's drain.  Hot path, out of line. */
int tb_ud_send_rest(tb_ud_tx_t *u, uint64_t to)
{
	return tb_dgram_tx_drain(&u->dg, to, 0, post_ready, u);
}

static int ud_tx_send(tb_tx_t *tx, uint64_t from, uint64_t to)
{
	(void)from;
	return tb_ud_send((tb_ud_tx_t *)tx, to);
}

static int ud_tx_flush(tb_tx_t *tx)
{
	return tb_dgram_tx_drain(&((tb_ud_tx_t *)tx)->dg, tx->ring.tail, 1,
				 post_ready, tx);
}

/* The heartbeat QP after its own send failed: heartbeat thread. */
static void beat_recover(tb_ud_tx_t *u)
{
	struct ibv_wc wc;

	while (ibv_poll_cq(u->beat_cq, 1, &wc) > 0)
		;
	if (qp_back_to_rts(&u->dev, u->beat_qp, u->qkey) > 0)
		u->beat_recoveries++;
}

/* The heartbeat QP and CQ anew after the CQ failed: heartbeat thread. */
static void beat_remake(tb_ud_tx_t *u)
{
	ibv_destroy_qp(u->beat_qp);
	ibv_destroy_cq(u->beat_cq);
	u->beat_qp = NULL;
	u->beat_cq = ibv_create_cq(u->dev.v.ctx, 4, NULL, NULL, 0);
	if (u->beat_cq)
		u->beat_qp = ud_qp(&u->dev, u->beat_cq, 2, 1, 0, 0, u->qkey, NULL);
	if (u->beat_qp)
		u->beat_recoveries++;
}

/* Our GID may have moved (heartbeat thread): the index to send from now;
 * when it changed, the publishing thread gets it (R3 pairs with A3 in
 * tx_recover) and the heartbeats a new address handle of their own. */
static void tx_addr_change(tb_ud_tx_t *u)
{
	union ibv_gid gid;
	int ifindex, i = gid_now(&u->dev, &gid, &ifindex);

	if (i < 0) {
		tb_warn("ud: %s port %u: no GID to send from any more (gid_index %d "
			"is gone): nothing leaves until one is back", u->dev.v.name,
			u->dev.v.port, u->dev.v.gid_index);
		return;
	}
	if (i == u->dev.v.gid_index && !memcmp(&gid, &u->dev.v.gid, sizeof(gid)))
		return;
	tb_warn("ud: %s port %u: the source GID moved from index %d to %d",
		u->dev.v.name, u->dev.v.port, u->dev.v.gid_index, i);
	u->dev.v.gid_index = i;
	u->dev.v.gid = gid;
	u->dev.v.ifindex = ifindex;
	{
		struct ibv_ah *ah = group_ah(u, i);

		if (ah) {
			ibv_destroy_ah(u->beat_ah);
			u->beat_ah = ah;
		}
	}
	u->new_gid_index = i;
	tb_atomic_store_release(&u->readdress, 1); /* R3 */
	tb_atomic_store_relaxed(&u->broken, 1);
}

/* The device's asynchronous events (heartbeat thread, each beat): what
 * concerns the data QP or CQ is handed to the publishing thread (R2), what
 * concerns the heartbeat's own, repaired here; the port's state is said
 * in words. */
static void tx_events(tb_ud_tx_t *u)
{
	tb_verbs_event_t ev;

	while (tb_verbs_events_next(&u->dev.v, &ev) == 1) {
		u->events++;
		switch (ev.kind) {
		case TB_VERBS_EV_QP_FATAL:
			if (ev.qp == u->beat_qp)
				beat_recover(u);
			else if (ev.qp == u->qp)
				tb_atomic_store_relaxed(&u->broken, 1); /* R2 */
			break;
		case TB_VERBS_EV_CQ_ERR:
			if (ev.cq == u->beat_cq) {
				beat_remake(u);
			} else if (ev.cq == u->cq) {
				tb_atomic_store_relaxed(&u->remake, 1);
				tb_atomic_store_relaxed(&u->broken, 1); /* R2 */
			}
			break;
		case TB_VERBS_EV_PORT_DOWN:
			if (tb_verbs_event_on_port(&u->dev.v, &ev) && !u->port_down) {
				u->port_down = 1;
				tb_warn("ud: %s port %u is down: nothing leaves until "
					"it is back", u->dev.v.name, u->dev.v.port);
			}
			break;
		case TB_VERBS_EV_PORT_UP:
			if (tb_verbs_event_on_port(&u->dev.v, &ev) && u->port_down) {
				u->port_down = 0;
				tb_warn("ud: %s port %u is active again", u->dev.v.name,
					u->dev.v.port);
			}
			break;
		case TB_VERBS_EV_ADDR_CHANGE:
			if (tb_verbs_event_on_port(&u->dev.v, &ev))
				tx_addr_change(u);
			break;
		case TB_VERBS_EV_DEVICE_FATAL:
			tb_warn("ud: %s: the device failed: nothing it sends arrives",
				u->dev.v.name);
			break;
		case TB_VERBS_EV_OTHER:
			break;
		}
	}
}

/* Heartbeat thread: its own QP, so the data QP stays the publishing
 * thread's alone.  It carries what has been posted, not what was
 * published, so that a datagram held for batching is not taken for a lost
 * tail.  It also reads the device's events and looks at the data QP's
 * state (system calls, here and not on the hot path): one that left RTS
 * is flagged for the publishing thread to bring back before its next
 * post. */
static void ud_tx_beat(tb_tx_t *tx, uint64_t now_ns, uint64_t last_seq)
{
	tb_ud_tx_t *u = (tb_ud_tx_t *)tx;
	uint64_t next;
	struct ibv_send_wr wr = {.num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	struct ibv_sge sge;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	struct ibv_wc wc;

	(void)now_ns;
	(void)last_seq;
	pthread_mutex_lock(&u->qp_lock);
	tx_events(u);
	if (u->qp && ibv_query_qp(u->qp, &a, IBV_QP_STATE, &ia) == 0 &&
	    a.qp_state != IBV_QPS_RTS)
		tb_atomic_store_relaxed(&u->broken, 1); /* R2 */
	pthread_mutex_unlock(&u->qp_lock);
	if (!u->beat_qp)
		return;
	/* The heartbeat goes on another send queue, which a NIC does not
	 * order with the data's: it must not overtake a datagram posted a
	 * moment ago and fake a lost tail.  So when something was posted
	 * since the previous beat, wait TB_UD_BEAT_SETTLE_NS and send only if
	 * nothing more was posted meanwhile (the last datagram has long left
	 * by then); if data keeps flowing, it tells the subscribers the
	 * publisher is alive, and this beat is skipped. */
	next = tb_dgram_tx_sent_next(&u->dg);
	if (u->beats++ && next != u->beat_prev) {
		struct timespec ts = {0, TB_UD_BEAT_SETTLE_NS};

		nanosleep(&ts, NULL);
		if (tb_dgram_tx_sent_next(&u->dg) != next) {
			u->beat_prev = tb_dgram_tx_sent_next(&u->dg);
			u->beats_skipped++;
			return;
		}
	}
	u->beat_prev = next;
	tb_dgram_tx_beat(&u->dg, u->beat_hdr, next);
	sge.addr = (uintptr_t)u->beat_hdr;
	sge.length = TB_PACKET_HDR_LEN;
	sge.lkey = u->beat_mr->lkey;
	wr.sg_list = &sge;
	wr.imm_data = htonl((uint32_t)next);
	wr.wr.ud.ah = u->beat_ah;
	wr.wr.ud.remote_qpn = TB_UD_MCAST_QPN;
	wr.wr.ud.remote_qkey = u->qkey;
	if (ibv_post_send(u->beat_qp, &wr, &bad) != 0 ||
	    wait_one(u->beat_cq, &wc) != 1 || wc.status != IBV_WC_SUCCESS) {
		u->send_errors++;
		beat_recover(u);
	}
}

static void ud_tx_free(tb_ud_tx_t *u)
{
	if (u->ah)
		ibv_destroy_ah(u->ah);
	if (u->beat_ah)
		ibv_destroy_ah(u->beat_ah);
	if (u->qp)
		ibv_destroy_qp(u->qp);
	if (u->beat_qp)
		ibv_destroy_qp(u->beat_qp);
	if (u->cq)
		ibv_destroy_cq(u->cq);
	if (u->beat_cq)
		ibv_destroy_cq(u->beat_cq);
	/* The audit forgets each registration before it goes. */
	tb_counters_mr_remove(u->ring_rec);
	tb_counters_mr_remove(u->slab_rec);
	tb_counters_mr_remove(u->beat_rec);
	if (u->ring_mr)
		ibv_dereg_mr(u->ring_mr);
	if (u->slab_mr)
		ibv_dereg_mr(u->slab_mr);
	if (u->beat_mr)
		ibv_dereg_mr(u->beat_mr);
	dev_close(&u->dev);
	tb_dgram_tx_fini(&u->dg);
	tb_mem_free(&u->ring_mem);
	tb_mem_free(&u->slab_mem);
	free(u->beat_hdr);
	if (u->qp_lock_made)
		pthread_mutex_destroy(&u->qp_lock);
	free(u);
}

/* END behind the last datagram, on the same QP; the last one signalled and
 * waited for, so nothing posted is lost by tearing the QP down. */
static void ud_tx_close(tb_tx_t *tx, uint64_t final_seq)
{
	tb_ud_tx_t *u = (tb_ud_tx_t *)tx;
	tb_packet_hdr_t end[TB_UD_END_COPIES];
	uint64_t until = tb_clock_mono_ns() + TB_UD_WAIT_NS;

	if (tb_atomic_load_relaxed(&u->broken))
		tx_recover(u);
	for (int i = 0; i < TB_UD_END_COPIES && u->qp; i++) {
		tb_dgram_tx_end(&u->dg, &end[i], final_seq);
		if (tb_ud_post_one(u, &end[i], NULL, 0, i == TB_UD_END_COPIES - 1) < 0)
			break;
		u->ends++;
	}
	while (u->cq && u->completed < u->posted && tb_clock_mono_ns() < until) {
		struct ibv_wc wc;

		if (wait_one(u->cq, &wc) != 1)
			break;
		if (wc.status != IBV_WC_SUCCESS)
			u->send_errors++;
		if (wc.wr_id > u->completed)
			u->completed = wc.wr_id;
	}
	ud_tx_free(u);
}

/* The work requests the data posts send: what changes per datagram is
 * set by tb_ud_post_one and tb_ud_send; the fast one's header is always
 * dg.one, inline, unsignalled. */
static void prepare_wr(tb_ud_tx_t *u)
{
	memset(&u->wr, 0, sizeof(u->wr));
	u->sge[0].length = TB_PACKET_HDR_LEN;
	u->sge[0].lkey = u->slab_mr->lkey; /* unused when inline */
	u->sge[1].lkey = u->ring_mr->lkey;
	u->wr.sg_list = u->sge;
	u->wr.opcode = IBV_WR_SEND_WITH_IMM;
	u->wr.wr.ud.ah = u->ah;
	u->wr.wr.ud.remote_qpn = TB_UD_MCAST_QPN;
	u->wr.wr.ud.remote_qkey = u->qkey;
	u->one_wr = u->wr;
	u->one_sge[0] = u->sge[0];
	u->one_sge[0].addr = (uintptr_t)&u->dg.one;
	u->one_sge[1] = u->sge[1];
	u->one_wr.sg_list = u->one_sge;
	u->one_wr.num_sge = 2;
	u->one_wr.send_flags = IBV_SEND_INLINE;
	u->one_wr.wr_id = u->posted + 1;
	u->left = u->signal_every;
}

/* The data CQ and QP (at open, and anew after the CQ failed). */
static int tx_qp_open(tb_ud_tx_t *u)
{
	tb_ud_dev_t *d = &u->dev;

	u->cq = ibv_create_cq(d->v.ctx, (int)u->sq_depth + 1, NULL, NULL, 0);
	if (!u->cq)
		return tb_error_sys(errno, "ud: %s: ibv_create_cq", d->v.name);
	/* Made anew (remake), it takes at least the inline data the first
	 * took (0 at open): the offer's inline send was chosen for that
	 * (tb_ud_tx_inline_takes), and no longer tests it a datagram.  A
	 * device that now grants less gives no QP, and the stream stays
	 * broken, tried again later, rather than posting what it refuses. */
	u->qp = ud_qp(d, u->cq, u->sq_depth, 1, TB_UD_INLINE, u->max_inline,
		      u->qkey, &u->max_inline);
	u->inline_frames = (int64_t)u->max_inline - TB_PACKET_HDR_LEN;
	if (u->qp)
		u->post_send = u->qp->context->ops.post_send;
	return u->qp ? 0 : TB_ESYS;
}

static int tx_verbs(tb_ud_tx_t *u, const tb_stream_cfg_t *cfg)
{
	tb_ud_dev_t *d = &u->dev;
	size_t slab = (size_t)u->sq_depth * sizeof(tb_packet_hdr_t);
	int rc;

	if ((rc = tx_qp_open(u)) < 0)
		return rc;
	u->beat_cq = ibv_create_cq(d->v.ctx, 4, NULL, NULL, 0);
	if (!u->beat_cq)
		return tb_error_sys(errno, "ud: %s: ibv_create_cq", d->v.name);
	u->beat_qp = ud_qp(d, u->beat_cq, 2, 1, 0, 0, u->qkey, NULL);
	if (!u->beat_qp)
		return TB_ESYS;
	/* The ring and the header slabs: read by the NIC only. */
	u->ring_mr = ibv_reg_mr(d->v.pd, u->ring_mem.addr, cfg->ring_size, 0);
	if (!u->ring_mr)
		return reg_failed(errno, d, "the ring", cfg->ring_size);
	/* Each recorded for the audit (tb-doctor --audit) with the access
	 * it was given: none beyond local reads, no key sent anywhere. */
	u->ring_rec = tb_counters_mr_add(cfg->id, TB_ROLE_PUBLISHER,
					 TB_MR_RING_TX, "ud", u->ring_mr, 0);
	u->slab_mr = ibv_reg_mr(d->v.pd, u->slab, slab, 0);
	if (!u->slab_mr)
		return reg_failed(errno, d, "the header slab", slab);
	u->slab_rec = tb_counters_mr_add(cfg->id, TB_ROLE_PUBLISHER,
					 TB_MR_SEND, "ud", u->slab_mr, 0);
	u->beat_mr = ibv_reg_mr(d->v.pd, u->beat_hdr, sizeof(tb_packet_hdr_t), 0);
	if (!u->beat_mr)
		return reg_failed(errno, d, "the heartbeat header",
				  sizeof(tb_packet_hdr_t));
	u->beat_rec = tb_counters_mr_add(cfg->id, TB_ROLE_PUBLISHER,
					 TB_MR_SEND, "ud", u->beat_mr, 0);
	u->hop_limit = (uint8_t)(cfg->ttl > 0 ? cfg->ttl : 1);
	u->traffic_class = (uint8_t)cfg->rdma_traffic_class;
	u->ah = group_ah(u, d->v.gid_index);
	u->beat_ah = u->ah ? group_ah(u, d->v.gid_index) : NULL;
	if (!u->ah || !u->beat_ah)
		return tb_error_sys(errno, "ud: %s: address handle for group %s",
				  d->v.name, cfg->group.host);
	prepare_wr(u);
	return 0;
}

/* The largest power of two at most `v` (v > 0). */
static uint32_t pow2_floor(uint64_t v)
{
	uint32_t p = 1;

	while ((uint64_t)p * 2 <= v && p < (1u << 30))
		p *= 2;
	return p;
}

/* What a publisher pins (memlock.h), checked before anything is made: its
 * ring, header slab and heartbeat header, two QPs and their CQs. */
static int tx_memlock(const tb_ud_tx_t *u, const tb_stream_cfg_t *cfg)
{
	char what[TB_NAME_MAX + 64];
	size_t slab = (size_t)u->sq_depth * sizeof(tb_packet_hdr_t);

	snprintf(what, sizeof(what), "stream '%s': a ud publisher (its ring of "
		 "%llu bytes and its queues)", cfg->name,
		 (unsigned long long)cfg->ring_size);
	return tb_memlock_check(tb_memlock_mr_bytes(NULL, cfg->ring_size) +
				tb_memlock_mr_bytes(NULL, slab) +
				tb_memlock_mr_bytes(NULL, sizeof(tb_packet_hdr_t)) +
				tb_memlock_cq_bytes(u->sq_depth + 1) +
				tb_memlock_cq_bytes(4) +
				tb_memlock_qp_bytes(TB_MEMLOCK_WQE_UD_SEND, u->sq_depth,
						    TB_UD_INLINE, 2, 1) +
				tb_memlock_qp_bytes(TB_MEMLOCK_WQE_UD_SEND, 2, 0, 2,
						    1), what);
}

static int ud_tx_open(tb_tx_t **out, const tb_stream_cfg_t *cfg, uint64_t epoch)
{
	int node = cfg->publisher_core >= 0 ? tb_mem_node_of_core(cfg->publisher_core)
					    : -1;
	tb_ud_tx_t *u = calloc(1, sizeof(*u));
	uint32_t cap;
	uint64_t depth;
	int rc;

	if (!u)
		return tb_error_set(TB_ENOMEM, "ud: out of memory");
	rc = dev_open(&u->dev, cfg);
	if (rc < 0) {
		free(u);
		return rc; /* tb_publisher_open / tb_subscriber_open name the stream */
	}
	pthread_mutex_init(&u->qp_lock, NULL);
	u->qp_lock_made = 1;
	u->qkey = TB_UD_QKEY(cfg->id);
	depth = cfg->ring_size / (2u * u->dev.mtu);
	if ((cfg->ring_size & (cfg->ring_size - 1)) || depth < TB_UD_SQ_MIN) {
		rc = tb_error_set(TB_EINVAL, "ud: ring_size %llu must be a power of "
				"two of at least %u bytes (16 datagrams of %u)",
				(unsigned long long)cfg->ring_size,
				2u * TB_UD_SQ_MIN * u->dev.mtu, u->dev.mtu);
		goto fail;
	}
	if (depth > TB_UD_SQ_MAX)
		depth = TB_UD_SQ_MAX;
	if (depth > u->dev.max_qp_wr)
		depth = u->dev.max_qp_wr;
	u->sq_depth = pow2_floor(depth);
	u->signal_every = u->sq_depth / 4 < TB_UD_SIGNAL_EVERY ? u->sq_depth / 4
							    : TB_UD_SIGNAL_EVERY;
	if ((rc = tx_memlock(u, cfg)) < 0)
		goto fail;
	if ((rc = tb_mem_alloc(&u->ring_mem, cfg->ring_size, node, 0)) < 0 ||
	    (rc = tb_mem_alloc(&u->slab_mem, u->sq_depth * sizeof(tb_packet_hdr_t),
			       node, TB_MEM_NO_HUGETLB | TB_MEM_NO_THP)) < 0)
		goto fail;
	u->slab = u->slab_mem.addr;
	if (posix_memalign((void **)&u->beat_hdr, 64, sizeof(tb_packet_hdr_t)) != 0) {
		u->beat_hdr = NULL;
		rc = tb_error_set(TB_ENOMEM, "ud: out of memory");
		goto fail;
	}
	tb_ring_init(&u->tx.ring, u->ring_mem.addr, cfg->ring_size, cfg->id);
	cap = tb_dgram_max_frame(u->dev.mtu);
	if (cap < u->tx.ring.max_frame)
		u->tx.ring.max_frame = cap;
	rc = tb_dgram_tx_init(&u->dg, &u->tx.ring, u->dev.mtu, cfg->id, epoch,
			      cfg->batch_us, cfg->token);
	if (rc < 0)
		goto fail;
	tb_dgram_token_check(cfg);
	rc = tx_verbs(u, cfg);
	if (rc < 0)
		goto fail;
	tb_info("ud: stream '%s': publishing to %s (MGID ::ffff:%s) from %s port "
		"%u GID %d, datagrams of %u bytes, QP %u", cfg->name,
		cfg->group.host, cfg->group.host, u->dev.v.name, u->dev.v.port,
		u->dev.v.gid_index, u->dev.mtu, u->qp->qp_num);
	u->tx.ops = &tb_ud_tx_ops;
	*out = &u->tx;
	return 0;
fail:
	ud_tx_free(u);
	return rc;
}

const tb_tx_ops_t tb_ud_tx_ops = {
	.name = "ud",
	.open = ud_tx_open,
	.room = NULL, /* multicast never waits for a subscriber */
	.send = ud_tx_send,
	.flush = ud_tx_flush,
	.beat = ud_tx_beat,
	.close = ud_tx_close,
};

/* --------------------------------------------------------- subscribing */

/* Hands the done buffers back to the receive queue in one post.  A QP in
 * error takes none (they would only flush): the rebuild posts them all. */
static void repost(tb_ud_rx_t *r)
{
	struct ibv_recv_wr *bad;
	int n = r->n_repost;

	r->n_repost = 0;
	if (!n || tb_unlikely(r->broken))
		return;
	r->rwr[n - 1].next = NULL;
	if (tb_unlikely(ibv_post_recv(r->qp, &r->rwr[0], &bad) != 0)) {
		r->wc_errors++;
		r->broken = 1;
	}
	r->reposts++;
	if (n < TB_UD_REPOST)
		r->rwr[n - 1].next = &r->rwr[n];
}

static inline void recycle(tb_ud_rx_t *r, uint64_t id)
{
	int i = r->n_repost++;

	r->rwr[i].wr_id = id;
	r->rsge[i].addr = (uintptr_t)(r->bufs + id * r->stride);
	if (r->n_repost == TB_UD_REPOST)
		repost(r);
}

/* Counts a datagram dropped before dgram.h saw it (TB_CTR_MALFORMED; a
 * wrong immediate has no kind of its own among the packet faults). */
static inline void drop_malformed(tb_ud_rx_t *r, const struct ibv_wc *wc)
{
	tb_counter_inc(r->dg.ctr, TB_CTR_MALFORMED);
	recycle(r, wc->wr_id);
	r->next++;
}

/* A receive completed in error.  Flushed: the QP is in error and every
 * receive will flush.  Anything else (a datagram too large for the buffer,
 * say): reposted if the QP is still up, which a NIC may or may not leave it
 * (asked: an error path). */
static void wc_error(tb_ud_rx_t *r, const struct ibv_wc *wc)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	r->wc_errors++;
	tb_counter_inc(r->dg.ctr, TB_CTR_ERRORS);
	if (wc->status == IBV_WC_WR_FLUSH_ERR ||
	    ibv_query_qp(r->qp, &a, IBV_QP_STATE, &ia) != 0 ||
	    a.qp_state == IBV_QPS_ERR)
		r->broken = 1;
	else
		recycle(r, wc->wr_id);
}

static void rx_qp_close(tb_ud_rx_t *r)
{
	if (r->attached)
		ibv_detach_mcast(r->qp, &r->dev.mgid, 0);
	r->attached = 0;
	if (r->qp)
		ibv_destroy_qp(r->qp);
	r->qp = NULL;
	if (r->cq)
		ibv_destroy_cq(r->cq);
	r->cq = NULL;
}

/* A CQ and a QP with every buffer posted, joined to the group. */
static int rx_qp_open(tb_ud_rx_t *r)
{
	tb_ud_dev_t *d = &r->dev;
	int e;

	r->cq = ibv_create_cq(d->v.ctx, (int)r->depth + 1, NULL, NULL, 0);
	if (!r->cq)
		return tb_error_sys(errno, "ud: %s: ibv_create_cq (%u entries)",
				  d->v.name, r->depth + 1);
	r->qp = ud_qp(d, r->cq, 1, r->depth, 0, 0, r->qkey, NULL);
	if (!r->qp)
		return TB_ESYS;
	r->broken = 0;
	r->n_repost = 0;
	r->got = r->next = 0;
	for (uint64_t id = 0; id < r->depth; id++)
		recycle(r, id);
	repost(r);
	if (r->broken)
		return tb_error_set(TB_ESYS, "ud: %s: post the receive buffers",
				  d->v.name);
	e = ibv_attach_mcast(r->qp, &d->mgid, 0);
	if (e != 0)
		return tb_error_sys(e, "ud: %s: attach to the group", d->v.name);
	r->attached = 1;
	return 0;
}

/*
 * The QP went to the error state: a new CQ and QP, every buffer posted,
 * the group joined again (error path: system calls, at most every
 * TB_UD_REBUILD_NS).  The datagram being delivered, if any, was in a
 * buffer now posted again: dgram.h forgets it, and what it and the others
 * lost held comes back as a gap.
 */
static void rx_rebuild(tb_ud_rx_t *r, uint64_t now)
{
	if (r->rebuilt_ns && now - r->rebuilt_ns < TB_UD_REBUILD_NS)
		return;
	r->rebuilt_ns = now;
	tb_dgram_rx_forget(&r->dg);
	rx_qp_close(r);
	if (rx_qp_open(r) < 0) {
		r->broken = 1; /* tried again later */
		return;
	}
	r->rebuilds++;
}

static void rx_events(tb_ud_rx_t *r, uint64_t now);

static int ud_rx_poll(tb_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		      tb_handler_t handler, void *clientd, int limit)
{
	tb_ud_rx_t *r = (tb_ud_rx_t *)rx;
	uint64_t now = 0;
	int n = 0, done, rc, polled = 0;

	/* Hot path: one ibv_poll_cq per TB_UD_POLL datagrams, one
	 * ibv_post_recv per TB_UD_REPOST; no allocation, lock or system
	 * call.  A batch with nothing to deliver (rubbish, forgeries,
	 * another epoch) ends the poll like an empty one, so a flood cannot
	 * hold the caller here nor hide a dead publisher. */
	tb_dgram_rx_set_counters(&r->dg, rx->ctr);
	for (;;) {
		const struct ibv_wc *wc;
		const uint8_t *buf;
		uint32_t len;

		if (r->next == r->got) {
			if (n > 0)
				return n;
			if (tb_unlikely(r->broken))
				rx_rebuild(r, tb_clock_now_ns_inline());
			r->next = 0;
			r->got = 0;
			if (!polled && !r->broken)
				r->got = ibv_poll_cq(r->cq, TB_UD_POLL, r->wc);
			polled = 1;
			if (r->got <= 0) {
				uint64_t t = tb_clock_now_ns_inline();

				if (tb_unlikely(r->got < 0))
					r->broken = 1; /* the CQ failed */
				r->got = 0;
				rx_events(r, t);
				return tb_dgram_rx_idle(&r->dg, t);
			}
			now = 0;
		}
		wc = &r->wc[r->next];
		if (tb_unlikely(wc->status != IBV_WC_SUCCESS)) {
			wc_error(r, wc);
			r->next++;
			continue;
		}
		buf = r->bufs + wc->wr_id * r->stride + TB_UD_GRH;
		if (tb_unlikely(wc->byte_len < TB_UD_GRH)) {
			r->dg.faults[TB_PACKET_SHORT]++;
			tb_counter_inc(r->dg.ctr, TB_CTR_MALFORMED_SHORT);
			drop_malformed(r, wc);
			continue;
		}
		len = wc->byte_len - TB_UD_GRH;
		/* The immediate must name the header's first sequence. */
		if (!r->dg.active && len >= TB_PACKET_HDR_LEN &&
		    tb_unlikely(!(wc->wc_flags & IBV_WC_WITH_IMM) ||
				ntohl(wc->imm_data) !=
					(uint32_t)((const tb_packet_hdr_t *)buf)->first_seq)) {
			r->bad_imm++;
			drop_malformed(r, wc);
			continue;
		}
		if (!now)
			now = tb_clock_now_ns_inline();
		rc = tb_dgram_rx_input(&r->dg, seq, loss, buf, len, now, handler,
				       clientd, limit - n, n, &done);
		if (done) {
			recycle(r, wc->wr_id);
			r->next++;
		}
		if (rc < 0)
			return rc; /* only when n == 0 */
		n += rc;
		if (!done || n >= limit)
			return n;
	}
}

static uint64_t ud_rx_epoch(const tb_rx_t *rx)
{
	return ((const tb_ud_rx_t *)rx)->dg.epoch;
}

static void ud_rx_close(tb_rx_t *rx)
{
	tb_ud_rx_t *r = (tb_ud_rx_t *)rx;

	rx_qp_close(r);
	if (r->igmp_fd >= 0)
		close(r->igmp_fd);
	tb_counters_mr_remove(r->rec); /* before the deregistration */
	if (r->mr)
		ibv_dereg_mr(r->mr);
	dev_close(&r->dev);
	tb_dgram_rx_fini(&r->dg);
	tb_mem_free(&r->buf_mem);
	free(r);
}

/* So that switches forward the group to this port: an IGMP membership on
 * the port's netdev (or cfg.interface).  A failure only warns: on a flat
 * segment without snooping the datagrams arrive anyway.  Made again after
 * the port came back or the GID moved. */
static void igmp_join(tb_ud_rx_t *r)
{
	struct ip_mreqn m;

	if (r->igmp_fd >= 0)
		close(r->igmp_fd);
	memset(&m, 0, sizeof(m));
	memcpy(&m.imr_multiaddr, r->dev.mgid.raw + 12, 4);
	m.imr_ifindex = r->dev.v.ifindex;
	if (r->interface[0] &&
	    inet_pton(AF_INET, r->interface, &m.imr_address) != 1)
		m.imr_ifindex = (int)if_nametoindex(r->interface);
	else if (r->interface[0])
		m.imr_ifindex = 0;
	r->igmp_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (r->igmp_fd >= 0 &&
	    setsockopt(r->igmp_fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof(m)) == 0)
		return;
	tb_warn("ud: stream '%s': IGMP join of the group on interface %d failed "
		"(%s); switches with IGMP snooping may not forward the group",
		r->name, m.imr_ifindex, strerror(errno));
	if (r->igmp_fd >= 0)
		close(r->igmp_fd);
	r->igmp_fd = -1;
}

/* The device's asynchronous events, read by an idle poll at most every
 * TB_UD_EVENTS_NS (a system call; a busy subscriber sees a failed QP or CQ
 * in its completions): a failed QP or CQ is rebuilt, the port's going down
 * and coming back are said in words (and the group joined again), a moved
 * GID gets the IGMP membership on its netdev. */
static void rx_events(tb_ud_rx_t *r, uint64_t now)
{
	tb_verbs_event_t ev;

	if (now - r->events_ns < TB_UD_EVENTS_NS)
		return;
	r->events_ns = now;
	while (tb_verbs_events_next(&r->dev.v, &ev) == 1) {
		union ibv_gid gid;
		int ifindex;

		r->events++;
		switch (ev.kind) {
		case TB_VERBS_EV_QP_FATAL:
			if (ev.qp == r->qp)
				r->broken = 1;
			break;
		case TB_VERBS_EV_CQ_ERR:
			if (ev.cq == r->cq)
				r->broken = 1;
			break;
		case TB_VERBS_EV_PORT_DOWN:
			if (tb_verbs_event_on_port(&r->dev.v, &ev) && !r->port_down) {
				r->port_down = 1;
				tb_counter_inc(r->dg.ctr, TB_CTR_ERRORS);
				tb_warn("ud: stream '%s': %s port %u is down: nothing "
					"arrives until it is back", r->name,
					r->dev.v.name, r->dev.v.port);
			}
			break;
		case TB_VERBS_EV_PORT_UP:
			if (tb_verbs_event_on_port(&r->dev.v, &ev) && r->port_down) {
				r->port_down = 0;
				r->broken = 1; /* joined again with a new QP */
				igmp_join(r);
				tb_warn("ud: stream '%s': %s port %u is active again",
					r->name, r->dev.v.name, r->dev.v.port);
			}
			break;
		case TB_VERBS_EV_ADDR_CHANGE:
			if (!tb_verbs_event_on_port(&r->dev.v, &ev))
				break;
			if (gid_now(&r->dev, &gid, &ifindex) >= 0 &&
			    memcmp(&gid, &r->dev.v.gid, sizeof(gid)) != 0) {
				r->dev.v.gid = gid;
				r->dev.v.ifindex = ifindex;
				igmp_join(r);
			}
			break;
		case TB_VERBS_EV_DEVICE_FATAL:
			r->broken = 1;
			tb_counter_inc(r->dg.ctr, TB_CTR_ERRORS);
			tb_warn("ud: stream '%s': %s failed: nothing arrives",
				r->name, r->dev.v.name);
			break;
		case TB_VERBS_EV_OTHER:
			break;
		}
	}
}

/* Receive buffers: cfg.recv_depth (TB_UD_RECVS when 0), at most what the
 * device's queues and CQs hold. */
static uint32_t rx_depth(const tb_ud_rx_t *r, const tb_stream_cfg_t *cfg)
{
	const tb_ud_dev_t *d = &r->dev;
	uint64_t want = cfg->recv_depth ? cfg->recv_depth : TB_UD_RECVS;
	uint64_t most = d->max_qp_wr;

	if (d->max_cqe > 0 && (uint64_t)d->max_cqe - 1 < most)
		most = (uint64_t)d->max_cqe - 1;
	if (want < TB_UD_RECVS_MIN)
		want = TB_UD_RECVS_MIN;
	if (want > most) {
		tb_info("ud: stream '%s': %llu receive buffers asked for, %s holds "
			"%llu: using %llu", cfg->name, (unsigned long long)want,
			d->v.name, (unsigned long long)most,
			(unsigned long long)most);
		want = most;
	}
	return (uint32_t)want;
}

/* What a subscriber pins (memlock.h), checked before anything is made:
 * its receive buffers, QP and CQ. */
static int rx_memlock(const tb_ud_rx_t *r, const tb_stream_cfg_t *cfg,
		      size_t size)
{
	char what[TB_NAME_MAX + 160];

	snprintf(what, sizeof(what), "stream '%s': a ud subscriber (%u receive "
		 "buffers of %u bytes and its queues; recv_depth and mtu set "
		 "them)", cfg->name, r->depth, r->stride);
	return tb_memlock_check(tb_memlock_mr_bytes(NULL, size) +
				tb_memlock_cq_bytes(r->depth + 1) +
				tb_memlock_qp_bytes(TB_MEMLOCK_WQE_UD_SEND, 1, 0, 2,
						    r->depth), what);
}

static int rx_verbs(tb_ud_rx_t *r, const tb_stream_cfg_t *cfg)
{
	int node = cfg->subscriber_core >= 0 ? tb_mem_node_of_core(cfg->subscriber_core)
					     : -1;
	tb_ud_dev_t *d = &r->dev;
	size_t size;
	int rc;

	/* A buffer holds the GRH and a datagram of the group's mtu. */
	r->stride = (TB_UD_GRH + d->mtu + 63u) & ~63u;
	r->depth = rx_depth(r, cfg);
	size = (size_t)r->depth * r->stride;
	if ((rc = rx_memlock(r, cfg, size)) < 0)
		return rc;
	if ((rc = tb_mem_alloc(&r->buf_mem, size, node, 0)) < 0)
		return tb_error_prepend(rc, "ud: receive buffers");
	r->bufs = r->buf_mem.addr;
	r->mr = ibv_reg_mr(d->v.pd, r->bufs, size, IBV_ACCESS_LOCAL_WRITE);
	if (!r->mr)
		return reg_failed(errno, d, "the receive buffers", size);
	r->rec = tb_counters_mr_add(cfg->id, TB_ROLE_SUBSCRIBER, TB_MR_RECV, "ud",
				    r->mr, IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < TB_UD_REPOST; i++) {
		r->rsge[i].length = r->stride;
		r->rsge[i].lkey = r->mr->lkey;
		r->rwr[i].sg_list = &r->rsge[i];
		r->rwr[i].num_sge = 1;
		r->rwr[i].next = i + 1 < TB_UD_REPOST ? &r->rwr[i + 1] : NULL;
	}
	return rx_qp_open(r);
}

static int ud_rx_open(tb_rx_t **out, const tb_stream_cfg_t *cfg)
{
	tb_ud_rx_t *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return tb_error_set(TB_ENOMEM, "ud: out of memory");
	r->igmp_fd = -1;
	r->qkey = TB_UD_QKEY(cfg->id);
	rc = dev_open(&r->dev, cfg);
	if (rc < 0) {
		free(r);
		return rc;
	}
	tb_dgram_rx_init(&r->dg, cfg->id, cfg->liveness_timeout_ms, cfg->token,
			 r->dev.mtu);
	tb_dgram_token_check(cfg);
	snprintf(r->name, sizeof(r->name), "%s", cfg->name);
	snprintf(r->interface, sizeof(r->interface), "%s", cfg->interface);
	rc = rx_verbs(r, cfg);
	if (rc < 0)
		goto fail;
	igmp_join(r);
	tb_info("ud: stream '%s': subscriber QP %u joined %s on %s port %u, %u "
		"receive buffers of %u bytes", cfg->name, r->qp->qp_num,
		cfg->group.host, r->dev.v.name, r->dev.v.port, r->depth,
		r->dev.mtu);
	r->rx.ops = &tb_ud_rx_ops;
	*out = &r->rx;
	return 0;
fail:
	ud_rx_close(&r->rx);
	return rc;
}

const tb_rx_ops_t tb_ud_rx_ops = {
	.name = "ud",
	.open = ud_rx_open,
	.poll = ud_rx_poll,
	.epoch = ud_rx_epoch,
	.close = ud_rx_close,
};
