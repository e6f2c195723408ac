/*
 * The ud transport on softrdma: a publisher and a subscriber in one process,
 * at the ops level so the test sees the transport's own counts.
 *
 *  - frames arrive in order; one datagram per send without batching, one
 *    per flush or per full datagram with it, and zero-copy posts with
 *    selective signalling that never overflow the send queue;
 *  - messages larger than one datagram are refused at offer (TB_EMSGSIZE);
 *  - heartbeats (only after a quiet interval), END and silence
 *    (TB_PUBLISHER_DEAD);
 *  - datagrams from a raw UD sender (the test's own QP): every malformed
 *    kind is counted and dropped, a wrong or missing immediate too, a gap
 *    gives the exact range, a duplicate and a late datagram are counted;
 *  - forgery from that sender, knowing stream id and epoch: END, a
 *    far-future sequence and epoch + 1, in the old 32-byte layout and in
 *    the new one with a wrong tag, change nothing;
 *  - a send that fails (a bad lkey: the QP leaves RTS) is recovered from:
 *    later datagrams arrive, the loss is told as a gap;
 *  - the group's mtu: a subscriber with smaller buffers than the
 *    publisher's datagrams says so, its receives that complete in error are
 *    reposted or its QP rebuilt, many more times than it has buffers, and
 *    it goes on receiving;
 *  - receive depth from recv_depth, bounded by the device; ring and buffers
 *    from tb_mem_alloc; a flood of rubbish ends each poll after one batch;
 *  - asynchronous events, raised from outside with softrdma-ctl: a QP made
 *    fatal on either end is repaired and the stream goes on; a port that
 *    goes down and comes back is said so on both ends, the subscriber
 *    joins again and is told what was lost; a source GID that moves gives
 *    the publisher a new address handle;
 *  - set-up errors: no device, unknown device, bad GID index, an mtu above
 *    the path MTU, a group that is not multicast.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/clock.h"
#include "bus/error.h"
#include "bus/transport/ud.h"
#include "tests/common/counters.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STREAM 41
#define GROUP "239.7.7.41"
#define TOKEN "ud-unit-token"

static void cfg_for(tb_stream_cfg_t *cfg)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "udtest");
	cfg->id = STREAM;
	cfg->transport = TB_TRANSPORT_UD;
	snprintf(cfg->group.host, sizeof(cfg->group.host), GROUP);
	cfg->group.port = 5041;
	cfg->ring_size = 1 << 20;
	cfg->liveness_timeout_ms = 300;
	snprintf(cfg->token, sizeof(cfg->token), TOKEN);
}

/* -------------------------------------------- what ud asks of verbs */

/* The test stands between ud and the verbs library for two calls, and
 * records what they were asked: ibv_create_qp_ex (through the context
 * ibv_open_device returns) and ibv_create_ah. */
static struct ibv_qp_init_attr_ex created_ex[16];
static int n_created_ex;
static struct ibv_ah_attr ahs[16];
static int n_ahs;
static struct ibv_qp *(*real_create_qp_ex)(struct ibv_context *,
					   struct ibv_qp_init_attr_ex *);

static struct ibv_qp *recording_create_qp_ex(struct ibv_context *ctx,
					     struct ibv_qp_init_attr_ex *ia)
{
	if (n_created_ex < 16)
		created_ex[n_created_ex++] = *ia;
	return real_create_qp_ex(ctx, ia);
}

/* While `refuse_posts` is set, every post is refused (and counted in
 * `refused`), as a provider refuses one to a full queue. */
static int refuse_posts, refused;
static int (*real_post_send)(struct ibv_qp *, struct ibv_send_wr *,
			     struct ibv_send_wr **);

static int refusing_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			      struct ibv_send_wr **bad)
{
	if (refuse_posts) {
		refused++;
		*bad = wr;
		return ENOMEM;
	}
	return real_post_send(qp, wr, bad);
}

struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	static struct ibv_context *(*real)(struct ibv_device *);
	struct ibv_context *ctx;
	struct verbs_context *v;

	if (!real)
		real = (struct ibv_context * (*)(struct ibv_device *))
			dlvsym(RTLD_NEXT, "ibv_open_device", "IBVERBS_1.1");
	ctx = real(dev);
	if (ctx) {
		real_post_send = ctx->ops.post_send;
		ctx->ops.post_send = refusing_post_send;
	}
	v = ctx ? verbs_get_ctx_op(ctx, create_qp_ex) : NULL;
	if (v) {
		real_create_qp_ex = v->create_qp_ex;
		v->create_qp_ex = recording_create_qp_ex;
	}
	return ctx;
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	static struct ibv_ah *(*real)(struct ibv_pd *, struct ibv_ah_attr *);

	if (!real)
		real = (struct ibv_ah * (*)(struct ibv_pd *, struct ibv_ah_attr *))
			dlvsym(RTLD_NEXT, "ibv_create_ah", "IBVERBS_1.1");
	if (n_ahs < 16)
		ahs[n_ahs++] = *attr;
	return real(pd, attr);
}

/* ------------------------------------------------------------- helpers */

struct got {
	uint64_t seq[4096];
	uint32_t len[4096];
	int n;
	int bad;
};

static void on_msg(void *clientd, const tb_msg_t *m)
{
	struct got *g = clientd;
	const uint8_t *p = m->data;

	for (uint32_t i = 0; i < m->len; i++)
		if (p[i] != (uint8_t)m->seq)
			g->bad++;
	if (g->n < 4096) {
		g->seq[g->n] = m->seq;
		g->len[g->n] = m->len;
	}
	g->n++;
}

/* Polls until `want` frames arrived, a condition came, or 3 s passed. */
static int poll_for(tb_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		    struct got *g, int want)
{
	uint64_t end = tb_clock_now_ns() + 3000000000ull;

	while (g->n < want && tb_clock_now_ns() < end) {
		int n = rx->ops->poll(rx, seq, loss, on_msg, g, 64);

		if (n < 0 && n != TB_NOT_CONNECTED)
			return n;
		if (n <= 0)
			sched_yield();
	}
	return g->n;
}

/* Polls once more for a little while: expects nothing, returns what came. */
static int poll_quiet(tb_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		      struct got *g, int ms)
{
	uint64_t end = tb_clock_now_ns() + (uint64_t)ms * 1000000ull;
	int rc = 0;

	while (tb_clock_now_ns() < end && rc >= 0) {
		rc = rx->ops->poll(rx, seq, loss, on_msg, g, 64);
		if (rc == TB_NOT_CONNECTED)
			rc = 0;
		if (rc != 0)
			return rc;
		sched_yield();
	}
	return rc;
}

static uint64_t next_seq;

/* Commits one frame of `len` bytes filled with its sequence, and sends. */
static int publish(tb_tx_t *tx, uint32_t len)
{
	tb_frame_hdr_t *f = tb_ring_claim(&tx->ring, len, next_seq);
	uint64_t from = tx->ring.tail;

	if (!f)
		return TB_EMSGSIZE;
	tb_frame_init(f, len, 1, STREAM, next_seq, tb_clock_now_ns());
	memset(tb_frame_payload(f), (int)(uint8_t)next_seq, len);
	tb_ring_commit(&tx->ring);
	next_seq++;
	return tx->ops->send(tx, from, tx->ring.tail);
}

struct pair {
	tb_stream_cfg_t cfg;
	tb_tx_t *tx;
	tb_rx_t *rx;
	tb_seq_t seq;
	tb_seq_range_t loss;
	struct got *got;
};

static void pair_open(struct pair *p, uint32_t batch_us)
{
	memset(p, 0, sizeof(*p));
	cfg_for(&p->cfg);
	p->cfg.batch_us = batch_us;
	assert_int_equal(tb_ud_rx_ops.open(&p->rx, &p->cfg), 0);
	assert_int_equal(tb_ud_tx_ops.open(&p->tx, &p->cfg, 777), 0);
	tb_seq_init(&p->seq, 0);
	p->got = calloc(1, sizeof(*p->got));
	assert_non_null(p->got);
	next_seq = 1;
}

static void pair_close(struct pair *p)
{
	if (p->tx)
		p->tx->ops->close(p->tx, next_seq - 1);
	if (p->rx)
		p->rx->ops->close(p->rx);
	free(p->got);
}

/* --------------------------------------------------------- publishing */

