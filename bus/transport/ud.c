/*
 * transport/ud.c - RDMA UD multicast under the datagram core (see
 * transport/ud.h for the design).  Device and QP set-up, the post path and
 * the poll loop; packing and checking datagrams is dgram.h's.
 */
#include "bus/transport/ud.h"

#include "bus/clock.h"
#include "bus/error.h"

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

/* The group, then the device (verbs.h), then the datagram bound. */
static int dev_open(tb_ud_dev_t *d, const tb_stream_cfg_t *cfg)
{
	int rc;

	memset(d, 0, sizeof(*d));
	rc = tb_ud_mgid(cfg->group.host, &d->mgid);
	if (rc < 0)
		return rc;
	rc = tb_verbs_open(&d->v, cfg, UD_NO_IB);
	if (rc < 0)
		return tb_error_prepend(rc, "ud");
	d->path_mtu = tb_verbs_mtu_bytes(d->v.mtu);
	d->mtu = d->path_mtu;
	if (cfg->mtu) {
		if (cfg->mtu > d->path_mtu) {
			rc = tb_error_set(TB_ECONFIG, "ud: mtu %u exceeds the path MTU "
					"%u of %s port %u", cfg->mtu, d->path_mtu,
					d->v.name, d->v.port);
			dev_close(d);
			return rc;
		}
		d->mtu = cfg->mtu;
	}
	return 0;
}