static void in_order_one_datagram_per_send(void **state)
{
	struct pair p;
	tb_ud_tx_t *u;

	(void)state;
	pair_open(&p, 0);
	u = (tb_ud_tx_t *)p.tx;
	/* before anything arrives the subscriber is not connected */
	assert_int_equal(p.rx->ops->poll(p.rx, &p.seq, &p.loss, on_msg, p.got, 8),
			 TB_NOT_CONNECTED);
	for (int i = 0; i < 100; i++)
		assert_int_equal(publish(p.tx, 24 + (uint32_t)i), 0);
	assert_int_equal(tb_ud_tx_datagrams(u), 100);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 100), 100);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(p.got->seq[i], i + 1);
		assert_int_equal(p.got->len[i], 24 + i);
	}
	assert_int_equal(p.got->bad, 0);
	assert_int_equal(p.rx->ops->epoch(p.rx), 777);
	/* Datagrams of up to 188 bytes (one 256-byte WQE) go inline: the
	 * 64-byte header and one frame of up to 64 payload bytes (96 with
	 * its header, padded to 32); 24..64 are the first 41. */
	assert_int_equal(u->max_inline, TB_UD_INLINE);
	assert_int_equal(TB_UD_INLINE, 188);
	assert_int_equal(tb_ud_tx_inline_posts(u), 41);
	pair_close(&p);
}

static void zero_copy_and_selective_signalling(void **state)
{
	struct pair p;
	tb_ud_tx_t *u;
	uint64_t n;

	(void)state;
	pair_open(&p, 0);
	u = (tb_ud_tx_t *)p.tx;
	/* several send queues' worth, and the ring wraps three times */
	n = 3 * (uint64_t)u->sq_depth + 5;
	if (n < 3 * p.cfg.ring_size / 1000)
		n = 3 * p.cfg.ring_size / 1000;
	assert_true(u->signal_every > 1);
	for (uint64_t i = 0; i < n; i++) {
		assert_int_equal(publish(p.tx, 1000), 0); /* too big for inline */
		if (i % 64 == 63) /* keep the receive ring from running dry */
			assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got,
						  (int)i + 1), (int)i + 1);
	}
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, (int)n), (int)n);
	assert_int_equal(p.got->bad, 0);
	assert_int_equal(u->send_errors, 0);
	assert_int_equal(tb_ud_tx_inline_posts(u), 0);
	assert_int_equal(u->signalled, n / u->signal_every);
	/* the queue filled, and was drained by polling, never overflowing */
	assert_true(u->cq_polls > 0);
	assert_true(u->posted - u->completed <= u->sq_depth);
	pair_close(&p);
}

static void batching_by_size_and_flush(void **state)
{
	struct pair p;
	tb_ud_tx_t *u;
	uint32_t per;

	(void)state;
	pair_open(&p, 1000000); /* a datagram may wait up to 1 s */
	u = (tb_ud_tx_t *)p.tx;
	for (int i = 0; i < 10; i++)
		assert_int_equal(publish(p.tx, 64), 0);
	assert_int_equal(tb_ud_tx_datagrams(u), 0);
	assert_int_equal(poll_quiet(p.rx, &p.seq, &p.loss, p.got, 50), 0);
	assert_int_equal(p.got->n, 0);
	assert_int_equal(p.tx->ops->flush(p.tx), 0);
	assert_int_equal(tb_ud_tx_datagrams(u), 1);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 10), 10);
	/* a full datagram leaves by itself: 160-byte frames, 4032 bytes of
	 * room, so 25 fit and the 26th does not */
	per = (4096 - TB_PACKET_HDR_LEN) / 160;
	for (uint32_t i = 0; i < per; i++)
		assert_int_equal(publish(p.tx, 100), 0);
	assert_int_equal(tb_ud_tx_datagrams(u), 1);
	assert_int_equal(publish(p.tx, 100), 0);
	assert_int_equal(tb_ud_tx_datagrams(u), 2);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 10 + (int)per),
			 10 + (int)per);
	assert_int_equal(((tb_ud_rx_t *)p.rx)->dg.datagrams, 2);
	assert_int_equal(p.tx->ops->flush(p.tx), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 11 + (int)per),
			 11 + (int)per);
	assert_int_equal(p.got->bad, 0);
	pair_close(&p);
}

static void batching_by_time(void **state)
{
	struct pair p;
	tb_ud_tx_t *u;
	struct timespec ts = {0, 3000000};

	(void)state;
	pair_open(&p, 2000); /* 2 ms */
	u = (tb_ud_tx_t *)p.tx;
	assert_int_equal(publish(p.tx, 64), 0);
	assert_int_equal(tb_ud_tx_datagrams(u), 0);
	nanosleep(&ts, NULL);
	/* the next send finds the first frame older than batch_us */
	assert_int_equal(publish(p.tx, 64), 0);
	assert_true(tb_ud_tx_datagrams(u) >= 1);
	assert_int_equal(p.tx->ops->flush(p.tx), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 2), 2);
	pair_close(&p);
}

static void too_large_for_a_datagram(void **state)
{
	struct pair p;
	uint32_t max = tb_packet_max_payload(4096);

	(void)state;
	pair_open(&p, 0);
	assert_int_equal(p.tx->ring.max_frame, max + TB_FRAME_HDR_LEN);
	assert_int_equal(publish(p.tx, max + 1), TB_EMSGSIZE);
	assert_int_equal(publish(p.tx, max), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 1), 1);
	assert_int_equal(p.got->len[0], max);
	assert_int_equal(p.got->bad, 0);
	pair_close(&p);
}

static void heartbeat_end_and_silence(void **state)
{
	struct pair p;
	int rc;

	(void)state;
	pair_open(&p, 0);
	/* a heartbeat alone: connected, next expected is 1 */
	p.tx->ops->beat(p.tx, tb_clock_now_ns(), 0);
	assert_int_equal(poll_quiet(p.rx, &p.seq, &p.loss, p.got, 20), 0);
	assert_int_equal(((tb_ud_rx_t *)p.rx)->dg.heartbeats, 1);
	assert_int_equal(p.seq.expected, 1);
	assert_int_equal(publish(p.tx, 40), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 1), 1);
	/* data since the last beat, then quiet for the settle time: the
	 * heartbeat goes, naming the next sequence */
	p.tx->ops->beat(p.tx, tb_clock_now_ns(), 1);
	assert_int_equal(poll_quiet(p.rx, &p.seq, &p.loss, p.got, 20), 0);
	assert_int_equal(((tb_ud_rx_t *)p.rx)->dg.heartbeats, 2);
	assert_int_equal(((tb_ud_tx_t *)p.tx)->beats_skipped, 0);
	assert_int_equal(p.seq.expected, 2);
	/* silence longer than liveness_timeout_ms */
	rc = poll_quiet(p.rx, &p.seq, &p.loss, p.got, 1000);
	assert_int_equal(rc, TB_PUBLISHER_DEAD);
	/* it speaks again, then closes: END names the last sequence */
	assert_int_equal(publish(p.tx, 40), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 2), 2);
	p.tx->ops->close(p.tx, next_seq - 1);
	p.tx = NULL;
	assert_int_equal(poll_quiet(p.rx, &p.seq, &p.loss, p.got, 500), TB_CLOSED);
	pair_close(&p);
}

/* ---------------------------------------------------- a raw UD sender */

struct raw {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_ah *ah;
	struct ibv_mr *mr;
	uint8_t buf[4096];
};

static void raw_open(struct raw *r)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr ia = {.cap = {8, 1, 1, 1, 0}, .qp_type = IBV_QPT_UD};
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qkey = TB_UD_QKEY(STREAM)};
	struct ibv_ah_attr ah = {.is_global = 1, .port_num = 1};

	assert_non_null(l);
	r->ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	assert_non_null(r->ctx);
	r->pd = ibv_alloc_pd(r->ctx);
	r->cq = ibv_create_cq(r->ctx, 16, NULL, NULL, 0);
	ia.send_cq = ia.recv_cq = r->cq;
	r->qp = ibv_create_qp(r->pd, &ia);
	assert_non_null(r->qp);
	assert_int_equal(ibv_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					       IBV_QP_PORT | IBV_QP_QKEY), 0);
	a.qp_state = IBV_QPS_RTR;
	assert_int_equal(ibv_modify_qp(r->qp, &a, IBV_QP_STATE), 0);
	a.qp_state = IBV_QPS_RTS;
	assert_int_equal(ibv_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
	assert_int_equal(tb_ud_mgid(GROUP, &ah.grh.dgid), 0);
	ah.grh.hop_limit = 1;
	r->ah = ibv_create_ah(r->pd, &ah);
	assert_non_null(r->ah);
	r->mr = ibv_reg_mr(r->pd, r->buf, sizeof(r->buf), 0);
	assert_non_null(r->mr);
}

static void raw_close(struct raw *r)
{
	ibv_destroy_ah(r->ah);
	ibv_destroy_qp(r->qp);
	ibv_dereg_mr(r->mr);
	ibv_destroy_cq(r->cq);
	ibv_dealloc_pd(r->pd);
	ibv_close_device(r->ctx);
}

/* Sends buf[0..len) to the group; imm_mode 0 = first_seq (correct),
 * 1 = no immediate, 2 = a wrong one. */
static void raw_send(struct raw *r, uint32_t len, int imm_mode)
{
	struct ibv_sge sge = {(uintptr_t)r->buf, len, r->mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	const tb_packet_hdr_t *h = (const tb_packet_hdr_t *)r->buf;
	struct ibv_wc wc;
	uint64_t end = tb_clock_now_ns() + 2000000000ull;
	int n;

	wr.imm_data = htonl(len >= TB_PACKET_HDR_LEN ? (uint32_t)h->first_seq : 0);
	if (imm_mode == 1)
		wr.opcode = IBV_WR_SEND;
	if (imm_mode == 2)
		wr.imm_data = htonl(ntohl(wr.imm_data) + 1);
	wr.wr.ud.ah = r->ah;
	wr.wr.ud.remote_qpn = TB_UD_MCAST_QPN;
	wr.wr.ud.remote_qkey = TB_UD_QKEY(STREAM);
	assert_int_equal(ibv_post_send(r->qp, &wr, &bad), 0);
	while ((n = ibv_poll_cq(r->cq, 1, &wc)) == 0 && tb_clock_now_ns() < end)
		sched_yield();
	assert_int_equal(n, 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
}

/* Signs the `len`-byte datagram in r->buf with `token`'s key, as it
 * stands. */
static uint32_t raw_sign_as(struct raw *r, const char *token, uint32_t len)
{
	tb_packet_hdr_t *h = (tb_packet_hdr_t *)r->buf;
	tb_dgram_auth_t auth;
	tb_dgram_key_t key;

	tb_dgram_auth_init(&auth, token, h->stream_id);
	tb_dgram_auth_key(&auth, h->epoch, &key);
	tb_dgram_auth_sign(&key, h, r->buf + TB_PACKET_HDR_LEN,
			   len - TB_PACKET_HDR_LEN);
	return len;
}

static uint64_t raw_nonce;

/* Builds a datagram of `count` frames of 8 payload bytes from `first`,
 * numbered and signed as a publisher with the token would. */
static uint32_t raw_build(struct raw *r, uint8_t flags, uint64_t epoch,
			  uint64_t first, uint16_t count)
{
	tb_packet_hdr_t *h = (tb_packet_hdr_t *)r->buf;
	uint32_t len = TB_PACKET_HDR_LEN;

	for (uint16_t i = 0; i < count; i++) {
		tb_frame_hdr_t *f = (tb_frame_hdr_t *)(r->buf + len);

		tb_frame_init(f, 8, 1, STREAM, first + i, 1);
		memset(tb_frame_payload(f), (int)(uint8_t)(first + i), 8);
		len += tb_frame_space(TB_FRAME_HDR_LEN + 8);
	}
	tb_packet_init(h, flags, STREAM, epoch, first, count, len);
	h->mtu = 4096;
	h->since = epoch * 1000;
	h->nonce = raw_nonce++;
	return raw_sign_as(r, TOKEN, len);
}

static void malformed_datagrams_counted_and_dropped(void **state)
{
	tb_stream_cfg_t cfg;
	tb_rx_t *rx;
	tb_ud_rx_t *u;
	tb_seq_t seq;
	tb_seq_range_t loss;
	struct raw r;
	struct got *g = calloc(1, sizeof(*g));
	tb_packet_hdr_t *h;
	tb_frame_hdr_t *f;
	uint32_t len;

	(void)state;
	cfg_for(&cfg);
	assert_int_equal(tb_ud_rx_ops.open(&rx, &cfg), 0);
	u = (tb_ud_rx_t *)rx;
	tb_seq_init(&seq, 0);
	raw_open(&r);
	h = (tb_packet_hdr_t *)r.buf;
	f = (tb_frame_hdr_t *)(r.buf + TB_PACKET_HDR_LEN);

	/* a good one first: epoch 9, sequence 1 */
	raw_send(&r, raw_build(&r, 0, 9, 1, 1), 0);
	assert_int_equal(poll_for(rx, &seq, &loss, g, 1), 1);

	len = raw_build(&r, 0, 9, 2, 2);
	raw_send(&r, 10, 0);                                /* short */
	h->magic = 0x1234;
	raw_send(&r, len, 0);                               /* magic */
	raw_build(&r, 0, 9, 2, 2);
	h->version = 9;
	raw_send(&r, len, 0);                               /* version */
	raw_build(&r, 0, 9, 2, 2);
	raw_send(&r, len - 8, 0);                           /* length */
	raw_build(&r, 0, 9, 2, 2);
	h->flags = 0x80;
	raw_send(&r, len, 0);                               /* flags */
	raw_build(&r, 0, 9, 2, 2);
	h->count = 0;
	raw_send(&r, len, 0);                               /* count */
	raw_build(&r, 0, 9, 2, 2);
	f->length = 4000;
	raw_sign_as(&r, TOKEN, len);  /* a publisher's bug, not a forgery */
	raw_send(&r, len, 0);                               /* frame */
	raw_build(&r, 0, 9, 2, 2);
	h->stream_id = STREAM + 1;
	raw_send(&r, len, 0);                               /* stream */
	raw_build(&r, 0, 9, 2, 2);
	f->seq = 7;
	raw_sign_as(&r, TOKEN, len);
	raw_send(&r, len, 0);                               /* frame seq */
	raw_build(&r, 0, 9, 2, 2);
	raw_send(&r, len, 1);                               /* no immediate */
	raw_send(&r, len, 2);                               /* wrong immediate */
	raw_build(&r, 0, 0, 2, 2);
	raw_send(&r, len, 0);                               /* epoch 0 */
	assert_int_equal(poll_quiet(rx, &seq, &loss, g, 50), 0);
	assert_int_equal(g->n, 1);
	assert_int_equal(u->dg.faults[TB_PACKET_SHORT], 1);
	assert_int_equal(u->dg.faults[TB_PACKET_BAD_MAGIC], 1);
	assert_int_equal(u->dg.faults[TB_PACKET_BAD_VERSION], 1);
	assert_int_equal(u->dg.faults[TB_PACKET_BAD_LENGTH], 1);
	assert_int_equal(u->dg.faults[TB_PACKET_BAD_FLAGS], 1);
	assert_int_equal(u->dg.faults[TB_PACKET_BAD_COUNT], 1);
	assert_int_equal(u->dg.faults[TB_PACKET_BAD_FRAME], 1);
	assert_int_equal(u->dg.faults[TB_PACKET_WRONG_STREAM], 1);
	assert_int_equal(u->dg.faults[TB_PACKET_BAD_SEQ], 1);
	assert_int_equal(u->bad_imm, 2);
	assert_int_equal(u->dg.stale_epoch, 1);
	assert_int_equal(u->dg.forged, 0);

	/* the stream goes on: 2..3 arrive; 6..7 reveal the gap 4..5 */
	raw_send(&r, raw_build(&r, 0, 9, 2, 2), 0);
	assert_int_equal(poll_for(rx, &seq, &loss, g, 3), 3);
	raw_send(&r, raw_build(&r, 0, 9, 6, 2), 0);
	assert_int_equal(poll_quiet(rx, &seq, &loss, g, 50), TB_GAP);
	assert_int_equal(loss.first, 4);
	assert_int_equal(loss.last, 5);
	assert_int_equal(poll_for(rx, &seq, &loss, g, 5), 5);
	/* 4..5 late: counted as reordered; 6..7 again: duplicate */
	raw_send(&r, raw_build(&r, 0, 9, 4, 2), 0);
	raw_send(&r, raw_build(&r, 0, 9, 6, 2), 0);
	assert_int_equal(poll_quiet(rx, &seq, &loss, g, 50), 0);
	assert_int_equal(u->dg.reordered, 1);
	assert_int_equal(u->dg.duplicates, 1);
	/* a heartbeat ahead of what arrived: the lost tail 8..9 */
	raw_send(&r, raw_build(&r, TB_PACKET_F_HEARTBEAT, 9, 10, 0), 0);
	assert_int_equal(poll_quiet(rx, &seq, &loss, g, 50), TB_GAP);
	assert_int_equal(loss.first, 8);
	assert_int_equal(loss.last, 9);
	/* a new epoch restarts the stream */
	raw_send(&r, raw_build(&r, 0, 10, 1, 1), 0);
	assert_int_equal(poll_quiet(rx, &seq, &loss, g, 50), TB_NEW_EPOCH);
	assert_int_equal(poll_for(rx, &seq, &loss, g, 6), 6);
	assert_int_equal(rx->ops->epoch(rx), 10);
	for (int i = 0; i < 5; i++)
		assert_int_equal(g->seq[i], (uint64_t)i + 1 + (i >= 3 ? 2 : 0));
	assert_int_equal(g->seq[5], 1);
	assert_int_equal(g->bad, 0);
	raw_close(&r);
	rx->ops->close(rx);
	free(g);
}

/* ------------------------------------------------------------ forgery */

enum forgery { FORGE_END, FORGE_FAR_SEQ, FORGE_NEXT_EPOCH };

/* The forgery in the 32-byte layout of packet version 1. */
static uint32_t forge_v1(struct raw *r, enum forgery kind, uint64_t epoch,
			 uint64_t next)
{
	uint32_t stream = STREAM, len = 32;
	uint64_t first = kind == FORGE_FAR_SEQ ? next + 1000000000ull : next;
	uint16_t count = kind == FORGE_END ? 0 : 1;
	uint8_t flags = kind == FORGE_END ? TB_PACKET_F_END : 0;

	memset(r->buf, 0, 256);
	if (kind == FORGE_NEXT_EPOCH) {
		epoch++;
		first = 1;
	}
	if (count) {
		tb_frame_init((tb_frame_hdr_t *)(r->buf + 32), 8, 1, STREAM,
			      first, 1);
		len += tb_frame_space(TB_FRAME_HDR_LEN + 8);
	}
	r->buf[0] = 'T';
	r->buf[1] = 'P';
	r->buf[2] = 1;
	r->buf[3] = flags;
	memcpy(r->buf + 4, &stream, 4);
	memcpy(r->buf + 8, &epoch, 8);
	memcpy(r->buf + 16, &first, 8);
	memcpy(r->buf + 24, &count, 2);
	memcpy(r->buf + 28, &len, 4);
	return len;
}

/* The forgery in the current layout, tagged under a guessed token. */
static uint32_t forge_v2(struct raw *r, enum forgery kind, uint64_t epoch,
			 uint64_t next)
{
	uint32_t len;

	if (kind == FORGE_END)
		len = raw_build(r, TB_PACKET_F_END, epoch, next, 0);
	else if (kind == FORGE_FAR_SEQ)
		len = raw_build(r, 0, epoch, next + 1000000000ull, 1);
	else
		len = raw_build(r, 0, epoch + 1, 1, 1);
	((tb_packet_hdr_t *)r->buf)->since = tb_clock_realtime_ns();
	return raw_sign_as(r, "guessed-token", len);
}

/* A live stream, the forgery in both layouts from a raw QP (with the
 * immediate right), then more of the stream: all of it in order and no
 * condition. */
static void forgery_changes_nothing(enum forgery kind)
{
	struct pair p;
	struct raw r;
	tb_ud_rx_t *u;
	int rc;

	pair_open(&p, 0);
	u = (tb_ud_rx_t *)p.rx;
	raw_open(&r);
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish(p.tx, 24), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 3), 3);
	raw_send(&r, forge_v1(&r, kind, 777, 4), 0);
	raw_send(&r, forge_v2(&r, kind, 777, 4), 0);
	assert_int_equal(poll_quiet(p.rx, &p.seq, &p.loss, p.got, 50), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish(p.tx, 24), 0);
	rc = poll_for(p.rx, &p.seq, &p.loss, p.got, 6);
	assert_int_equal(rc, 6);
	for (int i = 0; i < 6; i++)
		assert_int_equal(p.got->seq[i], i + 1);
	assert_int_equal(p.got->bad, 0);
	assert_int_equal(p.rx->ops->epoch(p.rx), 777);
	assert_int_equal(p.seq.gaps, 0);
	assert_int_equal(u->dg.faults[TB_PACKET_BAD_VERSION], 1);
	assert_int_equal(u->dg.forged, 1);
	raw_close(&r);
	pair_close(&p);
}