/* A UD QP in RTS with `qkey`; a device without inline sends gets none. */
static struct ibv_qp *ud_qp(tb_ud_dev_t *d, struct ibv_cq *cq, uint32_t sq,
			    uint32_t rq, uint32_t inline_max, uint32_t qkey,
			    uint32_t *inline_got)
{
	tb_verbs_qp_cfg_t c = {
		.type = IBV_QPT_UD, .cq = cq, .send_wr = sq, .recv_wr = rq,
		.send_sge = 2, .inline_want = inline_max, .inline_min = 0,
		.qkey = qkey,
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

/* Waits (set-up and teardown only) until `cq` yields a completion. */
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

/* ---------------------------------------------------------- publishing */

/* Makes room in the send queue: polls the CQ only when it is full.  Hot
 * path; the loop is bounded. */
static inline int sq_room(tb_ud_tx_t *u)
{
	struct ibv_wc wc[8];
	uint32_t spins = 0;

	while (tb_unlikely(u->posted - u->completed >= u->sq_depth)) {
		int n = ibv_poll_cq(u->cq, 8, wc);

		u->cq_polls++;
		if (tb_unlikely(n < 0))
			return TB_EIO;
		for (int i = 0; i < n; i++) {
			if (tb_unlikely(wc[i].status != IBV_WC_SUCCESS))
				u->send_errors++;
			u->completed = wc[i].wr_id; /* everything before it too */
		}
		if (n == 0 && ++spins > TB_UD_SQ_SPINS)
			return TB_EIO;
	}
	return 0;
}

/* Posts one datagram (header + frames) on the data QP. */
static inline int post_one(tb_ud_tx_t *u, const tb_packet_hdr_t *hdr,
			   const void *frames, uint32_t frames_len, int signal)
{
	uint64_t idx = u->posted;
	tb_packet_hdr_t *h = &u->slab[idx % u->sq_depth];
	struct ibv_sge sge[2];
	struct ibv_send_wr wr, *bad;

	if (tb_unlikely(sq_room(u) < 0))
		return TB_EIO;
	*h = *hdr; /* the slab slot is this WR's until it completes */
	sge[0].addr = (uintptr_t)h;
	sge[0].length = TB_PACKET_HDR_LEN;
	sge[0].lkey = u->slab_mr->lkey;
	sge[1].addr = (uintptr_t)frames;
	sge[1].length = frames_len;
	sge[1].lkey = u->ring_mr->lkey;
	wr.wr_id = idx + 1;
	wr.next = NULL;
	wr.sg_list = sge;
	wr.num_sge = frames_len ? 2 : 1;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.imm_data = htonl((uint32_t)hdr->first_seq);
	wr.send_flags = 0;
	if (signal || (idx + 1) % u->signal_every == 0) {
		wr.send_flags |= IBV_SEND_SIGNALED;
		u->signalled++;
	}
	if (TB_PACKET_HDR_LEN + frames_len <= u->max_inline) {
		wr.send_flags |= IBV_SEND_INLINE;
		u->inline_posts++;
	}
	wr.wr.ud.ah = u->ah;
	wr.wr.ud.remote_qpn = TB_UD_MCAST_QPN;
	wr.wr.ud.remote_qkey = u->qkey;
	if (tb_unlikely(ibv_post_send(u->qp, &wr, &bad) != 0)) {
		u->send_errors++;
		return TB_EIO;
	}
	u->posted++;
	return 0;
}

static int post_ready(void *ctx, int n)
{
	tb_ud_tx_t *u = ctx;
	int rc = 0;

	for (int i = 0; i < n; i++) {
		const tb_dgram_out_t *o = &u->dg.out[i];

		if (tb_unlikely(post_one(u, o->hdr, o->frames, o->frames_len, 0) < 0))
			rc = TB_EIO;
		else
			u->datagrams++;
	}
	/* Posted or not, they are gone: a receiver sees a loss as a gap. */
	tb_dgram_tx_sent(&u->dg);
	return rc;
}

static int ud_tx_send(tb_tx_t *tx, uint64_t from, uint64_t to)
{
	/* Hot path: no allocation, lock or system call. */
	(void)from;
	(void)to; /* == the ring's tail, which pack reads */
	return tb_dgram_tx_drain(&((tb_ud_tx_t *)tx)->dg, tx->ring.tail, 0,
				 post_ready, tx);
}

static int ud_tx_flush(tb_tx_t *tx)
{
	return tb_dgram_tx_drain(&((tb_ud_tx_t *)tx)->dg, tx->ring.tail, 1,
				 post_ready, tx);
}

/* Heartbeat thread: its own QP, so the data QP stays the publishing
 * thread's alone.  It carries what has been posted, not what was
 * published, so that a datagram held for batching is not taken for a lost
 * tail. */
static void ud_tx_beat(tb_tx_t *tx, uint64_t now_ns, uint64_t last_seq)
{
	tb_ud_tx_t *u = (tb_ud_tx_t *)tx;
	uint64_t next = tb_dgram_tx_sent_next(&u->dg);
	struct ibv_sge sge = {(uintptr_t)u->beat_hdr, TB_PACKET_HDR_LEN,
			      u->beat_mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED,
				 .imm_data = htonl((uint32_t)next)}, *bad;
	struct ibv_wc wc;

	(void)now_ns;
	(void)last_seq;
	/* The heartbeat goes on another send queue, which a NIC does not
	 * order with the data's: it must not overtake a datagram posted a
	 * moment ago and fake a lost tail.  So when something was posted
	 * since the previous beat, wait TB_UD_BEAT_SETTLE_NS and send only if
	 * nothing more was posted meanwhile (the last datagram has long left
	 * by then); if data keeps flowing, it tells the subscribers the
	 * publisher is alive, and this beat is skipped. */
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
	tb_packet_init(u->beat_hdr, TB_PACKET_F_HEARTBEAT, u->dg.stream_id, u->dg.epoch,
		    next, 0, TB_PACKET_HDR_LEN);
	wr.wr.ud.ah = u->ah;
	wr.wr.ud.remote_qpn = TB_UD_MCAST_QPN;
	wr.wr.ud.remote_qkey = u->qkey;
	if (ibv_post_send(u->beat_qp, &wr, &bad) != 0 ||
	    wait_one(u->beat_cq, &wc) != 1 || wc.status != IBV_WC_SUCCESS)
		u->send_errors++;
}

static void ud_tx_free(tb_ud_tx_t *u)
{
	if (u->ah)
		ibv_destroy_ah(u->ah);
	if (u->qp)
		ibv_destroy_qp(u->qp);
	if (u->beat_qp)
		ibv_destroy_qp(u->beat_qp);
	if (u->cq)
		ibv_destroy_cq(u->cq);
	if (u->beat_cq)
		ibv_destroy_cq(u->beat_cq);
	if (u->ring_mr)
		ibv_dereg_mr(u->ring_mr);
	if (u->slab_mr)
		ibv_dereg_mr(u->slab_mr);
	if (u->beat_mr)
		ibv_dereg_mr(u->beat_mr);
	dev_close(&u->dev);
	free(u->slab);
	free(u->beat_hdr);
	free(u->ring_mem);
	free(u);
}

/* END behind the last datagram, on the same QP; the last one signalled and
 * waited for, so nothing posted is lost by tearing the QP down. */
static void ud_tx_close(tb_tx_t *tx, uint64_t final_seq)
{
	tb_ud_tx_t *u = (tb_ud_tx_t *)tx;
	tb_packet_hdr_t end;
	uint64_t until = tb_clock_mono_ns() + TB_UD_WAIT_NS;

	tb_packet_init(&end, TB_PACKET_F_END, u->dg.stream_id, u->dg.epoch,
		    final_seq + 1, 0, TB_PACKET_HDR_LEN);
	for (int i = 0; i < TB_UD_END_COPIES; i++)
		if (post_one(u, &end, NULL, 0, i == TB_UD_END_COPIES - 1) < 0)
			break;
	while (u->completed < u->posted && tb_clock_mono_ns() < until) {
		struct ibv_wc wc;

		if (wait_one(u->cq, &wc) != 1)
			break;
		if (wc.status != IBV_WC_SUCCESS)
			u->send_errors++;
		u->completed = wc.wr_id;
	}
	ud_tx_free(u);
}

static int tx_verbs(tb_ud_tx_t *u, const tb_stream_cfg_t *cfg)
{
	tb_ud_dev_t *d = &u->dev;
	struct ibv_ah_attr ah = {.is_global = 1, .port_num = d->v.port};

	u->cq = ibv_create_cq(d->v.ctx, (int)u->sq_depth + 1, NULL, NULL, 0);
	u->beat_cq = ibv_create_cq(d->v.ctx, 4, NULL, NULL, 0);
	if (!u->cq || !u->beat_cq)
		return tb_error_sys(errno, "ud: %s: ibv_create_cq", d->v.name);
	u->qp = ud_qp(d, u->cq, u->sq_depth, 1, TB_UD_INLINE, u->qkey,
		      &u->max_inline);
	if (!u->qp)
		return TB_ESYS;
	u->beat_qp = ud_qp(d, u->beat_cq, 2, 1, 0, u->qkey, NULL);
	if (!u->beat_qp)
		return TB_ESYS;
	/* The ring and the header slabs: read by the NIC only. */
	u->ring_mr = ibv_reg_mr(d->v.pd, u->ring_mem, cfg->ring_size, 0);
	u->slab_mr = ibv_reg_mr(d->v.pd, u->slab,
				(size_t)u->sq_depth * sizeof(tb_packet_hdr_t), 0);
	u->beat_mr = ibv_reg_mr(d->v.pd, u->beat_hdr, sizeof(tb_packet_hdr_t), 0);
	if (!u->ring_mr || !u->slab_mr || !u->beat_mr)
		return tb_error_sys(errno, "ud: %s: register the ring", d->v.name);
	ah.grh.dgid = d->mgid;
	ah.grh.sgid_index = (uint8_t)d->v.gid_index;
	ah.grh.hop_limit = (uint8_t)(cfg->ttl > 0 ? cfg->ttl : 1);
	u->ah = ibv_create_ah(d->v.pd, &ah);
	if (!u->ah)
		return tb_error_sys(errno, "ud: %s: address handle for group %s",
				  d->v.name, cfg->group.host);
	return 0;
}

static int ud_tx_open(tb_tx_t **out, const tb_stream_cfg_t *cfg, uint64_t epoch)
{
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
	u->qkey = TB_UD_QKEY(cfg->id);
	depth = cfg->ring_size / (2u * u->dev.mtu);
	if ((cfg->ring_size & (cfg->ring_size - 1)) || depth < TB_UD_SQ_MIN) {
		rc = tb_error_set(TB_EINVAL, "ud: ring_size %llu must be a power of "
				"two of at least %u bytes (16 datagrams of %u)",
				(unsigned long long)cfg->ring_size,
				2u * TB_UD_SQ_MIN * u->dev.mtu, u->dev.mtu);
		goto fail;
	}
	u->sq_depth = depth > TB_UD_SQ_MAX ? TB_UD_SQ_MAX : (uint32_t)depth;
	u->signal_every = u->sq_depth / 4;
	if (posix_memalign((void **)&u->ring_mem, 4096, cfg->ring_size) != 0 ||
	    posix_memalign((void **)&u->slab, 64,
			   u->sq_depth * sizeof(tb_packet_hdr_t)) != 0 ||
	    posix_memalign((void **)&u->beat_hdr, 64, sizeof(tb_packet_hdr_t)) != 0) {
		rc = tb_error_set(TB_ENOMEM, "ud: no memory for a %llu-byte ring",
				(unsigned long long)cfg->ring_size);
		goto fail;
	}
	memset(u->ring_mem, 0, cfg->ring_size); /* fault it in now */
	tb_ring_init(&u->tx.ring, u->ring_mem, cfg->ring_size, cfg->id);
	cap = tb_dgram_max_frame(u->dev.mtu);
	if (cap < u->tx.ring.max_frame)
		u->tx.ring.max_frame = cap;
	rc = tb_dgram_tx_init(&u->dg, &u->tx.ring, u->dev.mtu, cfg->id, epoch,
			      cfg->batch_us);
	if (rc < 0)
		goto fail;
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

/* Hands `n` done buffers back to the receive queue in one post. */
static void repost(tb_ud_rx_t *r)
{
	struct ibv_recv_wr *bad;

	if (!r->n_repost)
		return;
	r->rwr[r->n_repost - 1].next = NULL;
	if (tb_unlikely(ibv_post_recv(r->qp, &r->rwr[0], &bad) != 0))
		r->wc_errors++;
	r->reposts++;
	if (r->n_repost < TB_UD_REPOST)
		r->rwr[r->n_repost - 1].next = &r->rwr[r->n_repost];
	r->n_repost = 0;
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

static int ud_rx_poll(tb_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		      tb_handler_t handler, void *clientd, int limit)
{
	tb_ud_rx_t *r = (tb_ud_rx_t *)rx;
	uint64_t now = 0;
	int n = 0, done, rc;

	/* Hot path: one ibv_poll_cq per TB_UD_POLL datagrams, one
	 * ibv_post_recv per TB_UD_REPOST; no allocation, lock or system
	 * call. */
	tb_dgram_rx_set_counters(&r->dg, rx->ctr);
	for (;;) {
		const struct ibv_wc *wc;
		const uint8_t *buf;
		uint32_t len;

		if (r->next == r->got) {
			if (n > 0)
				return n;
			r->next = 0;
			r->got = ibv_poll_cq(r->cq, TB_UD_POLL, r->wc);
			if (r->got <= 0) {
				r->got = 0;
				return tb_dgram_rx_idle(&r->dg,
							tb_clock_now_ns_inline());
			}
			now = 0;
		}
		wc = &r->wc[r->next];
		if (tb_unlikely(wc->status != IBV_WC_SUCCESS)) {
			/* The QP is in error and flushes its receives: they
			 * are not reposted (they would flush again). */
			r->wc_errors++;
			tb_counter_inc(r->dg.ctr, TB_CTR_ERRORS);
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

	if (r->attached)
		ibv_detach_mcast(r->qp, &r->dev.mgid, 0);
	if (r->igmp_fd >= 0)
		close(r->igmp_fd);
	if (r->qp)
		ibv_destroy_qp(r->qp);
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->mr)
		ibv_dereg_mr(r->mr);
	dev_close(&r->dev);
	free(r->bufs);
	free(r);
}

/* So that switches forward the group to this port: an IGMP membership on
 * the port's netdev (or cfg.interface).  A failure only warns: on a flat
 * segment without snooping the datagrams arrive anyway. */
static void igmp_join(tb_ud_rx_t *r, const tb_stream_cfg_t *cfg)
{
	struct ip_mreqn m;

	memset(&m, 0, sizeof(m));
	memcpy(&m.imr_multiaddr, r->dev.mgid.raw + 12, 4);
	m.imr_ifindex = r->dev.v.ifindex;
	if (cfg->interface[0] &&
	    inet_pton(AF_INET, cfg->interface, &m.imr_address) != 1)
		m.imr_ifindex = (int)if_nametoindex(cfg->interface);
	else if (cfg->interface[0])
		m.imr_ifindex = 0;
	r->igmp_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (r->igmp_fd >= 0 &&
	    setsockopt(r->igmp_fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof(m)) == 0)
		return;
	tb_warn("ud: stream '%s': IGMP join of %s on interface %d failed (%s); "
		"switches with IGMP snooping may not forward the group",
		cfg->name, cfg->group.host, m.imr_ifindex, strerror(errno));
	if (r->igmp_fd >= 0)
		close(r->igmp_fd);
	r->igmp_fd = -1;
}

static int rx_verbs(tb_ud_rx_t *r)
{
	tb_ud_dev_t *d = &r->dev;
	size_t size;
	int e;

	r->stride = (TB_UD_GRH + d->path_mtu + 63u) & ~63u;
	size = (size_t)TB_UD_RECVS * r->stride;
	if (posix_memalign((void **)&r->bufs, 4096, size) != 0) {
		r->bufs = NULL;
		return tb_error_set(TB_ENOMEM, "ud: no memory for receive buffers");
	}
	memset(r->bufs, 0, size);
	r->mr = ibv_reg_mr(d->v.pd, r->bufs, size, IBV_ACCESS_LOCAL_WRITE);
	if (!r->mr)
		return tb_error_sys(errno, "ud: %s: register receive buffers", d->v.name);
	r->cq = ibv_create_cq(d->v.ctx, TB_UD_RECVS + 1, NULL, NULL, 0);
	if (!r->cq)
		return tb_error_sys(errno, "ud: %s: ibv_create_cq", d->v.name);
	r->qp = ud_qp(d, r->cq, 1, TB_UD_RECVS, 0, r->qkey, NULL);
	if (!r->qp)
		return TB_ESYS;
	for (int i = 0; i < TB_UD_REPOST; i++) {
		r->rsge[i].length = r->stride;
		r->rsge[i].lkey = r->mr->lkey;
		r->rwr[i].sg_list = &r->rsge[i];
		r->rwr[i].num_sge = 1;
		r->rwr[i].next = i + 1 < TB_UD_REPOST ? &r->rwr[i + 1] : NULL;
	}
	for (uint64_t id = 0; id < TB_UD_RECVS; id++)
		recycle(r, id);
	if (r->wc_errors)
		return tb_error_set(TB_ESYS, "ud: %s: post the receive buffers",
				  d->v.name);
	e = ibv_attach_mcast(r->qp, &d->mgid, 0);
	if (e != 0)
		return tb_error_sys(e, "ud: %s: attach to the group", d->v.name);
	r->attached = 1;
	return 0;
}

static int ud_rx_open(tb_rx_t **out, const tb_stream_cfg_t *cfg)
{
	tb_ud_rx_t *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return tb_error_set(TB_ENOMEM, "ud: out of memory");
	r->igmp_fd = -1;
	tb_dgram_rx_init(&r->dg, cfg->id, cfg->liveness_timeout_ms);
	r->qkey = TB_UD_QKEY(cfg->id);
	rc = dev_open(&r->dev, cfg);
	if (rc < 0) {
		free(r);
		return rc;
	}
	rc = rx_verbs(r);
	if (rc < 0)
		goto fail;
	igmp_join(r, cfg);
	tb_info("ud: stream '%s': subscriber QP %u joined %s on %s port %u",
		cfg->name, r->qp->qp_num, cfg->group.host, r->dev.v.name,
		r->dev.v.port);
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