static void one_forged_end_no_longer_stops_subscribers(void **state)
{
	(void)state;
	forgery_changes_nothing(FORGE_END);
}

static void forged_far_sequence_no_longer_drops_the_stream(void **state)
{
	(void)state;
	forgery_changes_nothing(FORGE_FAR_SEQ);
}

static void forged_next_epoch_no_longer_hijacks_the_stream(void **state)
{
	(void)state;
	forgery_changes_nothing(FORGE_NEXT_EPOCH);
}

/* -------------------------------------------------- faults and limits */

/* A send that completes in error takes the data QP out of RTS (softrdma:
 * ERR; a NIC: SQE).  The heartbeat thread's look at it flags it, the next
 * send brings it back, and the datagrams after it arrive; those flushed
 * meanwhile are told as a gap by the heartbeat. */
static void failed_send_is_recovered_from(void **state)
{
	struct pair p;
	tb_ud_tx_t *u;
	uint32_t lkey;
	uint64_t until;
	int rc;

	(void)state;
	pair_open(&p, 0);
	u = (tb_ud_tx_t *)p.tx;
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish(p.tx, 200), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 3), 3);
	/* Sequence 4 with a bad lkey: a local protection error. */
	lkey = u->sge[1].lkey;
	u->sge[1].lkey = lkey ^ 0x5a5a5a;
	assert_int_equal(publish(p.tx, 200), 0);
	u->sge[1].lkey = lkey;
	/* 5..7 go to a QP that only flushes. */
	for (int i = 0; i < 3; i++)
		publish(p.tx, 200);
	/* The device fails the WR when it runs it (softrdma's send engine,
	 * as a NIC, after the post returned); the heartbeat thread sees the
	 * QP out of RTS at the first beat after that. */
	until = tb_clock_now_ns() + 2000000000ull;
	while (!tb_atomic_load_relaxed(&u->broken) && tb_clock_now_ns() < until) {
		p.tx->ops->beat(p.tx, tb_clock_now_ns(), next_seq - 1);
		usleep(1000);
	}
	assert_int_equal(tb_atomic_load_relaxed(&u->broken), 1);
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish(p.tx, 200), 0);
	assert_int_equal(u->recoveries, 1);
	assert_true(u->send_errors >= 1);
	rc = poll_quiet(p.rx, &p.seq, &p.loss, p.got, 200);
	assert_int_equal(rc, TB_GAP);
	assert_int_equal(p.loss.first, 4);
	assert_int_equal(p.loss.last, 7);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 6), 6);
	assert_int_equal(p.got->seq[3], 8);
	assert_int_equal(p.got->seq[5], 10);
	assert_int_equal(p.got->bad, 0);
	pair_close(&p);
}

/* The fast post (one small frame, inline, unsignalled) into a QP that went
 * to the error state with no heartbeat to tell: the flushes carry numbers
 * above the last repair's, so the publisher's own reaping at a group's end
 * flags the QP, the next send brings it back, and what was flushed comes
 * back as a gap. */
static void failed_fast_post_seen_by_its_group(void **state)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	struct pair p;
	tb_ud_tx_t *u;
	uint64_t first_lost, n;
	int rc;

	(void)state;
	pair_open(&p, 0);
	u = (tb_ud_tx_t *)p.tx;
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish(p.tx, 24), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 3), 3);
	assert_int_equal(tb_ud_tx_inline_posts(u), 3);
	assert_int_equal(ibv_modify_qp(u->qp, &a, IBV_QP_STATE), 0);
	/* All flushed; a group's signalled post reaps without waiting, so
	 * the flushes are seen at the end of this group or the next. */
	first_lost = next_seq;
	for (n = 0; n < 2 * (uint64_t)u->signal_every + 1 &&
		    !tb_atomic_load_relaxed(&u->broken); n++)
		publish(p.tx, 24);
	assert_int_equal(tb_atomic_load_relaxed(&u->broken), 1);
	assert_int_equal(u->recoveries, 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish(p.tx, 24), 0);
	assert_int_equal(u->recoveries, 1);
	assert_true(u->send_errors >= 1);
	assert_true(u->posted - u->completed + u->left - 1 < u->sq_depth);
	rc = poll_quiet(p.rx, &p.seq, &p.loss, p.got, 200);
	assert_int_equal(rc, TB_GAP);
	assert_int_equal(p.loss.first, first_lost);
	assert_int_equal(p.loss.last, first_lost + n - 1);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 6), 6);
	assert_int_equal(p.got->seq[5], first_lost + n + 2);
	assert_int_equal(p.got->bad, 0);
	pair_close(&p);
}

/* Small frames, many send queues' worth: every one takes the fast post,
 * one in each group of signal_every is signalled, and the queue's bound
 * holds after every send (ud.h: a group is never longer than the room). */
static void fast_posts_keep_the_queue_bound(void **state)
{
	struct pair p;
	tb_ud_tx_t *u;
	uint64_t n;

	(void)state;
	pair_open(&p, 0);
	u = (tb_ud_tx_t *)p.tx;
	n = 8 * (uint64_t)u->sq_depth + 3;
	for (uint64_t i = 0; i < n; i++) {
		assert_int_equal(publish(p.tx, 24), 0);
		assert_true(u->left >= 1 && u->left <= u->signal_every);
		assert_true(u->posted - u->completed + u->left - 1 < u->sq_depth);
		if (i % 64 == 63)
			assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got,
						  (int)i + 1), (int)i + 1);
	}
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, (int)n), (int)n);
	assert_int_equal(p.got->bad, 0);
	assert_int_equal(tb_ud_tx_inline_posts(u), n);
	assert_int_equal(tb_ud_tx_datagrams(u), n);
	assert_true(u->signalled >= n / u->signal_every);
	assert_int_equal(u->send_errors, 0);
	pair_close(&p);
}

/* A subscriber whose buffers hold 1024-byte datagrams (its group mtu) and
 * a publisher that sends 2000-byte ones: each such receive completes in
 * error (softrdma also puts the QP in ERR).  Many more of them than there
 * are buffers, and the subscriber still receives what fits, told the
 * loss, and says why once. */
static void receives_in_error_never_silence_the_subscriber(void **state)
{
	tb_stream_cfg_t cfg;
	tb_tx_t *tx;
	tb_rx_t *rx;
	tb_ud_rx_t *r;
	tb_seq_t seq;
	tb_seq_range_t loss;
	struct got *g = calloc(1, sizeof(*g));
	int rc, gap = 0;
	uint64_t until;

	(void)state;
	assert_non_null(g);
	cfg_for(&cfg);
	cfg.mtu = 1024;
	cfg.recv_depth = 256;
	assert_int_equal(tb_ud_rx_ops.open(&rx, &cfg), 0);
	r = (tb_ud_rx_t *)rx;
	assert_int_equal(r->depth, 256);
	assert_int_equal(r->stride, 1088); /* 40 + 1024, to 64 */
	cfg_for(&cfg); /* the publisher: the port's 4096 */
	assert_int_equal(tb_ud_tx_ops.open(&tx, &cfg, 555), 0);
	tb_seq_init(&seq, 0);
	next_seq = 1;
	assert_int_equal(publish(tx, 64), 0);
	assert_int_equal(poll_for(rx, &seq, &loss, g, 1), 1);
	assert_int_equal(r->dg.mtu_over, 1);
	/* More receives in error than there are buffers: datagrams too large,
	 * one a millisecond, polled for in between (one that comes while the
	 * QP is being made anew is lost without a completion). */
	until = tb_clock_now_ns() + 10000000000ull;
	while (r->wc_errors < 300 && tb_clock_now_ns() < until) {
		assert_int_equal(publish(tx, 2000), 0);
		for (int k = 0; k < 10; k++) {
			rx->ops->poll(rx, &seq, &loss, on_msg, g, 64);
			usleep(100);
		}
	}
	assert_true(r->wc_errors >= 300);
	assert_true(r->rebuilds >= 2);
	/* Then small ones again: they arrive, after the gap. */
	until = tb_clock_now_ns() + 3000000000ull;
	while (g->n < 2 && tb_clock_now_ns() < until) {
		assert_int_equal(publish(tx, 64), 0);
		rc = rx->ops->poll(rx, &seq, &loss, on_msg, g, 64);
		if (rc == TB_GAP)
			gap++;
		usleep(2000);
	}
	assert_true(g->n >= 2);
	assert_true(gap >= 1);
	assert_true(r->rebuilds >= 1);
	assert_int_equal(g->bad, 0);
	tx->ops->close(tx, next_seq - 1);
	rx->ops->close(rx);
	free(g);
}

/* recv_depth buffers, bounded by the device (softrdma: 4096 WRs a
 * queue); the QP holds that many receives. */
static void receive_depth_from_config_bounded_by_the_device(void **state)
{
	tb_stream_cfg_t cfg;
	tb_rx_t *rx;
	tb_ud_rx_t *r;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	static const uint32_t ask[] = {0, 300, 1u << 20};
	static const uint32_t got[] = {TB_UD_RECVS, 300, 4096};

	(void)state;
	for (int i = 0; i < 3; i++) {
		cfg_for(&cfg);
		cfg.recv_depth = ask[i];
		assert_int_equal(tb_ud_rx_ops.open(&rx, &cfg), 0);
		r = (tb_ud_rx_t *)rx;
		assert_int_equal(r->depth, got[i]);
		/* The QP holds at least that many (a device may round its
		 * queues up: softrdma, as mlx5, to a power of two). */
		assert_int_equal(ibv_query_qp(r->qp, &a, IBV_QP_CAP, &ia), 0);
		assert_true(ia.cap.max_recv_wr >= got[i]);
		assert_true(r->buf_mem.size >= (size_t)got[i] * r->stride);
		rx->ops->close(rx);
	}
	assert_int_equal(TB_UD_RECVS, 4096);
}

/* Ring, slab and receive buffers come from tb_mem_alloc, on the node of
 * the core that uses them. */
static void memory_from_the_ring_allocator_on_the_right_node(void **state)
{
	struct pair p;
	tb_ud_tx_t *u;
	tb_ud_rx_t *r;
	int node = tb_mem_node_of_core(0);

	(void)state;
	memset(&p, 0, sizeof(p));
	cfg_for(&p.cfg);
	p.cfg.publisher_core = 0;
	p.cfg.subscriber_core = 0;
	assert_int_equal(tb_ud_rx_ops.open(&p.rx, &p.cfg), 0);
	assert_int_equal(tb_ud_tx_ops.open(&p.tx, &p.cfg, 9), 0);
	p.got = calloc(1, sizeof(*p.got));
	u = (tb_ud_tx_t *)p.tx;
	r = (tb_ud_rx_t *)p.rx;
	assert_ptr_equal(p.tx->ring.base, u->ring_mem.addr);
	assert_true(u->ring_mem.size >= p.cfg.ring_size);
	assert_ptr_equal(u->slab, u->slab_mem.addr);
	assert_ptr_equal(r->bufs, r->buf_mem.addr);
	if (node >= 0) {
		assert_int_equal(u->ring_mem.numa_node, node);
		assert_int_equal(r->buf_mem.numa_node, node);
	}
	next_seq = 1;
	tb_seq_init(&p.seq, 0);
	assert_int_equal(publish(p.tx, 64), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 1), 1);
	pair_close(&p);
}

/* A flood of datagrams that deliver nothing (here: forged) ends each poll
 * after one batch of completions: the caller gets control back. */
static void rubbish_ends_the_poll_after_one_batch(void **state)
{
	struct pair p;
	struct raw r;
	tb_ud_rx_t *u;
	int rc;

	(void)state;
	pair_open(&p, 0);
	u = (tb_ud_rx_t *)p.rx;
	raw_open(&r);
	assert_int_equal(publish(p.tx, 24), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 1), 1);
	for (int i = 0; i < 3 * TB_UD_POLL; i++)
		raw_send(&r, forge_v2(&r, FORGE_FAR_SEQ, 777, 2), 0);
	rc = p.rx->ops->poll(p.rx, &p.seq, &p.loss, on_msg, p.got, 64);
	assert_int_equal(rc, 0);
	assert_int_equal(u->dg.forged, TB_UD_POLL);
	rc = p.rx->ops->poll(p.rx, &p.seq, &p.loss, on_msg, p.got, 64);
	assert_int_equal(u->dg.forged, 2 * TB_UD_POLL);
	assert_int_equal(publish(p.tx, 24), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 2), 2);
	assert_int_equal(u->dg.forged, 3 * TB_UD_POLL);
	raw_close(&r);
	pair_close(&p);
}

/* ---------------------------------------------------- asynchronous events */

/* Runs softrdma-ctl on this test's fabric; 0 when it exited 0. */
static int ctl(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int ctl(const char *fmt, ...)
{
	const char *b = getenv("TB_BUILD");
	char args[256], cmd[PATH_MAX + 512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s/softrdma/softrdma-ctl -f %s %s >/dev/null",
		 b && *b ? b : "build", getenv("SOFTRDMA_FABRIC"), args);
	return system(cmd);
}

/* Beats (the heartbeat thread's work, done here) until `flag` is set or
 * two seconds pass. */
static void beat_until(tb_tx_t *tx, _Atomic int *flag)
{
	uint64_t until = tb_clock_now_ns() + 2000000000ull;

	while (!tb_atomic_load_relaxed(flag) && tb_clock_now_ns() < until) {
		tx->ops->beat(tx, tb_clock_now_ns(), next_seq - 1);
		usleep(1000);
	}
}

/* Idle polls for `ms` (the subscriber reads events when idle). */
static int idle_for(struct pair *p, int ms)
{
	return poll_quiet(p->rx, &p->seq, &p->loss, p->got, ms);
}

/* Polls the subscriber in 10 ms steps until `cond` holds, for at most 5 s:
 * an asynchronous event reaches the transport when the machine lets its
 * thread run, which under the sanitizers on a loaded host is not within
 * any fixed few milliseconds. */
#define IDLE_UNTIL(p, cond)                                                  \
	do {                                                                 \
		for (int ms_ = 0; ms_ < 5000 && !(cond); ms_ += 10)          \
			idle_for((p), 10);                                   \
	} while (0)

static void fatal_qp_on_the_publisher_is_repaired(void **state)
{
	struct pair p;
	tb_ud_tx_t *u;

	(void)state;
	pair_open(&p, 0);
	u = (tb_ud_tx_t *)p.tx;
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish(p.tx, 200), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 3), 3);
	assert_int_equal(ctl("qp-fatal %u", u->qp->qp_num), 0);
	beat_until(p.tx, &u->broken);
	assert_int_equal(tb_atomic_load_relaxed(&u->broken), 1);
	assert_true(u->events >= 1);
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish(p.tx, 200), 0);
	assert_int_equal(u->recoveries, 1);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 6), 6);
	assert_int_equal(p.got->seq[5], 6);
	assert_int_equal(p.got->bad, 0);
	pair_close(&p);
}

static void fatal_qp_on_the_subscriber_is_rebuilt(void **state)
{
	struct pair p;
	tb_ud_rx_t *r;

	(void)state;
	pair_open(&p, 0);
	r = (tb_ud_rx_t *)p.rx;
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish(p.tx, 200), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 3), 3);
	assert_int_equal(ctl("qp-fatal %u", r->qp->qp_num), 0);
	IDLE_UNTIL(&p, r->rebuilds >= 1);
	assert_true(r->rebuilds >= 1);
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish(p.tx, 200), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 6), 6);
	assert_int_equal(p.got->seq[5], 6);
	assert_int_equal(p.got->bad, 0);
	pair_close(&p);
}

static void port_down_then_up_is_told_and_joined_again(void **state)
{
	struct pair p;
	tb_ud_tx_t *u;
	tb_ud_rx_t *r;
	int rc;

	(void)state;
	pair_open(&p, 0);
	u = (tb_ud_tx_t *)p.tx;
	r = (tb_ud_rx_t *)p.rx;
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish(p.tx, 200), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 3), 3);
	assert_int_equal(ctl("port %d down", (int)getpid()), 0);
	IDLE_UNTIL(&p, r->port_down == 1);
	assert_int_equal(r->port_down, 1);
	p.tx->ops->beat(p.tx, tb_clock_now_ns(), next_seq - 1);
	assert_int_equal(u->port_down, 1);
	/* Nothing leaves a port that is down: 4 and 5 are lost. */
	for (int i = 0; i < 2; i++)
		publish(p.tx, 200);
	assert_int_equal(ctl("port %d up", (int)getpid()), 0);
	IDLE_UNTIL(&p, r->port_down == 0 && r->rebuilds >= 1);
	assert_int_equal(r->port_down, 0);
	assert_true(r->rebuilds >= 1);
	p.tx->ops->beat(p.tx, tb_clock_now_ns(), next_seq - 1);
	assert_int_equal(u->port_down, 0);
	/* The heartbeat names 6: the loss is told, then the stream goes on. */
	rc = poll_quiet(p.rx, &p.seq, &p.loss, p.got, 500);
	assert_int_equal(rc, TB_GAP);
	assert_int_equal(p.loss.first, 4);
	assert_int_equal(p.loss.last, 5);
	for (int i = 0; i < 2; i++)
		assert_int_equal(publish(p.tx, 200), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 5), 5);
	assert_int_equal(p.got->seq[4], 7);
	pair_close(&p);
}

static void moved_source_gid_gets_a_new_address_handle(void **state)
{
	struct pair p;
	tb_ud_tx_t *u;
	int from;

	(void)state;
	pair_open(&p, 0);
	u = (tb_ud_tx_t *)p.tx;
	from = u->dev.v.gid_index;
	assert_int_equal(publish(p.tx, 200), 0);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 1), 1);
	/* The IPv4 GID leaves its index for another. */
	assert_int_equal(ctl("gid %d %d :: none", (int)getpid(), from), 0);
	assert_int_equal(ctl("gid %d 5 ::ffff:127.0.0.1 v2", (int)getpid()), 0);
	beat_until(p.tx, &u->readdress);
	assert_int_equal(u->dev.v.gid_index, 5);
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish(p.tx, 200), 0);
	assert_int_equal(u->readdresses, 1);
	assert_int_equal(poll_for(p.rx, &p.seq, &p.loss, p.got, 4), 4);
	assert_int_equal(p.got->seq[3], 4);
	pair_close(&p);
}

/* ------------------------------------------------- the verbs asked for */

/* Every ud QP through ibv_create_qp_ex with the PD and SEND_WITH_IMM as
 * its only send operation (a provider then sizes a WQE for it alone); the
 * data QP asks for 188 bytes inline (one 256-byte WQE), two SGEs, its
 * send queue; the heartbeat QP nothing inline; the subscriber's QP its
 * receive depth.  Address handles carry the stream's traffic class. */
static void queue_pairs_and_address_handles_as_asked(void **state)
{
	struct pair p;
	tb_ud_tx_t *u;
	tb_ud_rx_t *r;
	int data = -1, beat = -1, recv = -1;

	(void)state;
	n_created_ex = n_ahs = 0;
	pair_open(&p, 0);
	u = (tb_ud_tx_t *)p.tx;
	r = (tb_ud_rx_t *)p.rx;
	assert_int_equal(n_created_ex, 3);
	for (int i = 0; i < n_created_ex; i++) {
		const struct ibv_qp_init_attr_ex *x = &created_ex[i];

		assert_int_equal(x->comp_mask, IBV_QP_INIT_ATTR_PD |
						IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
		assert_true(x->send_ops_flags == IBV_QP_EX_WITH_SEND_WITH_IMM);
		assert_int_equal(x->qp_type, IBV_QPT_UD);
		if (x->cap.max_recv_wr > 1)
			recv = i;
		else if (x->cap.max_inline_data)
			data = i;
		else
			beat = i;
	}
	assert_true(data >= 0 && beat >= 0 && recv >= 0);
	assert_int_equal(created_ex[data].cap.max_inline_data, 188);
	assert_int_equal(created_ex[data].cap.max_send_sge, 2);
	assert_int_equal(created_ex[data].cap.max_send_wr, u->sq_depth);
	assert_int_equal(created_ex[beat].cap.max_send_wr, 2);
	assert_int_equal(created_ex[recv].cap.max_recv_wr, r->depth);
	assert_int_equal(u->max_inline, 188);
	/* The data's and the heartbeat's address handles. */
	assert_int_equal(n_ahs, 2);
	for (int i = 0; i < n_ahs; i++) {
		assert_int_equal(ahs[i].is_global, 1);
		assert_int_equal(ahs[i].grh.traffic_class, 106);
		assert_int_equal(ahs[i].grh.hop_limit, 1);
		assert_int_equal(ahs[i].grh.sgid_index, u->dev.v.gid_index);
		assert_memory_equal(ahs[i].grh.dgid.raw, u->dev.mgid.raw, 16);
	}
	pair_close(&p);
	/* rdma_traffic_class is the stream's. */
	n_ahs = 0;
	memset(&p, 0, sizeof(p));
	cfg_for(&p.cfg);
	p.cfg.rdma_traffic_class = 46 << 2;
	assert_int_equal(tb_ud_tx_ops.open(&p.tx, &p.cfg, 5), 0);
	assert_int_equal(n_ahs, 2);
	assert_int_equal(ahs[0].grh.traffic_class, 184);
	assert_int_equal(ahs[1].grh.traffic_class, 184);
	p.tx->ops->close(p.tx, 0);
}

/* Drops CAP_IPC_LOCK, so that RLIMIT_MEMLOCK applies to this process. */
static void drop_cap_ipc_lock(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d) != 0)
		_exit(90);
	d[0].effective &= ~(1u << CAP_IPC_LOCK);
	d[0].permitted &= ~(1u << CAP_IPC_LOCK);
	if (syscall(SYS_capset, &h, d) != 0)
		_exit(91);
}

static int memlock_child(void)
{
	struct rlimit rl = {.rlim_cur = 4 << 20, .rlim_max = 4 << 20};
	tb_stream_cfg_t cfg;
	tb_tx_t *tx;
	tb_rx_t *rx;

	drop_cap_ipc_lock();
	if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
		return 92;
	setenv("TICKBUS_QUIET", "1", 1);
	/* 4096 receive buffers of 4 KiB: 17 MB, over a 4 MiB limit. */
	cfg_for(&cfg);
	if (tb_ud_rx_ops.open(&rx, &cfg) != TB_ENOMEM)
		return 1;
	if (!strstr(tb_errmsg(), "a ud subscriber") ||
	    !strstr(tb_errmsg(), "recv_depth") ||
	    !strstr(tb_errmsg(), "ulimit -l") ||
	    !strstr(tb_errmsg(), "LimitMEMLOCK=") ||
	    !strstr(tb_errmsg(), "CAP_IPC_LOCK"))
		return 2;
	cfg.ring_size = 8 << 20;
	if (tb_ud_tx_ops.open(&tx, &cfg, 1) != TB_ENOMEM ||
	    !strstr(tb_errmsg(), "a ud publisher") ||
	    !strstr(tb_errmsg(), "ulimit -l"))
		return 3;
	/* What fits opens: 256 buffers of 1 KiB, a 1 MiB ring. */
	cfg_for(&cfg);
	cfg.recv_depth = 256;
	cfg.mtu = 1024;
	if (tb_ud_rx_ops.open(&rx, &cfg) != 0)
		return 4;
	rx->ops->close(rx);
	if (tb_ud_tx_ops.open(&tx, &cfg, 1) != 0)
		return 5;
	tx->ops->close(tx, 0);
	return 0;
}

/* Under RLIMIT_MEMLOCK of 4 MiB and without CAP_IPC_LOCK, what would not
 * fit is refused at open, with what to change, not at its first verb. */
static void memlock_budget_is_checked_at_open(void **state)
{
	pid_t pid;
	int st;

	(void)state;
	fflush(NULL);
	pid = fork();
	if (pid == 0)
		_exit(memlock_child());
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* ------------------------------------------------------- set-up errors */

static void bad_configurations(void **state)
{
	tb_stream_cfg_t cfg;
	tb_tx_t *tx;
	tb_rx_t *rx;

	(void)state;
	cfg_for(&cfg);
	snprintf(cfg.rdma_device, sizeof(cfg.rdma_device), "mlx5_9");
	assert_int_equal(tb_ud_tx_ops.open(&tx, &cfg, 1), TB_ENOENT);
	assert_non_null(strstr(tb_errmsg(), "mlx5_9"));
	assert_int_equal(tb_ud_rx_ops.open(&rx, &cfg), TB_ENOENT);
	cfg_for(&cfg);
	cfg.rdma_port = 2;
	assert_int_equal(tb_ud_rx_ops.open(&rx, &cfg), TB_ENOENT);
	cfg_for(&cfg);
	cfg.gid_index = 7; /* softrdma's table holds 0..3 */
	assert_int_equal(tb_ud_tx_ops.open(&tx, &cfg, 1), TB_ECONFIG);
	assert_non_null(strstr(tb_errmsg(), "gid_index 7"));
	cfg_for(&cfg);
	cfg.mtu = 8192;
	assert_int_equal(tb_ud_tx_ops.open(&tx, &cfg, 1), TB_ECONFIG);
	assert_non_null(strstr(tb_errmsg(), "path MTU"));
	cfg_for(&cfg);
	snprintf(cfg.group.host, sizeof(cfg.group.host), "10.1.2.3");
	assert_int_equal(tb_ud_rx_ops.open(&rx, &cfg), TB_ECONFIG);
	assert_non_null(strstr(tb_errmsg(), "multicast"));
	/* a smaller mtu than the path's is honoured */
	cfg_for(&cfg);
	cfg.mtu = 1024;
	assert_int_equal(tb_ud_tx_ops.open(&tx, &cfg, 1), 0);
	assert_int_equal(tx->ring.max_frame, tb_packet_max_payload(1024) + TB_FRAME_HDR_LEN);
	tx->ops->close(tx, 0);
}

/* Runs this test program again as `mode` (an argument main knows) with
 * softrdma's `var` set to `value`, which it reads when it loads; the
 * child must exit 0. */
static void child_with(const char *var, const char *value, const char *mode)
{
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		setenv(var, value, 1);
		execl("/proc/self/exe", "test_transport_ud", mode, (char *)NULL);
		_exit(127);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* Without any RDMA device (the verbs library lists none): a clear error
 * that names softrdma.  Runs in a child with the device list failing. */
static void no_device(void **state)
{
	(void)state;
	child_with("SOFTRDMA_FAIL_VERB", "ibv_get_device_list", "--no-device");
}

static int no_device_child(void)
{
	tb_stream_cfg_t cfg;
	tb_tx_t *tx;

	cfg_for(&cfg);
	if (tb_ud_tx_ops.open(&tx, &cfg, 1) != TB_ENOTSUP)
		return 1;
	return strstr(tb_errmsg(), "softrdma") ? 0 : 2;
}

static int on_softrdma(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	int ok = l && n > 0 && !strcmp(ibv_get_device_name(l[0]), "softrdma0");

	if (l)
		ibv_free_device_list(l);
	return ok;
}

/* ------------------------------------------- the offer's inline send */

typedef struct small_got {
	uint64_t n, bad;
} small_got_t;

static void small_fill(uint8_t *b, uint32_t len, uint64_t seq)
{
	for (uint32_t i = 0; i < len; i++)
		b[i] = (uint8_t)(seq * 37u + i * 5u + 3u);
}

static void small_on_msg(void *clientd, const tb_msg_t *m)
{
	small_got_t *g = clientd;
	uint8_t want[64];

	g->n++;
	small_fill(want, 64, g->n);
	g->bad += m->seq != g->n || m->len != 64 || memcmp(m->data, want, 64);
}

/* cfg_for on group `group`, `port`, with a 64 KiB ring: a few hundred
 * small messages lap it. */
static void small_cfg(tb_stream_cfg_t *cfg, const char *group, uint16_t port)
{
	cfg_for(cfg);
	snprintf(cfg->group.host, sizeof(cfg->group.host), "%s", group);
	cfg->group.port = port;
	cfg->ring_size = 64 << 10;
}

/* Two laps of a 64 KiB ring of 64-byte offers on `group`:`port`, each
 * polled for before the next: 0 when every message arrives once, in
 * order, whole; else a count of what went wrong, said on stderr.  Plain
 * returns, no assertions: a child process (below) runs it too. */
static int small_laps(const char *group, uint16_t port)
{
	const uint64_t n = 2 * ((64 << 10) / 96) + 40;
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	small_got_t g = {0};
	uint8_t msg[64];

	small_cfg(&cfg, group, port);
	if (tb_publisher_open(&pub, &cfg) < 0 ||
	    tb_subscriber_open(&sub, &cfg) < 0) {
		fprintf(stderr, "open: %s\n", tb_errmsg());
		return 1;
	}
	for (uint64_t seq = 1; seq <= n; seq++) {
		uint64_t until = tb_clock_mono_ms() + 5000;

		small_fill(msg, sizeof(msg), seq);
		if (tb_pub_offer(pub, 2, msg, sizeof(msg)) != (int64_t)seq) {
			fprintf(stderr, "offer %" PRIu64 ": %s\n", seq,
				tb_errmsg());
			return 2;
		}
		while (g.n < seq && tb_clock_mono_ms() < until)
			if (tb_sub_poll(sub, small_on_msg, &g, 16) < 0) {
				fprintf(stderr, "poll: %s\n", tb_errmsg());
				return 3;
			}
		if (g.n != seq) {
			fprintf(stderr, "seq %" PRIu64 ": got %" PRIu64 "\n", seq,
				g.n);
			return 4;
		}
	}
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	return g.bad == 0 ? 0 : 5;
}

/*
 * Small offers through the public API take tb_pub_offer's inline ud send
 * (ud.h); the one whose frame would pad the end of the publisher's ring
 * goes the checked way.  Over two laps of a 64 KiB ring every message
 * arrives once, in order, whole, one datagram each.
 */
static void small_offers_cross_the_rings_end(void **state)
{
	(void)state;
	assert_int_equal(small_laps("239.7.7.42", 5042), 0);
}

/*
 * A data QP granted too little inline data for a small offer's datagram
 * (SOFTRDMA_GRANT_INLINE=128: 64 bytes of frame, under a 64-byte
 * message's 96): the offer must not use ud's inline send, which posts
 * every small frame inline untested (softrdma, as a NIC, refuses an
 * inline post longer than the QP's grant), but send by reference.  Every
 * message arrives, in order, whole.  Runs in a child, whose softrdma
 * reads the variable at load.
 */
static void small_offers_go_by_reference_on_a_short_inline_qp(void **state)
{
	(void)state;
	child_with("SOFTRDMA_GRANT_INLINE", "128", "--short-inline");
}

static int short_inline_child(void)
{
	return small_laps("239.7.7.46", 5046);
}

/*
 * Small offers hand ud the frame they just committed (tb_ud_send_frame);
 * when it is not the only one to send (batching holds the ones before
 * it) they must take the datagram core's drain instead.  With batch_us
 * of a second, what was offered waits for tb_pub_flush (but for the
 * datagram the ring's end closes), and then all of it comes, in order,
 * whole, over two laps of a 64 KiB ring.
 */
static void small_offers_held_by_batching_go_at_the_flush(void **state)
{
	const uint64_t n = 2 * ((64 << 10) / 96) + 40;
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	small_got_t g = {0};
	uint8_t msg[64];
	uint64_t early = 0;

	(void)state;
	small_cfg(&cfg, "239.7.7.43", 5043);
	cfg.batch_us = 1000000;
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	for (uint64_t seq = 1; seq <= n; seq++) {
		uint64_t until;

		small_fill(msg, sizeof(msg), seq);
		assert_int_equal(tb_pub_offer(pub, 2, msg, sizeof(msg)),
				 (int64_t)seq);
		if (seq % 7 != 0 && seq != n)
			continue;
		/* Held: a few polls find nothing new ... */
		for (int i = 0; i < 20; i++) {
			int rc = tb_sub_poll(sub, small_on_msg, &g, 16);

			/* (not connected: nothing has come yet) */
			if (rc < 0 && rc != TB_NOT_CONNECTED)
				fail_msg("seq %" PRIu64 ": poll: %s: %s", seq,
					 tb_strerror(rc), tb_errmsg());
		}
		/* (the ring's end closes a datagram early: memory is no
		 * longer one span; the frames after it are held) */
		assert_true(g.n < seq);
		early += g.n - (seq - (seq % 7 ? seq % 7 : 7));
		/* ... until the flush sends them all. */
		assert_int_equal(tb_pub_flush(pub), 0);
		until = tb_clock_mono_ms() + 5000;
		while (g.n < seq && tb_clock_mono_ms() < until) {
			int rc = tb_sub_poll(sub, small_on_msg, &g, 16);

			assert_true(rc >= 0 || rc == TB_NOT_CONNECTED);
		}
		assert_int_equal(g.n, seq);
	}
	assert_int_equal(g.bad, 0);
	/* Early only at the ring's ends: two laps, a few frames each. */
	assert_true(early <= 2 * 7);
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
}

typedef struct seqs_got {
	uint64_t seq[16];
	int n;
} seqs_got_t;

static void seqs_on_msg(void *clientd, const tb_msg_t *m)
{
	seqs_got_t *g = clientd;

	if (g->n < 16)
		g->seq[g->n] = m->seq;
	g->n++;
}

/*
 * The provider refuses the post of a small offer's datagram (ud's send,
 * inlined in the offer): the offer still publishes the message (its
 * sequence is taken; the subscriber sees a gap), the publisher counts one
 * error in its counters, and the offers after it go out again, on a QP
 * the send repaired, and arrive in order.
 */
static void a_refused_small_offer_is_counted(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	seqs_got_t g = {0};
	uint8_t msg[64] = {0};
	uint64_t until, first, last;
	int gaps = 0;

	(void)state;
	small_cfg(&cfg, "239.7.7.47", 5047);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	for (int64_t seq = 1; seq <= 8; seq++) {
		refuse_posts = seq == 4;
		assert_int_equal(tb_pub_offer(pub, 2, msg, sizeof(msg)), seq);
		refuse_posts = 0;
		if (seq == 4) {
			assert_int_equal(refused, 1);
			assert_int_equal(own_counter(STREAM, TB_ROLE_PUBLISHER,
						     TB_CTR_ERRORS), 1);
		}
	}
	assert_int_equal(own_counter(STREAM, TB_ROLE_PUBLISHER, TB_CTR_ERRORS),
			 1);
	until = tb_clock_mono_ms() + 5000;
	while (g.n < 7 && tb_clock_mono_ms() < until) {
		int rc = tb_sub_poll(sub, seqs_on_msg, &g, 16);

		if (rc == TB_GAP) {
			assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
			assert_int_equal(first, 4);
			assert_int_equal(last, 4);
			gaps++;
		} else {
			assert_true(rc >= 0 || rc == TB_NOT_CONNECTED);
		}
	}
	assert_int_equal(g.n, 7);
	assert_int_equal(gaps, 1);
	for (int i = 0; i < 7; i++)
		assert_int_equal(g.seq[i], (uint64_t)(i < 3 ? i + 1 : i + 2));
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
}

typedef struct burst_got {
	uint64_t n, bad, stamp, stamps;
} burst_got_t;

static void burst_on_msg(void *clientd, const tb_msg_t *m)
{
	burst_got_t *g = clientd;
	uint8_t want[64];

	g->n++;
	small_fill(want, 64, g->n);
	g->bad += m->seq != g->n || m->len != 64 || memcmp(m->data, want, 64);
	if (m->publish_ns != g->stamp) {
		g->stamp = m->publish_ns;
		g->stamps++;
	}
}

/*
 * Bursts of 16 small messages (tb_pub_offerv) take ud's inline send with
 * one stamp each, and the checked way where a frame would pad the
 * ring's end: over two laps of a 64 KiB ring every message arrives once,
 * in order, whole, and the stamp changes once a burst, never within one.
 */
static void a_burst_of_small_offers_crosses_the_rings_end(void **state)
{
	const uint64_t bursts = (2 * ((64 << 10) / 96) + 40) / 16;
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	burst_got_t g = {0};
	uint8_t msg[16][64];
	tb_pub_msg_t v[16];

	(void)state;
	small_cfg(&cfg, "239.7.7.44", 5044);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	for (uint64_t b = 0; b < bursts; b++) {
		uint64_t until = tb_clock_mono_ms() + 5000;

		for (int i = 0; i < 16; i++) {
			small_fill(msg[i], 64, b * 16 + (uint64_t)i + 1);
			v[i] = (tb_pub_msg_t){msg[i], 64, 2};
		}
		assert_int_equal(tb_pub_offerv(pub, v, 16), 16);
		while (g.n < (b + 1) * 16 && tb_clock_mono_ms() < until) {
			int rc = tb_sub_poll(sub, burst_on_msg, &g, 16);

			assert_true(rc >= 0 || rc == TB_NOT_CONNECTED);
		}
		assert_int_equal(g.n, (b + 1) * 16);
		assert_int_equal(g.stamps, b + 1);
	}
	assert_int_equal(g.bad, 0);
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(in_order_one_datagram_per_send),
		cmocka_unit_test(small_offers_cross_the_rings_end),
		cmocka_unit_test(a_burst_of_small_offers_crosses_the_rings_end),
		cmocka_unit_test(small_offers_held_by_batching_go_at_the_flush),
		cmocka_unit_test(small_offers_go_by_reference_on_a_short_inline_qp),
		cmocka_unit_test(a_refused_small_offer_is_counted),
		cmocka_unit_test(zero_copy_and_selective_signalling),
		cmocka_unit_test(batching_by_size_and_flush),
		cmocka_unit_test(batching_by_time),
		cmocka_unit_test(too_large_for_a_datagram),
		cmocka_unit_test(heartbeat_end_and_silence),
		cmocka_unit_test(malformed_datagrams_counted_and_dropped),
		cmocka_unit_test(failed_fast_post_seen_by_its_group),
		cmocka_unit_test(fast_posts_keep_the_queue_bound),
		cmocka_unit_test(one_forged_end_no_longer_stops_subscribers),
		cmocka_unit_test(forged_far_sequence_no_longer_drops_the_stream),
		cmocka_unit_test(forged_next_epoch_no_longer_hijacks_the_stream),
		cmocka_unit_test(failed_send_is_recovered_from),
		cmocka_unit_test(receives_in_error_never_silence_the_subscriber),
		cmocka_unit_test(receive_depth_from_config_bounded_by_the_device),
		cmocka_unit_test(memory_from_the_ring_allocator_on_the_right_node),
		cmocka_unit_test(rubbish_ends_the_poll_after_one_batch),
		cmocka_unit_test(fatal_qp_on_the_publisher_is_repaired),
		cmocka_unit_test(fatal_qp_on_the_subscriber_is_rebuilt),
		cmocka_unit_test(port_down_then_up_is_told_and_joined_again),
		cmocka_unit_test(moved_source_gid_gets_a_new_address_handle),
		cmocka_unit_test(queue_pairs_and_address_handles_as_asked),
		cmocka_unit_test(memlock_budget_is_checked_at_open),
		cmocka_unit_test(bad_configurations),
		cmocka_unit_test(no_device),
	};

	if (!getenv("SOFTRDMA_FABRIC")) {
		char name[64];

		snprintf(name, sizeof(name), "t-ud-%d", (int)getpid());
		setenv("SOFTRDMA_FABRIC", name, 1);
	}
	if (argc == 2 && !strcmp(argv[1], "--no-device"))
		return no_device_child();
	if (argc == 2 && !strcmp(argv[1], "--short-inline"))
		return short_inline_child();
	if (!on_softrdma()) {
		fprintf(stderr, "SKIP: needs softrdma (LD_LIBRARY_PATH=build/softrdma)\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
