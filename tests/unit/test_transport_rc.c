/*
 * The rc transport at the verbs boundary, on softrdma, in one process.
 *
 * The test plays the other end itself -- a hand-made subscriber against the
 * real publisher, and a hand-made publisher against the real subscriber --
 * speaking the control protocol and verbs directly, and records every work
 * request tickbus posts by wrapping the device context's post_send, and
 * every QP transition by defining ibv_modify_qp (the test defines
 * ibv_open_device and ibv_modify_qp, which the static library binds to,
 * and calls the real ones).  It asserts the exact requests: opcode,
 * big-endian immediate, rkey, remote address, inline and signalled flags,
 * lkey and lengths, on the normal, wrap/padding and credit paths; the
 * inline threshold of one 256-byte WQE; that a subscriber without credit
 * is skipped, told the range in heartbeats, and then resumed; that a fence
 * goes out for every skip however long completions stall; that nothing is
 * written before READY; the path MTU both ends use; that rkeys give no
 * access outside the ring or the subscriber's own credit slot, not even to
 * another subscriber's; that a wrong token gets no rkey and slows its
 * address; the memlock budget at open; version 1 peers refused both ways;
 * and how the subscriber reacts to its queue pair failing or being
 * dropped, and to its publisher being gone when it dials again.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/counters.h"
#include "bus/frame.h"
#include "bus/ring.h"
#include "bus/transport/control.h"
#include "bus/transport/rc.h"
#include "tests/common/counters.h"
#include "tests/common/proc.h"
#include <tickbus/tickbus.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------ recording work requests */

typedef struct rec_wr {
	uint32_t qpn;
	int opcode;
	unsigned flags;
	uint32_t imm;          /* host order */
	uint64_t raddr;
	uint32_t rkey;
	uint32_t len;
	uint32_t lkey;
	int post;              /* the ibv_post_send call it came in (n_posts) */
	uint64_t wr_id;
	uint8_t data[64];      /* first bytes of the payload: 8-aligned, read
				* as a frame header */
} rec_wr_t;

/* Every test starts with none (rec_reset): the longest posts ~2,800. */
#define REC_MAX 8192
static rec_wr_t rec[REC_MAX];
static int n_rec;
static int rec_lost;   /* posted when the record was full: a test reads them */
static int n_posts;    /* ibv_post_send calls: doorbells */
static uint32_t refuse_qpn; /* posts to this QP are refused (recorded
			     * first), as a provider refuses a full queue */
static int (*real_post_send)(struct ibv_qp *, struct ibv_send_wr *,
			     struct ibv_send_wr **);

static int recording_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
			       struct ibv_send_wr **bad)
{
	n_posts++;
	for (struct ibv_send_wr *w = wr; w; w = w->next) {
		rec_wr_t *r;
		uint32_t len = 0;

		if (n_rec == REC_MAX) {
			rec_lost++;
			continue;
		}
		r = &rec[n_rec++];

		for (int i = 0; i < w->num_sge; i++)
			len += w->sg_list[i].length;
		*r = (rec_wr_t){.qpn = qp->qp_num, .opcode = w->opcode,
				.flags = w->send_flags, .imm = be32toh(w->imm_data),
				.raddr = w->wr.rdma.remote_addr,
				.rkey = w->wr.rdma.rkey, .len = len,
				.lkey = w->num_sge ? w->sg_list[0].lkey : 0,
				.wr_id = w->wr_id, .post = n_posts};
		if (w->num_sge)
			memcpy(r->data, (void *)(uintptr_t)w->sg_list[0].addr,
			       w->sg_list[0].length < 64 ? w->sg_list[0].length : 64);
	}
	if (refuse_qpn && qp->qp_num == refuse_qpn) {
		*bad = wr;
		return ENOMEM;
	}
	return real_post_send(qp, wr, bad);
}

/* Completions of every CQ but `stall_spare` are held back while `stall`
 * is set: a NIC that stops reporting for a while. */
static int stall;
static struct ibv_cq *stall_spare;
static int (*real_poll_cq)(struct ibv_cq *, int, struct ibv_wc *);

static int stalling_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	if (stall && cq != stall_spare)
		return 0;
	return real_poll_cq(cq, n, wc);
}

/* While `inline_cap` is set, a QP created is reported granted at most
 * that much inline data (it can take more: nothing it is sent fails),
 * whichever call creates it: a device that grants less. */
static uint32_t inline_cap;
static struct ibv_qp *(*real_create_qp_ex)(struct ibv_context *,
					   struct ibv_qp_init_attr_ex *);

static struct ibv_qp *capping_create_qp_ex(struct ibv_context *ctx,
					   struct ibv_qp_init_attr_ex *ia)
{
	struct ibv_qp *qp = real_create_qp_ex(ctx, ia);

	if (qp && inline_cap && ia->cap.max_inline_data > inline_cap)
		ia->cap.max_inline_data = inline_cap;
	return qp;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
	static struct ibv_qp *(*real)(struct ibv_pd *, struct ibv_qp_init_attr *);
	struct ibv_qp *qp;

	if (!real)
		real = (struct ibv_qp * (*)(struct ibv_pd *, struct ibv_qp_init_attr *))
			dlvsym(RTLD_NEXT, "ibv_create_qp", "IBVERBS_1.1");
	qp = real(pd, ia);
	if (qp && inline_cap && ia->cap.max_inline_data > inline_cap)
		ia->cap.max_inline_data = inline_cap;
	return qp;
}

struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	static struct ibv_context *(*real)(struct ibv_device *);
	struct ibv_context *ctx;
	struct verbs_context *vctx;

	if (!real)
		real = (struct ibv_context * (*)(struct ibv_device *))
			dlvsym(RTLD_NEXT, "ibv_open_device", "IBVERBS_1.1");
	ctx = real(dev);
	if (ctx) {
		real_post_send = ctx->ops.post_send;
		ctx->ops.post_send = recording_post_send;
		real_poll_cq = ctx->ops.poll_cq;
		ctx->ops.poll_cq = stalling_poll_cq;
		vctx = verbs_get_ctx(ctx);
		if (vctx && vctx->create_qp_ex) {
			real_create_qp_ex = vctx->create_qp_ex;
			vctx->create_qp_ex = capping_create_qp_ex;
		}
	}
	return ctx;
}

/* Every transition to RTR, recorded: which QP, with what. */
typedef struct rec_rtr {
	uint32_t qpn;
	struct ibv_qp_attr a;
} rec_rtr_t;

static rec_rtr_t rtr[64];
static int n_rtr;

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	static int (*real)(struct ibv_qp *, struct ibv_qp_attr *, int);

	if (!real)
		real = (int (*)(struct ibv_qp *, struct ibv_qp_attr *, int))
			dlvsym(RTLD_NEXT, "ibv_modify_qp", "IBVERBS_1.1");
	if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RTR && n_rtr < 64)
		rtr[n_rtr++] = (rec_rtr_t){.qpn = qp->qp_num, .a = *attr};
	return real(qp, attr, mask);
}

static const struct ibv_qp_attr *rtr_of(uint32_t qpn)
{
	for (int i = n_rtr - 1; i >= 0; i--)
		if (rtr[i].qpn == qpn)
			return &rtr[i].a;
	fail_msg("no RTR recorded for qp %u", qpn);
	return NULL;
}

/* ---------------------------------------------------- the hand-made peer */

typedef struct peer {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	size_t len;
	union ibv_gid gid;
	int fd;
	uint32_t psn;          /* the first PSN it sends, as it told the other end */
	tb_control_msg_t reply;
} peer_t;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void nap(void)
{
	struct timespec ts = {0, 200000};

	nanosleep(&ts, NULL);
}

static void peer_open(peer_t *p, size_t len, uint32_t recv_depth)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr ia = {.qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 64,
					      .max_recv_wr = recv_depth,
					      .max_send_sge = 1, .max_recv_sge = 1,
					      .max_inline_data = 64}};
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};

	memset(p, 0, sizeof(*p));
	assert_non_null(l);
	assert_non_null(l[0]);
	p->ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	assert_non_null(p->ctx);
	p->pd = ibv_alloc_pd(p->ctx);
	p->cq = ibv_create_cq(p->ctx, 4096, NULL, NULL, 0);
	assert_non_null(p->cq);
	ia.send_cq = ia.recv_cq = p->cq;
	p->qp = ibv_create_qp(p->pd, &ia);
	assert_non_null(p->qp);
	assert_int_equal(ibv_modify_qp(p->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				       IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
	assert_int_equal(posix_memalign((void **)&p->buf, 4096, len), 0);
	memset(p->buf, 0, len);
	p->len = len;
	p->mr = ibv_reg_mr(p->pd, p->buf, len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_non_null(p->mr);
	assert_int_equal(ibv_query_gid(p->ctx, 1, 0, &p->gid), 0);
	p->fd = -1;
	p->psn = 77;
}

static void peer_connect_qp(peer_t *p, uint32_t qpn, const uint8_t *gid,
			    uint32_t psn)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
				.path_mtu = p->reply.type == TB_CONTROL_ACCEPT
						    ? (enum ibv_mtu)p->reply.accept.mtu
						    : IBV_MTU_1024,
				.dest_qp_num = qpn, .rq_psn = psn,
				.max_dest_rd_atomic = 1, .min_rnr_timer = 1,
				.ah_attr = {.is_global = 1, .port_num = 1}};

	memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
	a.ah_attr.grh.hop_limit = 1;
	assert_int_equal(ibv_modify_qp(p->qp, &a, IBV_QP_STATE | IBV_QP_AV |
				       IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 10;
	a.retry_cnt = 2;
	a.rnr_retry = 7;
	a.sq_psn = p->psn;
	a.max_rd_atomic = 1;
	assert_int_equal(ibv_modify_qp(p->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
				       IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC), 0);
}

static void peer_close(peer_t *p)
{
	if (p->fd >= 0)
		close(p->fd);
	ibv_destroy_qp(p->qp);
	if (p->mr)
		ibv_dereg_mr(p->mr);
	ibv_destroy_cq(p->cq);
	ibv_dealloc_pd(p->pd);
	ibv_close_device(p->ctx);
	free(p->buf);
}

static void post_recvs(peer_t *p, int n)
{
	struct ibv_recv_wr wr = {.num_sge = 0}, *bad;

	for (int i = 0; i < n; i++)
		assert_int_equal(ibv_post_recv(p->qp, &wr, &bad), 0);
}

static void send_buf(int fd, const void *b, int n)
{
	assert_true(n > 0);
	assert_int_equal(send(fd, b, (size_t)n, MSG_NOSIGNAL), n);
}

/* Reads one control message within 5 s. */
static int read_ctl(int fd, tb_control_msg_t *m)
{
	uint8_t buf[TB_CONTROL_MSG_MAX];
	size_t have = 0;
	uint64_t until = now_ms() + 5000;

	while (now_ms() < until) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		int need = have ? tb_control_frame_need(buf, have) : (int)TB_WIRE_HDR_LEN;
		ssize_t n;

		if (need < 0)
			return need;
		if (have && need == 0)
			return tb_control_decode(buf, have, m);
		if (poll(&pf, 1, 100) <= 0)
			continue;
		n = recv(fd, buf + have, (size_t)need, 0);
		if (n <= 0)
			return TB_CLOSED;
		have += (size_t)n;
	}
	return TB_ETIMEDOUT;
}

static int tcp_connect(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	uint64_t until = now_ms() + 5000;

	while (now_ms() < until) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		close(fd);
		nap();
	}
	fail_msg("no control endpoint on port %d", port);
	return -1;
}

/* HELLO + SUBSCRIBE from `p` to the publisher on `port` (saying the port
 * MTU is `mtu`); the answer lands in p->reply. */
static void subscribe_mtu(peer_t *p, int port, const char *token,
			  uint32_t recv_depth, uint8_t mtu)
{
	tb_control_hello_t h = {.stream_id = 9};
	tb_control_subscribe_t s = {.stream_id = 9, .transport = TB_TRANSPORT_RC,
				.mtu = mtu,
				.flags = TB_CONTROL_SUB_F_CREDIT_SLOT,
				.ring_addr = (uintptr_t)p->buf, .ring_len = p->len,
				.rkey = p->mr->rkey, .qpn = p->qp->qp_num, .psn = 5,
				.recv_depth = recv_depth};
	uint8_t buf[TB_CONTROL_MSG_MAX];

	snprintf(h.client_id, sizeof(h.client_id), "test");
	snprintf(h.token, sizeof(h.token), "%s", token);
	memcpy(s.gid, p->gid.raw, 16);
	p->psn = s.psn;    /* what we send from, and the publisher expects */
	p->fd = tcp_connect(port);
	send_buf(p->fd, buf, tb_control_encode_hello(buf, sizeof(buf), &h));
	send_buf(p->fd, buf, tb_control_encode_subscribe(buf, sizeof(buf), &s));
	assert_true(read_ctl(p->fd, &p->reply) > 0);
}

static void subscribe(peer_t *p, int port, const char *token,
		      uint32_t recv_depth)
{
	subscribe_mtu(p, port, token, recv_depth, TB_CONTROL_MTU_1024);
}

/* READY: our QP is in RTR; the publisher may write. */
static void send_ready(peer_t *p)
{
	tb_control_ready_t r = {.stream_id = 9, .qpn = p->qp->qp_num};
	uint8_t buf[TB_CONTROL_MSG_MAX];

	send_buf(p->fd, buf, tb_control_encode_ready(buf, sizeof(buf), &r));
}

/* ACCEPT in hand: the QP up along its path, then READY, then a moment for
 * the publisher to put us in its table. */
static void join(peer_t *p)
{
	assert_int_equal(p->reply.type, TB_CONTROL_ACCEPT);
	peer_connect_qp(p, p->reply.accept.qpn, p->reply.accept.gid,
			p->reply.accept.psn);
	send_ready(p);
	usleep(100000);
}

static int test_port(int k)
{
	/* A port the kernel says is free, once per k (one per test, so that
	 * a failed test's publisher, left open, takes no other test with
	 * it): fixed ports in the ephemeral range collide with sockets other
	 * tests left in TIME-WAIT. */
	static int port[40];

	assert_true(k < 40);

	if (!port[k])
		port[k] = (int)proc_free_port();
	return port[k];
}

static void rc_cfg(tb_stream_cfg_t *c, int port, uint64_t ring)
{
	tb_stream_cfg_init(c);
	snprintf(c->name, sizeof(c->name), "rctest");
	c->id = 9;
	c->transport = TB_TRANSPORT_RC;
	c->ring_size = ring;
	snprintf(c->control.host, sizeof(c->control.host), "127.0.0.1");
	c->control.port = (uint16_t)port;
	snprintf(c->token, sizeof(c->token), "right-token");
	c->heartbeat_ms = 50;
	c->liveness_timeout_ms = 2000;
}

/* Waits for `n` receive completions on the peer's CQ. */
static int wait_recvs(peer_t *p, struct ibv_wc *wc, int n)
{
	uint64_t until = now_ms() + 5000;
	int got = 0;

	while (got < n && now_ms() < until) {
		int k = ibv_poll_cq(p->cq, n - got, wc + got);

		assert_true(k >= 0);
		got += k;
		if (!k)
			nap();
	}
	return got;
}

/* What a subscriber does as it consumes: one 8-byte WRITE of its consumed
 * position and re-posted receives into its credit slot. */
static void give_credit(peer_t *p, uint64_t pos, uint32_t regranted)
{
	uint64_t credit = tb_rc_credit(pos, regranted);
	struct ibv_sge sge = {.addr = (uintptr_t)&credit, .length = 8};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = p->reply.accept.credit_addr,
					     .rkey = p->reply.accept.credit_rkey}};
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	assert_int_equal(ibv_post_send(p->qp, &wr, &bad), 0);
	assert_int_equal(wait_recvs(p, &wc, 1), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
}

static const rec_wr_t *recs_for(uint32_t qpn, int from, int *count)
{
	static rec_wr_t out[REC_MAX];
	int n = 0;

	/* A request posted but not recorded would read as one never posted. */
	assert_int_equal(rec_lost, 0);
	for (int i = from; i < n_rec; i++)
		if (rec[i].qpn == qpn)
			out[n++] = rec[i];
	*count = n;
	return out;
}

/* -------------------------------------------------- publisher-side tests */

static void publisher_posts_exact_work_requests(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint8_t payload[1200];
	struct ibv_wc wc[64];
	const rec_wr_t *w;
	uint32_t pub_qpn;
	int n, first;

	(void)state;
	rc_cfg(&cfg, test_port(0), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 64 << 10, 256);
	post_recvs(&p, 256);
	subscribe(&p, test_port(0), "right-token", 256);
	assert_int_equal(p.reply.type, TB_CONTROL_ACCEPT);
	assert_true(p.reply.accept.credit_rkey != 0);
	assert_int_equal(p.reply.accept.ring_offset, 0);
	pub_qpn = p.reply.accept.qpn;
	/* The path MTU: the smaller of its port's (4096) and ours. */
	assert_int_equal(p.reply.accept.mtu, TB_CONTROL_MTU_1024);
	assert_int_equal(p.reply.accept.lid, 0);     /* RoCE */
	assert_int_equal(p.reply.accept.traffic_class, 106);
	join(&p);

	/* A small frame: inline, WRITE_WITH_IMM at offset 0. */
	memset(payload, 0xab, sizeof(payload));
	first = n_rec;
	assert_int_equal(tb_pub_offer(pub, 42, payload, 64), 1);
	assert_int_equal(wait_recvs(&p, wc, 1), 1);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(wc[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	assert_int_equal(be32toh(wc[0].imm_data), tb_rc_imm(0, 1));
	assert_int_equal(wc[0].byte_len, 96);
	w = recs_for(pub_qpn, first, &n);
	assert_int_equal(n, 1);
	assert_int_equal(w[0].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
	assert_int_equal(w[0].imm, tb_rc_imm(0, 1));
	assert_int_equal(w[0].rkey, p.mr->rkey);
	assert_true(w[0].raddr == (uintptr_t)p.buf);
	assert_int_equal(w[0].len, 96);
	assert_true(w[0].flags & IBV_SEND_INLINE);
	assert_false(w[0].flags & IBV_SEND_SIGNALED);
	assert_int_equal(((tb_frame_hdr_t *)p.buf)->seq, 1);
	assert_int_equal(((tb_frame_hdr_t *)p.buf)->template_id, 42);
	assert_memory_equal(p.buf + 32, payload, 64);

	/* A large frame goes by reference: the publisher ring's lkey. */
	first = n_rec;
	assert_int_equal(tb_pub_offer(pub, 43, payload, 1200), 2);
	assert_int_equal(wait_recvs(&p, wc, 1), 1);
	w = recs_for(pub_qpn, first, &n);
	assert_int_equal(n, 1);
	assert_false(w[0].flags & IBV_SEND_INLINE);
	assert_true(w[0].lkey != 0);
	assert_int_equal(w[0].len, 1232);
	assert_true(w[0].raddr == (uintptr_t)p.buf + 96);
	assert_int_equal(w[0].imm, tb_rc_imm(96, 2));
	assert_memory_equal(p.buf + 96 + 32, payload, 1200);

	/* Up to the wrap: 1248-byte slots from 1344; the 52nd would straddle
	 * 64 KiB, so a padding WRITE (inline, no immediate) fills the tail
	 * and the frame goes to offset 0. */
	first = n_rec;
	for (int i = 0; i < 52; i++) {
		assert_true(tb_pub_offer(pub, 44, payload, 1200) > 0);
		assert_int_equal(wait_recvs(&p, wc, 1), 1);
		give_credit(&p, 1344 + (uint64_t)(i + 1) * 1248, 0);
	}
	w = recs_for(pub_qpn, first, &n);
	assert_int_equal(n, 53);
	{
		uint64_t pad_off = 1344 + 51 * 1248;
		const rec_wr_t *pad = &w[51], *after = &w[52];

		assert_int_equal(pad->opcode, IBV_WR_RDMA_WRITE);
		assert_true(pad->flags & IBV_SEND_INLINE);
		assert_int_equal(pad->len, 32);
		assert_true(pad->raddr == (uintptr_t)p.buf + pad_off);
		assert_int_equal(((const tb_frame_hdr_t *)pad->data)->type, TB_FRAME_PAD);
		assert_int_equal(((const tb_frame_hdr_t *)pad->data)->length,
				 (64 << 10) - pad_off);
		assert_int_equal(((const tb_frame_hdr_t *)pad->data)->seq, 54);
		assert_int_equal(after->opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
		assert_true(after->raddr == (uintptr_t)p.buf);
		assert_int_equal(after->imm, tb_rc_imm(0, 54));
		assert_int_equal(((tb_frame_hdr_t *)(p.buf + pad_off))->type, TB_FRAME_PAD);
	}
	/* Selective signalling: a signalled request in TB_RC_SIGNAL_EVERY
	 * (128), or sooner once
	 * the frames since the last span a quarter of our ring (64 KiB of
	 * 256).  55 requests so far (54 frames, 1 pad): the 54th frame is the
	 * first to end past 64 KiB in our ring (at 96 + 53 * 1248), so it is
	 * the one signalled, and its wr_id counts the requests up to it. */
	{
		int sig = 0;

		w = recs_for(pub_qpn, 0, &n);
		for (int i = 0; i < n; i++)
			sig += !!(w[i].flags & IBV_SEND_SIGNALED);
		assert_int_equal(n, 55);
		assert_int_equal(sig, 1);
		assert_true(w[54].flags & IBV_SEND_SIGNALED);
		assert_int_equal(w[54].wr_id, 55);
	}
	/* TB_RC_SIGNAL_EVERY small ones (12 KiB): by count, the last of
	 * them is the next signalled. */
	for (int i = 0; i < (int)TB_RC_SIGNAL_EVERY; i++) {
		assert_true(tb_pub_offer(pub, 45, payload, 64) > 0);
		assert_int_equal(wait_recvs(&p, wc, 1), 1);
	}
	{
		const int last = 55 + (int)TB_RC_SIGNAL_EVERY;
		int sig = 0;

		w = recs_for(pub_qpn, 0, &n);
		assert_int_equal(n, last);
		for (int i = 0; i < n; i++)
			sig += !!(w[i].flags & IBV_SEND_SIGNALED);
		assert_int_equal(sig, 2);
		assert_true(w[last - 1].flags & IBV_SEND_SIGNALED);
		assert_int_equal(w[last - 1].wr_id, last);
	}
	peer_close(&p);
	tb_publisher_close(pub);
}

/* A burst (tb_pub_offerv) to an rc subscriber: each message its own
 * WRITE_WITH_IMM, in order (the small ones inline, by the offer's
 * inlined send; the larger one the checked way), each immediate naming
 * its frame's offset and sequence, and every frame landing with the
 * burst's one stamp. */
static void a_burst_posts_one_write_a_message(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint8_t payload[6][200];
	tb_pub_msg_t v[6];
	struct ibv_wc wc[8];
	const rec_wr_t *w;
	uint64_t off = 0, stamp;
	int n, first;

	(void)state;
	rc_cfg(&cfg, test_port(30), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 64 << 10, 256);
	post_recvs(&p, 256);
	subscribe(&p, test_port(30), "right-token", 256);
	assert_int_equal(p.reply.type, TB_CONTROL_ACCEPT);
	join(&p);
	for (int i = 0; i < 6; i++) {
		uint32_t len = i == 3 ? 200 : 64;

		memset(payload[i], 0x10 + i, len);
		v[i] = (tb_pub_msg_t){payload[i], len, (uint16_t)(50 + i)};
	}
	first = n_rec;
	assert_int_equal(tb_pub_offerv(pub, v, 6), 6);
	assert_int_equal(wait_recvs(&p, wc, 6), 6);
	w = recs_for(p.reply.accept.qpn, first, &n);
	assert_int_equal(n, 6);
	stamp = ((const tb_frame_hdr_t *)p.buf)->publish_ns;
	assert_true(stamp != 0);
	for (int i = 0; i < 6; i++) {
		const tb_frame_hdr_t *f = (const tb_frame_hdr_t *)(p.buf + off);
		uint32_t flen = TB_FRAME_HDR_LEN + v[i].len;

		assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
		assert_int_equal(w[i].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
		assert_int_equal(w[i].imm, tb_rc_imm(off, (uint64_t)i + 1));
		assert_true(w[i].raddr == (uintptr_t)p.buf + off);
		assert_int_equal(w[i].len, flen);
		if (i != 3)
			assert_true(w[i].flags & IBV_SEND_INLINE);
		assert_int_equal(f->seq, i + 1);
		assert_int_equal(f->template_id, 50 + i);
		assert_int_equal(f->publish_ns, stamp);
		assert_memory_equal(p.buf + off + TB_FRAME_HDR_LEN, payload[i],
				    v[i].len);
		off += tb_frame_space(flen);
	}
	peer_close(&p);
	tb_publisher_close(pub);
}

static void publisher_skips_a_subscriber_without_credit(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint8_t payload[64] = {0};
	struct ibv_wc wc[64];
	const rec_wr_t *w;
	uint32_t pub_qpn;
	int n, first;

	(void)state;
	rc_cfg(&cfg, test_port(1), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 64 << 10, 64);
	post_recvs(&p, 8);
	subscribe(&p, test_port(1), "right-token", 8);  /* 8 receives only */
	assert_int_equal(p.reply.type, TB_CONTROL_ACCEPT);
	pub_qpn = p.reply.accept.qpn;
	join(&p);

	first = n_rec;
	for (int i = 0; i < 20; i++)
		assert_int_equal(tb_pub_offer(pub, 1, payload, 64), i + 1);
	/* Eight went out; the rest were skipped, not queued behind RNR.
	 * At the first skip, one signalled zero-length WRITE (it takes no
	 * receive) reports the eight unsignalled ones complete, so that the
	 * publisher's ring may move on past what they read. */
	w = recs_for(pub_qpn, first, &n);
	assert_int_equal(n, 9);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(w[i].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
		assert_false(w[i].flags & IBV_SEND_SIGNALED);
	}
	assert_int_equal(w[8].opcode, IBV_WR_RDMA_WRITE);
	assert_true(w[8].flags & IBV_SEND_SIGNALED);
	assert_int_equal(w[8].len, 0);
	assert_int_equal(w[8].wr_id, 9);
	assert_int_equal(wait_recvs(&p, wc, 8), 8);
	usleep(50000);
	assert_int_equal(ibv_poll_cq(p.cq, 64, wc), 0); /* no ninth receive */

	/* Credit: consumed 8 frames (768 bytes), 8 receives re-posted. */
	post_recvs(&p, 8);
	give_credit(&p, 8 * 96, 8);
	first = n_rec;
	for (int i = 0; i < 4; i++)
		assert_int_equal(tb_pub_offer(pub, 1, payload, 64), 21 + i);
	assert_int_equal(wait_recvs(&p, wc, 4), 4);
	/* It resumes where its ring left off, with the later sequences: the
	 * subscriber sees the gap 9..20. */
	assert_int_equal(((tb_frame_hdr_t *)(p.buf + 8 * 96))->seq, 21);
	assert_int_equal(be32toh(wc[0].imm_data), tb_rc_imm(8 * 96, 21));

	/* The credit slot's rkey reaches the slot alone. */
	{
		uint64_t v = 0;
		struct ibv_sge sge = {.addr = (uintptr_t)&v, .length = 8};
		struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
					 .wr.rdma = {.remote_addr = p.reply.accept.credit_addr +
							      TB_RC_SLOT_SIZE,
						     .rkey = p.reply.accept.credit_rkey}};
		struct ibv_send_wr *bad;

		assert_int_equal(ibv_post_send(p.qp, &wr, &bad), 0);
		assert_int_equal(wait_recvs(&p, wc, 1), 1);
		assert_int_equal(wc[0].status, IBV_WC_REM_ACCESS_ERR);
	}
	peer_close(&p);
	tb_publisher_close(pub);
}

/* tb_pub_subscribers once it says `want` (the control thread adds and
 * drops subscribers), or what it says after 5 s. */
static int subscribers_become(tb_publisher_t *pub, int want)
{
	int n = tb_pub_subscribers(pub);

	for (int i = 0; i < 5000 && n != want && n >= 0; i++) {
		usleep(1000);
		n = tb_pub_subscribers(pub);
	}
	return n;
}

/* The next control message on `fd` but heartbeats is a BYE for `reason`. */
static void expect_bye(int fd, uint32_t reason)
{
	tb_control_msg_t m;

	assert_true(read_ctl(fd, &m) > 0);
	while (m.type == TB_CONTROL_HEARTBEAT)
		assert_true(read_ctl(fd, &m) > 0);
	assert_int_equal(m.type, TB_CONTROL_BYE);
	assert_int_equal(m.bye.reason, reason);
}

static void publisher_drops_a_failed_subscriber(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t a, b;
	uint8_t payload[64] = {0};
	struct ibv_wc wc[128];
	tb_control_msg_t m;

	(void)state;
	rc_cfg(&cfg, test_port(2), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&a, 64 << 10, 256);
	peer_open(&b, 64 << 10, 256);
	post_recvs(&a, 256);
	post_recvs(&b, 256);
	assert_int_equal(tb_pub_subscribers(pub), 0);
	subscribe(&a, test_port(2), "right-token", 256);
	subscribe(&b, test_port(2), "right-token", 256);
	join(&a);
	join(&b);
	assert_int_equal(subscribers_become(pub, 2), 2);

	/* B's ring goes away: the publisher's next write to it is a remote
	 * access error and its queue pair to B fails. */
	assert_int_equal(ibv_dereg_mr(b.mr), 0);
	b.mr = NULL;
	for (int i = 0; i < 100; i++)
		assert_int_equal(tb_pub_offer(pub, 1, payload, 64), i + 1);
	/* A got all of them, in order, unaffected. */
	assert_int_equal(wait_recvs(&a, wc, 100), 100);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
		assert_int_equal(((tb_frame_hdr_t *)(a.buf + i * 96))->seq, i + 1);
	}
	/* B is told why it was dropped, and the connection ends. */
	expect_bye(b.fd, TB_CONTROL_BYE_ERROR);
	assert_int_equal(read_ctl(b.fd, &m), TB_CLOSED);
	/* A is the one left to count. */
	assert_int_equal(subscribers_become(pub, 1), 1);
	/* And the stream goes on for A. */
	assert_int_equal(tb_pub_offer(pub, 1, payload, 64), 101);
	assert_int_equal(wait_recvs(&a, wc, 1), 1);
	peer_close(&a);
	peer_close(&b);
	tb_publisher_close(pub);
}

/* The provider refuses a post to the first subscriber in the table (its
 * queue full, say) in the middle of the stream, on the small frames'
 * inline send: that subscriber is failed on the spot, is posted nothing
 * more and is dropped with a BYE, and the one after it in the same send
 * gets every frame, in order, where it belongs. */
static void a_refused_post_fails_that_subscriber_alone(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t a, b;
	uint8_t payload[64] = {0};
	struct ibv_wc wc[128];
	const rec_wr_t *w;
	int n, first;

	(void)state;
	rc_cfg(&cfg, test_port(36), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&a, 64 << 10, 256);
	peer_open(&b, 64 << 10, 256);
	post_recvs(&a, 256);
	post_recvs(&b, 256);
	subscribe(&a, test_port(36), "right-token", 256);
	join(&a);
	assert_int_equal(subscribers_become(pub, 1), 1);
	subscribe(&b, test_port(36), "right-token", 256);
	join(&b);
	assert_int_equal(subscribers_become(pub, 2), 2);

	/* Five frames to both, the last ones by the fast path. */
	for (int i = 0; i < 5; i++)
		assert_int_equal(tb_pub_offer(pub, 1, payload, 64), i + 1);
	assert_int_equal(wait_recvs(&a, wc, 5), 5);
	/* Then A's posts are refused: one is tried, and no other. */
	refuse_qpn = a.reply.accept.qpn;
	first = n_rec;
	for (int i = 5; i < 100; i++)
		assert_int_equal(tb_pub_offer(pub, 1, payload, 64), i + 1);
	refuse_qpn = 0;
	assert_int_equal(tb_pub_offer(pub, 1, payload, 64), 101);
	w = recs_for(a.reply.accept.qpn, first, &n);
	assert_int_equal(n, 1);
	assert_int_equal(w[0].imm, tb_rc_imm(5 * 96, 6));
	/* B got them all, each at its place with its immediate. */
	assert_int_equal(wait_recvs(&b, wc, 101), 101);
	for (int i = 0; i < 101; i++) {
		assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
		assert_int_equal(be32toh(wc[i].imm_data),
				 tb_rc_imm((uint64_t)i * 96, (uint64_t)i + 1));
		assert_int_equal(((tb_frame_hdr_t *)(b.buf + i * 96))->seq, i + 1);
	}
	/* A is told why it was dropped. */
	expect_bye(a.fd, TB_CONTROL_BYE_ERROR);
	assert_int_equal(subscribers_become(pub, 1), 1);
	peer_close(&a);
	peer_close(&b);
	tb_publisher_close(pub);
}

static void wrong_token_gets_no_rkey(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint8_t junk[16] = "not a message!!";
	tb_control_msg_t m;

	(void)state;
	rc_cfg(&cfg, test_port(3), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 64 << 10, 16);
	subscribe(&p, test_port(3), "wrong-token", 16);
	assert_int_equal(p.reply.type, TB_CONTROL_REJECT);
	assert_int_equal(p.reply.reject.reason, TB_CONTROL_REJ_BAD_TOKEN);
	/* Nothing follows the reject: the publisher hung up. */
	assert_int_equal(read_ctl(p.fd, &m), TB_CLOSED);
	close(p.fd);
	/* And this address waits a quarter of a second before its next
	 * connection is read: closed unanswered. */
	p.fd = tcp_connect(test_port(3));
	assert_int_equal(read_ctl(p.fd, &m), TB_CLOSED);
	close(p.fd);
	usleep(300000);

	/* Garbage instead of HELLO: rejected as malformed, then dropped. */
	p.fd = tcp_connect(test_port(3));
	send_buf(p.fd, junk, sizeof(junk));
	assert_true(read_ctl(p.fd, &m) > 0);
	assert_int_equal(m.type, TB_CONTROL_REJECT);
	assert_int_equal(m.reject.reason, TB_CONTROL_REJ_MALFORMED);
	peer_close(&p);
	tb_publisher_close(pub);
}

/* ------------------------------------------------- subscriber-side tests */

typedef struct got {
	uint64_t seq[128];
	int n;
} got_t;

static void on_msg(void *clientd, const tb_msg_t *m)
{
	got_t *g = clientd;

	if (g->n < 128)
		g->seq[g->n++] = m->seq;
}

static int poll_until(tb_subscriber_t *sub, got_t *g, int want_n, int want_rc)
{
	uint64_t until = now_ms() + 5000;

	while (now_ms() < until) {
		int rc = tb_sub_poll(sub, on_msg, g, 64);

		if (want_rc && rc == want_rc)
			return rc;
		if (!want_rc && g->n >= want_n)
			return 0;
		if (rc <= 0)
			nap();
	}
	return TB_ETIMEDOUT;
}

static void write_frame(peer_t *p, uint64_t raddr, uint32_t rkey,
			uint64_t off, uint64_t seq)
{
	union {
		tb_frame_hdr_t hdr;
		uint8_t bytes[64];  /* header + 32 bytes of payload */
	} f = {0};
	struct ibv_sge sge = {.addr = (uintptr_t)&f, .length = 64};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				 .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
				 .imm_data = htobe32(tb_rc_imm(off, seq)),
				 .wr.rdma = {.remote_addr = raddr + off, .rkey = rkey}};
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	tb_frame_init(&f.hdr, 32, 7, 9, seq, 1);
	assert_int_equal(ibv_post_send(p->qp, &wr, &bad), 0);
	assert_int_equal(wait_recvs(p, &wc, 1), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
}

static void subscriber_credits_and_rkey_bounds(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	peer_t p;
	tb_control_msg_t hello, subm;
	tb_control_accept_t a = {.stream_id = 9, .epoch = 1234, .psn = 77,
			     .next_seq = 1, .mtu = TB_CONTROL_MTU_4096};
	int lfd, one = 1, n, first;
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)test_port(4)),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	uint8_t buf[TB_CONTROL_MSG_MAX];
	uint64_t raddr;
	uint32_t rkey;
	got_t g = {0};
	const rec_wr_t *w;

	(void)state;
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	rc_cfg(&cfg, test_port(4), 64 << 10);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_sub_poll(sub, on_msg, &g, 64), TB_NOT_CONNECTED);

	peer_open(&p, 64, 16);   /* our "credit slot" */
	p.fd = accept(lfd, NULL, NULL);
	assert_true(p.fd >= 0);
	assert_true(read_ctl(p.fd, &hello) > 0);
	assert_int_equal(hello.type, TB_CONTROL_HELLO);
	assert_string_equal(hello.hello.token, "right-token");
	assert_true(read_ctl(p.fd, &subm) > 0);
	assert_int_equal(subm.type, TB_CONTROL_SUBSCRIBE);
	assert_int_equal(subm.subscribe.ring_len, 64 << 10);
	assert_int_equal(subm.subscribe.recv_depth, TB_RC_RECV_DEPTH);
	raddr = subm.subscribe.ring_addr;
	rkey = subm.subscribe.rkey;
	a.qpn = p.qp->qp_num;
	memcpy(a.gid, p.gid.raw, 16);
	a.credit_rkey = p.mr->rkey;
	a.credit_addr = (uintptr_t)p.buf;
	send_buf(p.fd, buf, tb_control_encode_accept(buf, sizeof(buf), &a));
	peer_connect_qp(&p, subm.subscribe.qpn, subm.subscribe.gid,
			subm.subscribe.psn);
	/* Its QP is up before it says so. */
	assert_true(read_ctl(p.fd, &hello) > 0);
	assert_int_equal(hello.type, TB_CONTROL_READY);
	assert_int_equal(hello.ready.qpn, subm.subscribe.qpn);

	/* Frames 1..70 (64 bytes each): delivered in order; after 64 the
	 * subscriber re-posts and writes its credit into our slot. */
	first = n_rec;
	for (uint64_t s = 1; s <= 70; s++)
		write_frame(&p, raddr, rkey, (s - 1) * 64, s);
	assert_int_equal(poll_until(sub, &g, 70, 0), 0);
	assert_int_equal(g.n, 70);
	for (int i = 0; i < 70; i++)
		assert_int_equal(g.seq[i], i + 1);
	w = recs_for(subm.subscribe.qpn, first, &n);
	assert_true(n >= 1);
	assert_int_equal(w[0].opcode, IBV_WR_RDMA_WRITE);
	assert_true(w[0].flags & IBV_SEND_INLINE);
	assert_int_equal(w[0].len, 8);
	assert_int_equal(w[0].rkey, p.mr->rkey);
	assert_true(w[0].raddr == (uintptr_t)p.buf);
	/* The last credit written says: all 70 frames consumed, 70 receives
	 * re-posted (idle polls return what a busy one defers). */
	{
		uint64_t until = now_ms() + 5000, c;

		do {
			tb_sub_poll(sub, on_msg, &g, 64);
			memcpy(&c, p.buf, 8);
		} while (c != tb_rc_credit(70 * 64, 70) && now_ms() < until && (nap(), 1));
		assert_true(c == tb_rc_credit(70 * 64, 70));
	}

	/* The ring's rkey reaches the ring alone: past its end is a remote
	 * access error, and the subscriber's queue pair fails with it. */
	{
		uint64_t v = 0;
		struct ibv_sge sge = {.addr = (uintptr_t)&v, .length = 8};
		struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED,
					 .wr.rdma = {.remote_addr = raddr + (64 << 10),
						     .rkey = rkey}};
		struct ibv_send_wr *bad;
		struct ibv_wc wc;

		assert_int_equal(ibv_post_send(p.qp, &wr, &bad), 0);
		assert_int_equal(wait_recvs(&p, &wc, 1), 1);
		assert_int_equal(wc.status, IBV_WC_REM_ACCESS_ERR);
	}
	/* Its receives flush; it reports the publisher lost and goes back to
	 * connecting, never delivering anything more. */
	assert_int_equal(poll_until(sub, &g, 0, TB_PUBLISHER_DEAD), TB_PUBLISHER_DEAD);
	peer_close(&p);
	close(lfd);
	tb_subscriber_close(sub);
}


/* --------------------------------------------- protocol 2 and its fixes */

/* Frames up to 220 bytes go inline (one 256-byte WQE with its 36 bytes of
 * headers), from 221 by reference: 224 crossed into a fifth block. */
static void inline_threshold_fits_one_wqe(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint8_t payload[256] = {0};
	struct ibv_wc wc[4];
	const rec_wr_t *w;
	int n, first;

	(void)state;
	rc_cfg(&cfg, test_port(5), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 64 << 10, 64);
	post_recvs(&p, 64);
	subscribe(&p, test_port(5), "right-token", 64);
	join(&p);
	first = n_rec;
	assert_int_equal(tb_pub_offer(pub, 1, payload, 220 - 32), 1);
	assert_int_equal(tb_pub_offer(pub, 1, payload, 221 - 32), 2);
	assert_int_equal(tb_pub_offer(pub, 1, payload, 224 - 32), 3);
	assert_int_equal(wait_recvs(&p, wc, 3), 3);
	w = recs_for(p.reply.accept.qpn, first, &n);
	assert_int_equal(n, 3);
	assert_int_equal(w[0].len, 220);
	assert_true(w[0].flags & IBV_SEND_INLINE);
	assert_int_equal(w[1].len, 221);
	assert_false(w[1].flags & IBV_SEND_INLINE);
	assert_int_equal(w[2].len, 224);
	assert_false(w[2].flags & IBV_SEND_INLINE);
	peer_close(&p);
	tb_publisher_close(pub);
}

/* Nothing is written to a subscriber before its READY: its QP may not be
 * in RTR yet, and a WRITE would wait out an ACK timeout or fail it. */
static void nothing_is_written_before_ready(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint8_t payload[64] = {0};
	struct ibv_wc wc[8];
	int n, first;

	(void)state;
	rc_cfg(&cfg, test_port(6), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 64 << 10, 64);
	post_recvs(&p, 64);
	subscribe(&p, test_port(6), "right-token", 64);
	assert_int_equal(p.reply.type, TB_CONTROL_ACCEPT);
	/* ACCEPT in hand, our QP still in INIT: the publisher's QP is up
	 * (RTS), but it must not write. */
	usleep(100000);
	first = n_rec;
	for (int i = 0; i < 5; i++)
		assert_int_equal(tb_pub_offer(pub, 1, payload, 64), i + 1);
	recs_for(p.reply.accept.qpn, first, &n);
	assert_int_equal(n, 0);
	/* RTR, READY: from the next frame on it is written. */
	peer_connect_qp(&p, p.reply.accept.qpn, p.reply.accept.gid,
			p.reply.accept.psn);
	send_ready(&p);
	usleep(100000);
	assert_int_equal(tb_pub_offer(pub, 1, payload, 64), 6);
	assert_int_equal(wait_recvs(&p, wc, 1), 1);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(((tb_frame_hdr_t *)p.buf)->seq, 6);
	recs_for(p.reply.accept.qpn, first, &n);
	assert_int_equal(n, 1);
	peer_close(&p);
	tb_publisher_close(pub);
}

/* Each subscriber's credit slot is in a PD of its own: B's rkey, used
 * through A's QP, is a remote access error, and B's slot is untouched. */
static void a_credit_rkey_reaches_its_own_slot_only(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t a, b;
	struct ibv_wc wc[4];
	uint64_t v = tb_rc_credit(12345, 0);
	struct ibv_sge sge = {.addr = (uintptr_t)&v, .length = 8};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad;

	(void)state;
	rc_cfg(&cfg, test_port(7), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&a, 64 << 10, 64);
	peer_open(&b, 64 << 10, 64);
	post_recvs(&a, 64);
	post_recvs(&b, 64);
	subscribe(&a, test_port(7), "right-token", 64);
	subscribe(&b, test_port(7), "right-token", 64);
	join(&a);
	join(&b);
	/* Its own slot, its own key: fine. */
	wr.wr.rdma.remote_addr = a.reply.accept.credit_addr;
	wr.wr.rdma.rkey = a.reply.accept.credit_rkey;
	assert_int_equal(ibv_post_send(a.qp, &wr, &bad), 0);
	assert_int_equal(wait_recvs(&a, wc, 1), 1);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	/* B's slot with B's key, through A's queue pair: refused. */
	wr.wr.rdma.remote_addr = b.reply.accept.credit_addr;
	wr.wr.rdma.rkey = b.reply.accept.credit_rkey;
	assert_int_equal(ibv_post_send(a.qp, &wr, &bad), 0);
	assert_int_equal(wait_recvs(&a, wc, 1), 1);
	assert_int_equal(wc[0].status, IBV_WC_REM_ACCESS_ERR);
	assert_true(*(volatile uint64_t *)(uintptr_t)b.reply.accept.credit_addr !=
		    tb_rc_credit(12345, 0));
	peer_close(&a);
	peer_close(&b);
	tb_publisher_close(pub);
}

/* The publisher takes the smaller MTU, says it in ACCEPT and uses it. */
static void the_path_mtu_is_the_publishers_choice(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;

	(void)state;
	rc_cfg(&cfg, test_port(8), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 64 << 10, 16);
	subscribe_mtu(&p, test_port(8), "right-token", 16, TB_CONTROL_MTU_512);
	assert_int_equal(p.reply.type, TB_CONTROL_ACCEPT);
	assert_int_equal(p.reply.accept.mtu, TB_CONTROL_MTU_512);
	assert_int_equal(rtr_of(p.reply.accept.qpn)->path_mtu, IBV_MTU_512);
	assert_int_equal(rtr_of(p.reply.accept.qpn)->ah_attr.grh.traffic_class, 106);
	peer_close(&p);
	tb_publisher_close(pub);
}

/* However many skips pile up while completions stall, each gets its
 * fence: the record of signalled requests has a slot per send-queue
 * entry and cannot overflow (it had 32). */
static void a_fence_for_every_skip_while_completions_stall(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint8_t payload[64] = {0};
	struct ibv_wc wc[4];
	const rec_wr_t *w;
	int n, first, fences = 0, writes = 0;
	uint64_t pos = 0;
	uint32_t regranted = 0;

	(void)state;
	rc_cfg(&cfg, test_port(9), 1 << 20);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 1 << 20, 256);
	post_recvs(&p, 1);
	subscribe(&p, test_port(9), "right-token", 1);  /* one frame per credit */
	join(&p);
	stall_spare = p.cq;
	stall = 1;
	first = n_rec;
	/* 40 rounds of: written, skipped (fence), credit back. */
	for (int i = 0; i < 40; i++) {
		assert_true(tb_pub_offer(pub, 1, payload, 64) > 0);
		assert_true(tb_pub_offer(pub, 1, payload, 64) > 0);
		assert_int_equal(wait_recvs(&p, wc, 1), 1);
		post_recvs(&p, 1);
		pos += 96;
		regranted++;
		give_credit(&p, pos, regranted);
	}
	w = recs_for(p.reply.accept.qpn, first, &n);
	for (int i = 0; i < n; i++) {
		if (w[i].opcode == IBV_WR_RDMA_WRITE && w[i].len == 0 &&
		    (w[i].flags & IBV_SEND_SIGNALED)) {
			fences++;
			/* Its wr_id counts every request up to it. */
			assert_int_equal(w[i].wr_id, (uint64_t)(writes + fences));
		} else {
			writes++;
		}
	}
	assert_int_equal(writes, 40);
	assert_int_equal(fences, 40);
	/* The NIC reports again: the stream goes on. */
	stall = 0;
	assert_true(tb_pub_offer(pub, 1, payload, 64) > 0);
	assert_int_equal(wait_recvs(&p, wc, 1), 1);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	stall_spare = NULL;
	peer_close(&p);
	tb_publisher_close(pub);
}

/* Back-pressure while the publisher's send completions stall (a NIC that
 * has stopped reporting): credit for 2,048 frames and a ring for 10,922,
 * but a send queue of TB_RC_SQ_DEPTH requests that nothing empties.  The
 * offers must stop with TB_BACK_PRESSURED before the queue is full, not
 * skip the subscriber (no fence, no gap); once completions come again the
 * stream goes on, and every frame arrives in order. */
static void back_pressure_waits_while_completions_stall(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint8_t payload[64] = {0};
	struct ibv_wc wc[64];
	const rec_wr_t *w;
	int n, first, sent = 0, got = 0;
	int64_t rc = 0;

	(void)state;
	rc_cfg(&cfg, test_port(31), 1 << 20);
	cfg.slow_consumer = TB_SLOW_BACKPRESSURE;
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 1 << 20, 2048);
	post_recvs(&p, 2048);
	subscribe(&p, test_port(31), "right-token", 2048);
	join(&p);
	stall_spare = p.cq;
	stall = 1;
	first = n_rec;
	while (sent < 2 * (int)TB_RC_SQ_DEPTH &&
	       (rc = tb_pub_offer(pub, 1, payload, 64)) > 0)
		sent++;
	assert_int_equal(rc, TB_BACK_PRESSURED);
	assert_true(sent < (int)TB_RC_SQ_DEPTH);
	/* The NIC reports again: the stream goes on, nothing skipped. */
	stall = 0;
	for (int i = 0; i < 100; i++) {
		uint64_t until = now_ms() + 5000;

		while ((rc = tb_pub_offer(pub, 1, payload, 64)) == TB_BACK_PRESSURED &&
		       now_ms() < until)
			nap();
		assert_true(rc > 0);
		sent++;
	}
	while (got < sent) {
		int k = wait_recvs(&p, wc, sent - got < 64 ? sent - got : 64);

		assert_true(k > 0);
		for (int i = 0; i < k; i++)
			assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
		got += k;
	}
	w = recs_for(p.reply.accept.qpn, first, &n);
	assert_int_equal(n, sent);
	for (int i = 0; i < n; i++) {
		assert_int_equal(w[i].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
		assert_int_equal(((const tb_frame_hdr_t *)(p.buf + 96 * (size_t)i))->seq,
				 i + 1);
	}
	stall_spare = NULL;
	peer_close(&p);
	tb_publisher_close(pub);
}

/* Back-pressure with frames large for the publisher's ring: 1 KiB
 * messages in a 64 KiB ring, so the TB_RC_SIGNAL_EVERY requests between
 * two signalled ones span more than half of it, and only a fence can report them.  All
 * 300 arrive in order; the publisher waits, it never drops or skips. */
static void back_pressure_with_large_frames_goes_on(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	static uint8_t payload[1024];
	struct ibv_wc wc[64];
	const rec_wr_t *w;
	int n, first, got = 0;

	(void)state;
	rc_cfg(&cfg, test_port(32), 64 << 10);
	cfg.slow_consumer = TB_SLOW_BACKPRESSURE;
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 1 << 20, 512);
	post_recvs(&p, 512);
	subscribe(&p, test_port(32), "right-token", 512);
	join(&p);
	first = n_rec;
	for (int i = 0; i < 300; i++) {
		uint64_t until = now_ms() + 5000;
		int64_t rc;

		while ((rc = tb_pub_offer(pub, 1, payload, sizeof(payload))) ==
			       TB_BACK_PRESSURED && now_ms() < until)
			;
		assert_int_equal(rc, i + 1);
	}
	while (got < 300) {
		int k = wait_recvs(&p, wc, 300 - got < 64 ? 300 - got : 64);

		assert_true(k > 0);
		for (int i = 0; i < k; i++)
			assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
		got += k;
	}
	w = recs_for(p.reply.accept.qpn, first, &n);
	for (int i = 0, frames = 0; i < n; i++) {
		if (w[i].opcode != IBV_WR_RDMA_WRITE_WITH_IMM)
			continue;   /* a fence */
		assert_int_equal(((const tb_frame_hdr_t *)w[i].data)->seq,
				 ++frames);
	}
	stall_spare = NULL;
	peer_close(&p);
	tb_publisher_close(pub);
}

/* The posts (ibv_post_send calls) among `n` records. */
static int posts_in(const rec_wr_t *w, int n)
{
	int posts = 0;

	for (int i = 0; i < n; i++)
		posts += i == 0 || w[i].post != w[i - 1].post;
	return posts;
}

/* A lapping stream with frames large for the publisher's ring: 1 KiB
 * messages in a 64 KiB ring, a subscriber that keeps up.  64 such frames
 * span more than half the ring, so a signal by count alone (every
 * TB_RC_SIGNAL_EVERY requests) would leave the pin behind until the publisher drops the subscriber for writes that
 * never reported.  A signalled request comes once the frames since the
 * last span a quarter of the ring instead: all 600 arrive in order, the
 * subscriber stays, and no more than a quarter of the ring (and the
 * frame that passes it) is ever in flight unsignalled.  `batched`: the
 * same with batch_us set and a flush after every two offers, where the
 * frames go onto the subscriber's chain, the signal riding in it. */
static void lapping_large_frames(int port, int batched)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	static uint8_t payload[1024];
	struct ibv_wc wc[2];
	const rec_wr_t *w;
	int n, first, frames = 0, signalled = 0;
	uint64_t since = 0, most = 0;
	const uint64_t quarter = (64 << 10) / 4, space = 1056;
	const int k = batched ? 2 : 1;   /* frames a flush */

	rc_cfg(&cfg, port, 64 << 10);
	assert_int_equal(cfg.slow_consumer, TB_SLOW_LAP);
	if (batched)
		cfg.batch_us = 1000000;  /* the flush posts, not a deadline */
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 1 << 20, 1024);
	post_recvs(&p, 1024);
	subscribe(&p, port, "right-token", 1024);
	join(&p);
	first = n_rec;
	for (int i = 0; i < 600; i += k) {
		for (int j = 0; j < k; j++)
			assert_int_equal(tb_pub_offer(pub, 1, payload, sizeof(payload)),
					 i + j + 1);
		if (batched)
			assert_int_equal(tb_pub_flush(pub), 0);
		/* It keeps up: what was sent has landed before the next. */
		assert_int_equal(wait_recvs(&p, wc, k), k);
		for (int j = 0; j < k; j++) {
			assert_int_equal(wc[j].status, IBV_WC_SUCCESS);
			assert_int_equal(((const tb_frame_hdr_t *)
					  (p.buf + space * (size_t)(i + j)))->seq,
					 i + j + 1);
		}
	}
	assert_int_equal(tb_pub_subscribers(pub), 1);
	w = recs_for(p.reply.accept.qpn, first, &n);
	for (int i = 0; i < n; i++) {
		if (w[i].opcode != IBV_WR_RDMA_WRITE_WITH_IMM)
			continue;   /* a fence */
		assert_int_equal(((const tb_frame_hdr_t *)w[i].data)->seq, ++frames);
		since += space;
		if (since > most)
			most = since;
		if (w[i].flags & IBV_SEND_SIGNALED) {
			signalled++;
			since = 0;
		}
	}
	assert_int_equal(frames, 600);
	assert_true(most <= quarter + space);
	/* Not one a frame either: about one in quarter / space. */
	assert_true(signalled >= 600 / 16 && signalled <= 600 / 15 + 2);
	/* Batched, the frames went two a post, but for the slow path's
	 * steps that post what is chained before their own (the anchor's,
	 * and a reap about once a quarter ring); else one a post. */
	if (batched)
		assert_true(posts_in(w, n) <= 600 / 2 + 600 / 15 + 2);
	else
		assert_int_equal(posts_in(w, n), n);
	peer_close(&p);
	tb_publisher_close(pub);
}

static void a_lapping_stream_signals_large_frames_by_bytes(void **state)
{
	(void)state;
	lapping_large_frames(test_port(33), 0);
}

static void a_batched_stream_signals_large_frames_by_bytes(void **state)
{
	(void)state;
	lapping_large_frames(test_port(34), 1);
}

/* A heartbeat to a subscriber the publisher is skipping names the range:
 * on a quiet stream nothing else would tell it. */
static void heartbeats_name_the_skipped_range(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint8_t payload[64] = {0};
	tb_control_msg_t m;
	int found = 0;

	(void)state;
	rc_cfg(&cfg, test_port(10), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 64 << 10, 64);
	post_recvs(&p, 8);
	subscribe(&p, test_port(10), "right-token", 8);
	join(&p);
	for (int i = 0; i < 20; i++)
		assert_int_equal(tb_pub_offer(pub, 1, payload, 64), i + 1);
	/* Within a few heartbeats (50 ms each): skipped 9..20. */
	for (int i = 0; i < 10 && !found; i++) {
		assert_true(read_ctl(p.fd, &m) > 0);
		assert_int_equal(m.type, TB_CONTROL_HEARTBEAT);
		if (m.heartbeat.skip_first) {
			assert_int_equal(m.heartbeat.skip_first, 9);
			assert_int_equal(m.heartbeat.skip_last, 20);
			found = 1;
		}
	}
	assert_true(found);
	/* Credit back and one more frame: it is written, and the range is
	 * gone from the next heartbeats. */
	post_recvs(&p, 8);
	give_credit(&p, 8 * 96, 8);
	assert_int_equal(tb_pub_offer(pub, 1, payload, 64), 21);
	for (int i = 0; i < 3; i++) {
		assert_true(read_ctl(p.fd, &m) > 0);
		if (i > 0)
			assert_int_equal(m.heartbeat.skip_first, 0);
	}
	peer_close(&p);
	tb_publisher_close(pub);
}

static void *closer_main(void *arg)
{
	tb_publisher_close(arg);
	return NULL;
}

/* Close waits for a subscriber's last writes to complete (here its
 * completions stall: the whole DRAIN_TIMEOUT_NS, a second) with its
 * control thread stopped; it keeps beating meanwhile (every 50 ms), or a
 * subscriber with a liveness shorter than that drain judges it dead with
 * the last frames on their way, and never reads the BYE. */
static void close_beats_while_it_drains(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint8_t payload[64] = {0};
	struct ibv_wc wc[1];
	tb_control_msg_t m;
	pthread_t closer;
	uint64_t t0;
	int beats = 0, rc;

	(void)state;
	rc_cfg(&cfg, test_port(27), 1 << 20);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 1 << 20, 64);
	post_recvs(&p, 8);
	subscribe(&p, test_port(27), "right-token", 8);
	join(&p);
	stall_spare = p.cq;
	stall = 1;
	assert_int_equal(tb_pub_offer(pub, 1, payload, 64), 1);
	assert_int_equal(wait_recvs(&p, wc, 1), 1);  /* here; not reaped */
	assert_int_equal(pthread_create(&closer, NULL, closer_main, pub), 0);
	t0 = now_ms();
	while ((rc = read_ctl(p.fd, &m)) > 0 && m.type == TB_CONTROL_HEARTBEAT)
		beats++;
	t0 = now_ms() - t0;
	assert_int_equal(pthread_join(closer, NULL), 0);
	stall = 0;                 /* before any assertion: the next tests */
	stall_spare = NULL;
	peer_close(&p);
	assert_true(rc > 0);
	assert_int_equal(m.type, TB_CONTROL_BYE);
	assert_int_equal(m.bye.reason, TB_CONTROL_BYE_CLOSED);
	assert_true(t0 >= 900);                       /* it did drain */
	/* A second at 50 ms: about 20; the ones the control thread sent
	 * before it stopped are 2 at most. */
	assert_true(beats >= 6);
}

/* Wrong tokens, one connection after another from one address: each
 * makes the next wait twice as long, so a second of guessing gets a
 * handful of answers, not thousands. */
static void token_guessing_is_slowed(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint64_t until;
	int answered = 0, tries = 0;

	(void)state;
	rc_cfg(&cfg, test_port(11), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 64 << 10, 16);
	until = now_ms() + 1000;
	while (now_ms() < until) {
		tb_control_hello_t h = {.stream_id = 9};
		uint8_t buf[TB_CONTROL_MSG_MAX];
		tb_control_msg_t m;

		snprintf(h.token, sizeof(h.token), "guess-%d", tries++);
		p.fd = tcp_connect(test_port(11));
		send_buf(p.fd, buf, tb_control_encode_hello(buf, sizeof(buf), &h));
		if (read_ctl(p.fd, &m) > 0) {
			assert_int_equal(m.type, TB_CONTROL_REJECT);
			assert_int_equal(m.reject.reason, TB_CONTROL_REJ_BAD_TOKEN);
			answered++;
		}
		close(p.fd);
		p.fd = -1;
		nap();
	}
	print_message("token guessing: %d tries, %d answered in 1 s\n", tries,
		      answered);
	/* 0, 250, 750 ms: three answers (four at the outside). */
	assert_true(answered >= 2 && answered <= 4);
	peer_close(&p);
	tb_publisher_close(pub);
}

/* --------------------------------------------- memlock, in a child */

/* Drops CAP_IPC_LOCK from this process's effective set. */
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
	struct rlimit rl = {.rlim_cur = 1 << 20, .rlim_max = 1 << 20};
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	int rc;

	drop_cap_ipc_lock();
	if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
		return 92;
	rc_cfg(&cfg, (int)proc_free_port(), 8 << 20);
	rc = tb_subscriber_open(&sub, &cfg);
	if (rc != TB_ENOMEM)
		return 1;
	if (!strstr(tb_errmsg(), "an rc subscriber") ||
	    !strstr(tb_errmsg(), "ulimit -l") ||
	    !strstr(tb_errmsg(), "LimitMEMLOCK=") ||
	    !strstr(tb_errmsg(), "CAP_IPC_LOCK") ||
	    !strstr(tb_errmsg(), "1.0 MiB"))
		return 2;
	rc = tb_publisher_open(&pub, &cfg);
	if (rc != TB_ENOMEM || !strstr(tb_errmsg(), "an rc publisher") ||
	    !strstr(tb_errmsg(), "ulimit -l"))
		return 3;
	/* A ring that fits: both open. */
	rc_cfg(&cfg, (int)proc_free_port(), 64 << 10);
	if (tb_subscriber_open(&sub, &cfg) != 0)
		return 4;
	tb_subscriber_close(sub);
	return 0;
}

/* Under RLIMIT_MEMLOCK of 1 MiB and without CAP_IPC_LOCK, an 8 MiB ring
 * is refused at open with what to change, not at its first verb. */
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

/* ------------------------------------------------- version 1 peers */

/* A version 1 subscriber is refused in version 1, with both versions. */
static void a_version_one_subscriber_is_refused(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_control_hello_t h = {.stream_id = 9};
	uint8_t buf[TB_CONTROL_MSG_MAX];
	tb_control_msg_t m;
	size_t have = 0;
	int fd, n;

	(void)state;
	rc_cfg(&cfg, test_port(13), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	snprintf(h.token, sizeof(h.token), "right-token");
	n = tb_control_encode_hello(buf, sizeof(buf), &h);
	buf[2] = 1;   /* HELLO is laid out the same in version 1 */
	fd = tcp_connect(test_port(13));
	send_buf(fd, buf, n);
	for (uint64_t until = now_ms() + 5000; have < 216 && now_ms() < until;) {
		ssize_t k = recv(fd, buf + have, sizeof(buf) - have, 0);

		if (k <= 0)
			break;
		have += (size_t)k;
	}
	assert_int_equal(have, 216);
	assert_int_equal(buf[2], 1);
	assert_int_equal(tb_control_decode_refusal(buf, have, &m), 216);
	assert_int_equal(m.reject.reason, TB_CONTROL_REJ_BAD_VERSION);
	assert_non_null(strstr(m.reject.text, "version 2"));
	assert_non_null(strstr(m.reject.text, "version 1"));
	assert_non_null(strstr(m.reject.text, "upgrade"));
	close(fd);
	tb_publisher_close(pub);
}

/* A listening "publisher" for the real subscriber: accepts, reads HELLO
 * and SUBSCRIBE. */
static int fake_pub_listen(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	return lfd;
}

static void fake_pub_hello(peer_t *p, int lfd, tb_control_msg_t *subm)
{
	tb_control_msg_t hello;

	p->fd = accept(lfd, NULL, NULL);
	assert_true(p->fd >= 0);
	assert_true(read_ctl(p->fd, &hello) > 0);
	assert_int_equal(hello.type, TB_CONTROL_HELLO);
	assert_true(read_ctl(p->fd, subm) > 0);
	assert_int_equal(subm->type, TB_CONTROL_SUBSCRIBE);
}

/* ACCEPT at path MTU `mtu`, our QP up, and the subscriber's READY. */
static void fake_pub_accept(peer_t *p, const tb_control_msg_t *subm, uint8_t mtu)
{
	tb_control_accept_t a = {.stream_id = 9, .epoch = 99, .psn = 77,
				 .next_seq = 1, .mtu = mtu};
	uint8_t buf[TB_CONTROL_MSG_MAX];
	tb_control_msg_t m;

	a.qpn = p->qp->qp_num;
	memcpy(a.gid, p->gid.raw, 16);
	a.credit_rkey = p->mr->rkey;
	a.credit_addr = (uintptr_t)p->buf;
	send_buf(p->fd, buf, tb_control_encode_accept(buf, sizeof(buf), &a));
	peer_connect_qp(p, subm->subscribe.qpn, subm->subscribe.gid,
			subm->subscribe.psn);
	assert_true(read_ctl(p->fd, &m) > 0);
	assert_int_equal(m.type, TB_CONTROL_READY);
}

/* A version 1 publisher's refusal reaches the subscriber's poll as
 * TB_EFORMAT, saying which side to upgrade. */
static void a_version_one_publisher_is_named(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	tb_control_reject_t r = {.stream_id = 9,
				 .reason = TB_CONTROL_REJ_MALFORMED};
	uint8_t buf[TB_CONTROL_MSG_MAX];
	tb_control_msg_t subm;
	got_t g = {0};
	peer_t p;
	int lfd, rc = 0;

	(void)state;
	lfd = fake_pub_listen(test_port(14));
	rc_cfg(&cfg, test_port(14), 64 << 10);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	peer_open(&p, 64, 16);
	fake_pub_hello(&p, lfd, &subm);
	snprintf(r.text, sizeof(r.text), "control HELLO: protocol version 2 is "
		 "not supported; this peer speaks version 1");
	send_buf(p.fd, buf, tb_control_encode_reject_in(buf, sizeof(buf), &r, 1));
	for (uint64_t until = now_ms() + 5000; now_ms() < until; nap()) {
		rc = tb_sub_poll(sub, on_msg, &g, 64);
		if (rc != TB_NOT_CONNECTED && rc != 0)
			break;
	}
	assert_int_equal(rc, TB_EFORMAT);
	assert_non_null(strstr(tb_errmsg(), "version 1"));
	assert_non_null(strstr(tb_errmsg(), "upgrade tickbus on the publisher"));
	peer_close(&p);
	close(lfd);
	tb_subscriber_close(sub);
}

/* The subscriber's QP follows the publisher's path: the MTU in ACCEPT,
 * not its own port's. */
static void the_subscriber_uses_the_accepted_mtu(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	tb_control_msg_t subm;
	peer_t p;
	int lfd;

	(void)state;
	lfd = fake_pub_listen(test_port(15));
	rc_cfg(&cfg, test_port(15), 64 << 10);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	peer_open(&p, 64, 16);
	fake_pub_hello(&p, lfd, &subm);
	assert_int_equal(subm.subscribe.mtu, TB_CONTROL_MTU_4096);
	assert_int_equal(subm.subscribe.lid, 0);
	fake_pub_accept(&p, &subm, TB_CONTROL_MTU_256);
	assert_int_equal(rtr_of(subm.subscribe.qpn)->path_mtu, IBV_MTU_256);
	peer_close(&p);
	close(lfd);
	tb_subscriber_close(sub);
}

/* Dropped by a live publisher (BYE timeout): TB_EVICTED, never
 * TB_PUBLISHER_DEAD; then it connects again. */
static void dropped_by_the_publisher_is_evicted(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	tb_control_msg_t subm;
	tb_control_bye_t bye = {.reason = TB_CONTROL_BYE_TIMEOUT};
	uint8_t buf[TB_CONTROL_MSG_MAX];
	got_t g = {0};
	peer_t p;
	int lfd, rc = 0, again;

	(void)state;
	lfd = fake_pub_listen(test_port(16));
	rc_cfg(&cfg, test_port(16), 64 << 10);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	peer_open(&p, 64, 16);
	fake_pub_hello(&p, lfd, &subm);
	fake_pub_accept(&p, &subm, TB_CONTROL_MTU_4096);
	send_buf(p.fd, buf, tb_control_encode_bye(buf, sizeof(buf), &bye));
	for (uint64_t until = now_ms() + 5000; now_ms() < until; nap()) {
		rc = tb_sub_poll(sub, on_msg, &g, 64);
		if (rc < 0 && rc != TB_NOT_CONNECTED)
			break;
	}
	assert_int_equal(rc, TB_EVICTED);
	assert_string_not_equal(tb_strerror(TB_EVICTED), "?");
	/* It comes back. */
	again = accept(lfd, NULL, NULL);
	assert_true(again >= 0);
	close(again);
	peer_close(&p);
	close(lfd);
	tb_subscriber_close(sub);
}

/* ------------------------------------------------------------ reading back */

/* HELLO + SUBSCRIBE asking to read back, from `p` (whose buffer's first
 * half is its ring; READs land in the second); the answer in p->reply. */
static void subscribe_read(peer_t *p, int port, uint32_t recv_depth)
{
	tb_control_hello_t h = {.stream_id = 9};
	tb_control_subscribe_t s = {.stream_id = 9, .transport = TB_TRANSPORT_RC,
				.mtu = TB_CONTROL_MTU_1024,
				.flags = TB_CONTROL_SUB_F_CREDIT_SLOT |
					 TB_CONTROL_SUB_F_READ,
				.ring_addr = (uintptr_t)p->buf, .ring_len = p->len / 2,
				.rkey = p->mr->rkey, .qpn = p->qp->qp_num, .psn = 5,
				.recv_depth = recv_depth};
	uint8_t buf[TB_CONTROL_MSG_MAX];

	snprintf(h.client_id, sizeof(h.client_id), "reader");
	snprintf(h.token, sizeof(h.token), "right-token");
	memcpy(s.gid, p->gid.raw, 16);
	p->psn = s.psn;
	p->fd = tcp_connect(port);
	send_buf(p->fd, buf, tb_control_encode_hello(buf, sizeof(buf), &h));
	send_buf(p->fd, buf, tb_control_encode_subscribe(buf, sizeof(buf), &s));
	assert_true(read_ctl(p->fd, &p->reply) > 0);
	assert_int_equal(p->reply.type, TB_CONTROL_ACCEPT);
}

/* One RDMA READ or WRITE of `len` bytes between `raddr` (with `rkey`) and
 * the second half of p's buffer, through p's QP: the completion status. */
static int peer_rdma(peer_t *p, enum ibv_wr_opcode op, uint64_t raddr,
		     uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)p->buf + p->len / 2,
			      .length = len, .lkey = p->mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = raddr, .rkey = rkey}};
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	assert_int_equal(ibv_post_send(p->qp, &wr, &bad), 0);
	assert_int_equal(wait_recvs(p, &wc, 1), 1);
	return (int)wc.status;
}

/* A reader joined to the publisher on `port`: subscribed with READ, its QP
 * up, in the publisher's table. */
static void reader_join(peer_t *p, int port)
{
	peer_open(p, 128 << 10, 64);
	post_recvs(p, 64);
	subscribe_read(p, port, 64);
	join(p);
}

/* The key a subscriber reads back with reaches the publisher's ring and
 * its position word for reading, and nothing else: not past the ring, not
 * past the word, not for writing, not through another subscriber's QP;
 * the credit slot's key cannot read. */
static void a_read_key_reads_the_ring_alone(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t a, b;
	uint8_t payload[64];
	struct ibv_wc wc[4];
	const tb_control_accept_t *g;
	uint64_t word;

	(void)state;
	rc_cfg(&cfg, test_port(18), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	reader_join(&a, test_port(18));
	g = &a.reply.accept;
	assert_int_equal(g->flags, TB_CONTROL_ACC_F_READ);
	assert_true(g->read_len == 256 << 10);
	assert_true(g->rd_atomic >= 1 && g->ring_id != 0);
	for (int i = 0; i < 3; i++) {
		memset(payload, 0x30 + i, sizeof(payload));
		assert_int_equal(tb_pub_offer(pub, 5, payload, 64), i + 1);
	}
	assert_int_equal(wait_recvs(&a, wc, 3), 3);
	/* Its ring, as it wrote it to us; its position word after them. */
	assert_int_equal(peer_rdma(&a, IBV_WR_RDMA_READ, g->read_addr,
				   g->read_rkey, 3 * 96), IBV_WC_SUCCESS);
	assert_memory_equal(a.buf + (64 << 10), a.buf + TB_RC_ANCHOR_LEN, 3 * 96);
	assert_int_equal(((tb_frame_hdr_t *)(a.buf + (64 << 10) + 192))->seq, 3);
	assert_int_equal(peer_rdma(&a, IBV_WR_RDMA_READ, g->pos_addr, g->pos_rkey,
				   8), IBV_WC_SUCCESS);
	memcpy(&word, a.buf + (64 << 10), 8);
	assert_true(word == 3 * 96);
	/* Past its end: refused, and the queue pair fails with it. */
	assert_int_equal(peer_rdma(&a, IBV_WR_RDMA_READ,
				   g->read_addr + g->read_len - 8, g->read_rkey, 16),
			 IBV_WC_REM_ACCESS_ERR);
	peer_close(&a);

	reader_join(&a, test_port(18));
	reader_join(&b, test_port(18));
	/* Writing through the read key: refused; the ring is as it was. */
	memset(a.buf + (64 << 10), 0xee, 96);
	assert_int_equal(peer_rdma(&a, IBV_WR_RDMA_WRITE, a.reply.accept.read_addr,
				   a.reply.accept.read_rkey, 96),
			 IBV_WC_REM_ACCESS_ERR);
	assert_int_equal(peer_rdma(&b, IBV_WR_RDMA_READ, b.reply.accept.read_addr,
				   b.reply.accept.read_rkey, 96), IBV_WC_SUCCESS);
	assert_int_equal(((tb_frame_hdr_t *)(b.buf + (64 << 10)))->seq, 1);
	/* The word's key reaches the word alone. */
	assert_int_equal(peer_rdma(&b, IBV_WR_RDMA_READ, b.reply.accept.pos_addr,
				   b.reply.accept.pos_rkey, 16),
			 IBV_WC_REM_ACCESS_ERR);
	peer_close(&a);
	peer_close(&b);

	reader_join(&a, test_port(18));
	reader_join(&b, test_port(18));
	/* B's read key through A's queue pair: another PD, refused. */
	assert_int_equal(peer_rdma(&a, IBV_WR_RDMA_READ, b.reply.accept.read_addr,
				   b.reply.accept.read_rkey, 96),
			 IBV_WC_REM_ACCESS_ERR);
	/* The credit slot's key cannot read. */
	assert_int_equal(peer_rdma(&b, IBV_WR_RDMA_READ, b.reply.accept.credit_addr,
				   b.reply.accept.credit_rkey, 8),
			 IBV_WC_REM_ACCESS_ERR);
	peer_close(&a);
	peer_close(&b);

	/* Not asked, not granted. */
	peer_open(&a, 64 << 10, 16);
	subscribe(&a, test_port(18), "right-token", 16);
	assert_int_equal(a.reply.type, TB_CONTROL_ACCEPT);
	assert_int_equal(a.reply.accept.flags, 0);
	assert_true(a.reply.accept.read_rkey == 0 && a.reply.accept.ring_id == 0);
	peer_close(&a);
	tb_publisher_close(pub);
}

/* Before the first frame after READY and after every skip, a reading
 * subscriber gets an anchor: a 32-byte padding frame naming where that
 * frame is in the publisher's ring; a subscriber that does not read back
 * gets none (publisher_posts_exact_work_requests). */
static void the_publisher_anchors_where_a_reader_resumes(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint8_t payload[64] = {0};
	struct ibv_wc wc[32];
	const rec_wr_t *w;
	const tb_frame_hdr_t *h;
	int n, first;

	(void)state;
	rc_cfg(&cfg, test_port(17), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 128 << 10, 64);
	post_recvs(&p, 8);
	subscribe_read(&p, test_port(17), 8);
	join(&p);
	first = n_rec;
	for (int i = 0; i < 20; i++)
		assert_int_equal(tb_pub_offer(pub, 1, payload, 64), i + 1);
	assert_int_equal(wait_recvs(&p, wc, 8), 8);
	w = recs_for(p.reply.accept.qpn, first, &n);
	/* The anchor, frames 1..8, the fence at the skip. */
	assert_int_equal(n, 10);
	assert_int_equal(w[0].opcode, IBV_WR_RDMA_WRITE);
	assert_true(w[0].flags & IBV_SEND_INLINE);
	assert_int_equal(w[0].len, TB_RC_ANCHOR_LEN);
	assert_true(w[0].raddr == (uintptr_t)p.buf);
	h = (const tb_frame_hdr_t *)w[0].data;
	assert_int_equal(h->type, TB_FRAME_PAD);
	assert_int_equal(h->template_id, TB_RC_ANCHOR);
	assert_int_equal(h->length, TB_RC_ANCHOR_LEN);
	assert_int_equal(h->seq, 1);
	assert_true(h->publish_ns == 0);      /* frame 1 is at 0 in its ring */
	assert_int_equal(w[1].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
	assert_int_equal(w[1].imm, tb_rc_imm(32, 1));
	for (int i = 2; i < 9; i++)
		assert_int_equal(w[i].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
	assert_int_equal(w[9].len, 0);        /* the fence */

	/* Credit back: it resumes at 21, behind an anchor naming 21's place
	 * in its ring (20 frames of 96 bytes in). */
	post_recvs(&p, 8);
	give_credit(&p, 32 + 8 * 96, 8);
	first = n_rec;
	assert_int_equal(tb_pub_offer(pub, 1, payload, 64), 21);
	assert_int_equal(wait_recvs(&p, wc, 1), 1);
	w = recs_for(p.reply.accept.qpn, first, &n);
	assert_int_equal(n, 2);
	h = (const tb_frame_hdr_t *)w[0].data;
	assert_int_equal(h->template_id, TB_RC_ANCHOR);
	assert_int_equal(h->seq, 21);
	assert_true(h->publish_ns == 20 * 96);
	assert_true(w[0].raddr == (uintptr_t)p.buf + 32 + 8 * 96);
	assert_int_equal(w[1].imm, tb_rc_imm(64 + 8 * 96, 21));
	/* ... and there it is. */
	assert_int_equal(peer_rdma(&p, IBV_WR_RDMA_READ, p.reply.accept.read_addr +
				   20 * 96, p.reply.accept.read_rkey, 32),
			 IBV_WC_SUCCESS);
	assert_int_equal(((tb_frame_hdr_t *)(p.buf + (64 << 10)))->seq, 21);
	/* Then no more anchors. */
	first = n_rec;
	assert_int_equal(tb_pub_offer(pub, 1, payload, 64), 22);
	assert_int_equal(wait_recvs(&p, wc, 1), 1);
	w = recs_for(p.reply.accept.qpn, first, &n);
	assert_int_equal(n, 1);
	assert_int_equal(w[0].imm, tb_rc_imm(64 + 9 * 96, 22));
	peer_close(&p);
	tb_publisher_close(pub);
}

/* A publisher of the test's own, for the real subscriber, that grants
 * read-back: its ring is a real ring (ring.h) with its positions in a
 * word registered for reading, and it writes what it chooses to the
 * subscriber -- anchors, frames, skips -- by hand. */
typedef struct fake_pub {
	peer_t p;                 /* QP, credit slot (p.buf), socket */
	int lfd;
	tb_control_msg_t subm;    /* the subscriber's SUBSCRIBE */
	uint8_t *mem;
	struct ibv_mr *ring_mr, *pos_mr;
	_Atomic uint64_t *pos;    /* intent, tail */
	tb_ring_t ring;
	uint64_t at[2048];        /* where each sequence is in the ring */
	uint64_t seq;             /* the last one in it */
	uint64_t sub_off;         /* its next write into the subscriber's ring */
	uint64_t anchor_skew;     /* added to what its anchors say: a lie */
} fake_pub_t;

#define FP_RING (64u << 10)

static void fp_open(fake_pub_t *fp, int port)
{
	struct ibv_qp_attr a = {.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						   IBV_ACCESS_REMOTE_READ};

	memset(fp, 0, sizeof(*fp));
	fp->lfd = fake_pub_listen(port);
	peer_open(&fp->p, 64, 16);
	/* READs of our ring come to this QP (at the path MTU our ACCEPT
	 * names, 1024 as peer_connect_qp sets it: a READ response of
	 * another MTU is a bad response). */
	assert_int_equal(ibv_modify_qp(fp->p.qp, &a, IBV_QP_ACCESS_FLAGS), 0);
	assert_int_equal(posix_memalign((void **)&fp->mem, 4096, FP_RING + 4096), 0);
	memset(fp->mem, 0, FP_RING + 4096);
	fp->pos = (_Atomic uint64_t *)(fp->mem + FP_RING);
	fp->ring_mr = ibv_reg_mr(fp->p.pd, fp->mem, FP_RING, IBV_ACCESS_REMOTE_READ);
	fp->pos_mr = ibv_reg_mr(fp->p.pd, fp->mem + FP_RING, 8, IBV_ACCESS_REMOTE_READ);
	assert_non_null(fp->ring_mr);
	assert_non_null(fp->pos_mr);
	tb_ring_init_at(&fp->ring, fp->mem, FP_RING, 9, (tb_ring_lap_t *)(void *)fp->pos);
}

static void fp_close(fake_pub_t *fp)
{
	ibv_dereg_mr(fp->ring_mr);
	ibv_dereg_mr(fp->pos_mr);
	peer_close(&fp->p);
	close(fp->lfd);
	free(fp->mem);
}

/* HELLO, SUBSCRIBE (asking to read back), ACCEPT granting it with
 * `rkey` for the ring, READY. */
static void fp_accept(fake_pub_t *fp, uint32_t rkey)
{
	tb_control_accept_t a = {.stream_id = 9, .epoch = 99, .psn = 77,
				 .next_seq = 1, .mtu = TB_CONTROL_MTU_1024,
				 .flags = TB_CONTROL_ACC_F_READ, .rd_atomic = 1,
				 .read_len = FP_RING, .ring_id = 0x5eed};
	uint8_t buf[TB_CONTROL_MSG_MAX];
	tb_control_msg_t m;

	fake_pub_hello(&fp->p, fp->lfd, &fp->subm);
	assert_true(fp->subm.subscribe.flags & TB_CONTROL_SUB_F_READ);
	a.qpn = fp->p.qp->qp_num;
	memcpy(a.gid, fp->p.gid.raw, 16);
	a.credit_rkey = fp->p.mr->rkey;
	a.credit_addr = (uintptr_t)fp->p.buf;
	a.read_addr = (uintptr_t)fp->mem;
	a.read_rkey = rkey;
	a.pos_addr = (uintptr_t)fp->pos;
	a.pos_rkey = fp->pos_mr->rkey;
	send_buf(fp->p.fd, buf, tb_control_encode_accept(buf, sizeof(buf), &a));
	peer_connect_qp(&fp->p, fp->subm.subscribe.qpn, fp->subm.subscribe.gid,
			fp->subm.subscribe.psn);
	assert_true(read_ctl(fp->p.fd, &m) > 0);
	assert_int_equal(m.type, TB_CONTROL_READY);
	fp->sub_off = 0;
}

/* Publishes sequences up to `last` into our ring only (64-byte payloads
 * that say their sequence). */
static void fp_publish_to(fake_pub_t *fp, uint64_t last)
{
	while (fp->seq < last) {
		tb_frame_hdr_t *f = tb_ring_claim(&fp->ring, 64, fp->seq + 1);

		assert_non_null(f);
		fp->seq++;
		tb_frame_init(f, 64, 7, 9, fp->seq, fp->seq * 1000);
		memset(tb_frame_payload(f), (int)(fp->seq & 0xff), 64);
		fp->at[fp->seq] = fp->ring.claim_pos;
		tb_ring_commit(&fp->ring);
	}
}

/* Writes one request to the subscriber and waits for it. */
static void fp_post(fake_pub_t *fp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	wr->send_flags |= IBV_SEND_SIGNALED;
	wr->wr.rdma.remote_addr = fp->subm.subscribe.ring_addr + fp->sub_off;
	wr->wr.rdma.rkey = fp->subm.subscribe.rkey;
	assert_int_equal(ibv_post_send(fp->p.qp, wr, &bad), 0);
	assert_int_equal(wait_recvs(&fp->p, &wc, 1), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
}

/* Sends sequence `seq` from our ring to the subscriber, behind an anchor
 * when `anchor`. */
static void fp_send(fake_pub_t *fp, uint64_t seq, int anchor)
{
	const tb_frame_hdr_t *f = tb_ring_at(&fp->ring, fp->at[seq]);
	tb_frame_hdr_t a;
	struct ibv_sge sge;
	struct ibv_send_wr wr;

	if (anchor) {
		tb_frame_init_pad(&a, TB_RC_ANCHOR_LEN, 9, seq);
		a.template_id = TB_RC_ANCHOR;
		a.publish_ns = fp->at[seq] + fp->anchor_skew;
		sge = (struct ibv_sge){.addr = (uintptr_t)&a, .length = 32};
		wr = (struct ibv_send_wr){.sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_INLINE};
		fp_post(fp, &wr);
		fp->sub_off += 32;
	}
	sge = (struct ibv_sge){.addr = (uintptr_t)f, .length = f->length,
			       .lkey = fp->ring_mr->lkey};
	wr = (struct ibv_send_wr){.sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				  .imm_data = htobe32(tb_rc_imm(fp->sub_off, seq))};
	fp_post(fp, &wr);
	fp->sub_off += tb_frame_space(f->length);
}

/* Sends sequences first..last, the first behind an anchor when
 * `anchor`. */
static void fp_send_range(fake_pub_t *fp, uint64_t first, uint64_t last,
			  int anchor)
{
	for (uint64_t s = first; s <= last; s++)
		fp_send(fp, s, anchor && s == first);
}

static void fp_heartbeat(fake_pub_t *fp, uint64_t skip_first, uint64_t skip_last)
{
	tb_control_heartbeat_t hb = {.timestamp_ns = 1, .last_seq = fp->seq,
				     .skip_first = skip_first,
				     .skip_last = skip_last};
	uint8_t buf[TB_CONTROL_MSG_MAX];

	send_buf(fp->p.fd, buf, tb_control_encode_heartbeat(buf, sizeof(buf), &hb));
}

/* What a read-back test's subscriber delivered: sequences, their flags,
 * and whether each payload says its sequence. */
typedef struct rb_got {
	uint64_t seq[256];
	uint32_t flags[256];
	int n, bad;
} rb_got_t;

static void rb_on_msg(void *clientd, const tb_msg_t *m)
{
	rb_got_t *g = clientd;

	for (uint32_t i = 0; i < m->len; i++)
		g->bad += ((const uint8_t *)m->data)[i] != (uint8_t)(m->seq & 0xff);
	if (g->n < 256) {
		g->seq[g->n] = m->seq;
		g->flags[g->n++] = m->flags;
	}
}

/* Polls until `want` messages are in, or a poll returns a code below 0
 * other than TB_NOT_CONNECTED (returned; 0 otherwise). */
static int rb_poll(tb_subscriber_t *sub, rb_got_t *g, int want)
{
	uint64_t until = now_ms() + 5000;

	while (g->n < want && now_ms() < until) {
		int rc = tb_sub_poll(sub, rb_on_msg, g, 64);

		if (rc < 0 && rc != TB_NOT_CONNECTED)
			return rc;
		if (rc <= 0)
			nap();
	}
	return 0;
}

/* Checks g->seq[from..] is first..last with TB_MSG_F_REPLAY set on the
 * ones in [rfirst, rlast] and only on those. */
static void rb_expect(const rb_got_t *g, int from, uint64_t first, uint64_t last,
		      uint64_t rfirst, uint64_t rlast)
{
	assert_int_equal(g->n - from, (int)(last - first + 1));
	for (uint64_t s = first; s <= last; s++) {
		int i = from + (int)(s - first);
		int replay = s >= rfirst && s <= rlast;

		assert_int_equal(g->seq[i], s);
		assert_int_equal(!!(g->flags[i] & TB_MSG_F_REPLAY), replay);
	}
	assert_int_equal(g->bad, 0);
}

/* This process's counter `id` of stream 9's subscriber. */
static uint64_t sub_counter(tb_counter_id_t id)
{
	return own_counter(9, TB_ROLE_SUBSCRIBER, id);
}

/* Skipped for 680..690, which cross the end of the publisher's ring, the
 * subscriber reads them back itself and delivers them (REPLAY) between
 * 679 and 691: no lap reported.  It reads exactly the span between the
 * frame before and the anchor, in two pieces at the wrap, then the
 * position word, fenced and signalled. */
static void a_lap_is_read_back_from_the_publishers_ring(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	fake_pub_t fp;
	rb_got_t g = {0};
	const rec_wr_t *w;
	uint32_t qpn;
	int n, first, reads = 0;

	(void)state;
	fp_open(&fp, test_port(19));
	rc_cfg(&cfg, test_port(19), 64 << 10);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	fp_accept(&fp, fp.ring_mr->rkey);
	qpn = fp.subm.subscribe.qpn;
	fp_publish_to(&fp, 691);
	/* 683 did not fit before the end: padding, then offset 0. */
	assert_true(fp.at[683] == FP_RING);
	fp_send_range(&fp, 675, 679, 1);
	fp_send_range(&fp, 691, 691, 1);
	first = n_rec;
	assert_int_equal(rb_poll(sub, &g, 17), 0);
	rb_expect(&g, 0, 675, 691, 680, 690);
	assert_int_equal(sub_counter(TB_CTR_READ_FILLED), 11);
	assert_int_equal(sub_counter(TB_CTR_READ_MISSED), 0);
	assert_int_equal(sub_counter(TB_CTR_LAPPED), 0);
	w = recs_for(qpn, first, &n);
	for (int i = 0; i < n; i++) {
		if (w[i].opcode != IBV_WR_RDMA_READ)
			continue;
		switch (reads++) {
		case 0:  /* from 680 to the end of the ring */
			assert_true(w[i].raddr == (uintptr_t)fp.mem + fp.at[680]);
			assert_int_equal(w[i].len, FP_RING - fp.at[680]);
			assert_int_equal(w[i].rkey, fp.ring_mr->rkey);
			break;
		case 1:  /* from its start to 691 */
			assert_true(w[i].raddr == (uintptr_t)fp.mem);
			assert_int_equal(w[i].len, fp.at[691] - FP_RING);
			break;
		case 2:  /* then the position, behind both */
			assert_true(w[i].raddr == (uintptr_t)fp.pos);
			assert_int_equal(w[i].len, 8);
			assert_int_equal(w[i].rkey, fp.pos_mr->rkey);
			assert_true(w[i].flags & IBV_SEND_FENCE);
			assert_true(w[i].flags & IBV_SEND_SIGNALED);
			break;
		}
	}
	assert_int_equal(reads, 3);
	/* And the live stream goes on. */
	fp_publish_to(&fp, 693);
	fp_send_range(&fp, 692, 693, 0);
	assert_int_equal(rb_poll(sub, &g, 19), 0);
	rb_expect(&g, 17, 692, 693, 0, 0);
	tb_subscriber_close(sub);
	fp_close(&fp);
}

/* What cannot be trusted is never delivered: a ring whose position word
 * says the publisher had claimed its way into the first missing frame
 * (written over, or being written), or a frame that is not the next
 * sequence, goes up as the lap it is, exactly; the session goes on, and
 * the next gap is read back. */
static void an_untrustworthy_read_back_is_a_lap(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	fake_pub_t fp;
	rb_got_t g = {0};
	uint64_t first = 0, last = 0, tail;
	int rc = 0;

	(void)state;
	fp_open(&fp, test_port(20));
	rc_cfg(&cfg, test_port(20), 64 << 10);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	fp_accept(&fp, fp.ring_mr->rkey);
	fp_publish_to(&fp, 40);
	fp_send_range(&fp, 1, 10, 1);
	fp_send_range(&fp, 21, 21, 1);
	/* Claimed into 11: intent past 11's start by a ring. */
	tail = tb_atomic_load_relaxed(&fp.pos[0]);
	tb_atomic_store_relaxed(&fp.pos[0], fp.at[11] + FP_RING + 32);
	for (uint64_t until = now_ms() + 5000; rc != TB_LAPPED; nap()) {
		assert_true(now_ms() < until);
		rc = tb_sub_poll(sub, rb_on_msg, &g, 64);
		assert_true(rc >= 0 || rc == TB_LAPPED || rc == TB_NOT_CONNECTED);
	}
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_true(first == 11 && last == 20);
	rb_expect(&g, 0, 1, 10, 0, 0);
	assert_int_equal(rb_poll(sub, &g, 11), 0);
	assert_int_equal(g.seq[10], 21);
	assert_int_equal(sub_counter(TB_CTR_READ_MISSED), 1);
	assert_int_equal(sub_counter(TB_CTR_READ_FILLED), 0);
	tb_atomic_store_relaxed(&fp.pos[0], tail);

	/* 22..24 skipped, and 23 in the ring is not 23. */
	((tb_frame_hdr_t *)tb_ring_at(&fp.ring, fp.at[23]))->seq = 99;
	fp_send_range(&fp, 25, 25, 1);
	rc = 0;
	for (uint64_t until = now_ms() + 5000; rc != TB_LAPPED; nap()) {
		assert_true(now_ms() < until);
		rc = tb_sub_poll(sub, rb_on_msg, &g, 64);
		assert_true(rc == 0 || rc == TB_LAPPED);
	}
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_true(first == 22 && last == 24);
	assert_int_equal(rb_poll(sub, &g, 12), 0);
	assert_int_equal(g.seq[11], 25);

	/* 26..30 skipped and whole: read back. */
	fp_send_range(&fp, 31, 31, 1);
	assert_int_equal(rb_poll(sub, &g, 18), 0);
	rb_expect(&g, 12, 26, 31, 26, 30);
	assert_int_equal(sub_counter(TB_CTR_READ_FILLED), 5);
	assert_int_equal(sub_counter(TB_CTR_READ_MISSED), 2);

	/* 32..33 skipped and whole, and the position word short of them by
	 * a ring, but by less than a claim may have reached and given back
	 * (tb_pub_abort takes intent back; what it wrote stays written):
	 * not trusted. */
	tb_atomic_store_relaxed(&fp.pos[0], fp.at[32] + FP_RING -
				tb_frame_space(tb_ring_max_frame(FP_RING)));
	fp_send_range(&fp, 34, 34, 1);
	rc = 0;
	for (uint64_t until = now_ms() + 5000; rc != TB_LAPPED; nap()) {
		assert_true(now_ms() < until);
		rc = tb_sub_poll(sub, rb_on_msg, &g, 64);
		assert_true(rc == 0 || rc == TB_LAPPED);
	}
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_true(first == 32 && last == 33);
	assert_int_equal(rb_poll(sub, &g, 19), 0);
	assert_int_equal(g.seq[18], 34);
	assert_int_equal(sub_counter(TB_CTR_READ_MISSED), 3);
	tb_atomic_store_relaxed(&fp.pos[0], tail);

	/* 35..36 skipped and whole, but the anchor of 37 says 38's place:
	 * 37 lies inside the span.  The span is not what the publisher said
	 * it is: 35..36 go up as a lap, nothing of it delivered or lost
	 * unsaid. */
	fp.anchor_skew = 96;
	fp_send_range(&fp, 37, 37, 1);
	rc = 0;
	for (uint64_t until = now_ms() + 5000; rc != TB_LAPPED; nap()) {
		assert_true(now_ms() < until);
		rc = tb_sub_poll(sub, rb_on_msg, &g, 64);
		assert_true(rc == 0 || rc == TB_LAPPED);
	}
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_true(first == 35 && last == 36);
	assert_int_equal(g.n, 19);
	assert_int_equal(rb_poll(sub, &g, 20), 0);
	assert_int_equal(g.seq[19], 37);
	tb_subscriber_close(sub);
	fp_close(&fp);
}

/* A READ the publisher's NIC refuses (here: a key that is not its ring's)
 * fails the queue pair: the gap goes up as a lap, the frame after it is
 * still delivered, and the subscriber connects again. */
static void a_refused_read_is_a_lap_and_a_new_session(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	fake_pub_t fp;
	rb_got_t g = {0};
	uint64_t first = 0, last = 0;
	int rc = 0, again;

	(void)state;
	fp_open(&fp, test_port(21));
	rc_cfg(&cfg, test_port(21), 64 << 10);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	fp_accept(&fp, fp.pos_mr->rkey);   /* a key, but not the ring's */
	fp_publish_to(&fp, 8);
	fp_send_range(&fp, 1, 3, 1);
	fp_send_range(&fp, 8, 8, 1);
	for (uint64_t until = now_ms() + 5000; rc != TB_LAPPED; nap()) {
		assert_true(now_ms() < until);
		rc = tb_sub_poll(sub, rb_on_msg, &g, 64);
		assert_true(rc >= 0 || rc == TB_LAPPED || rc == TB_NOT_CONNECTED);
	}
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_true(first == 4 && last == 7);
	rb_expect(&g, 0, 1, 3, 0, 0);
	assert_int_equal(rb_poll(sub, &g, 4), 0);
	assert_int_equal(g.seq[3], 8);
	assert_int_equal(sub_counter(TB_CTR_READ_MISSED), 1);
	assert_true(sub_counter(TB_CTR_ERRORS) >= 1);
	/* A new session: it connects again. */
	for (uint64_t until = now_ms() + 5000;; nap()) {
		struct pollfd pf = {.fd = fp.lfd, .events = POLLIN};

		assert_true(now_ms() < until);
		rc = tb_sub_poll(sub, rb_on_msg, &g, 64);
		assert_true(rc >= 0 || rc == TB_NOT_CONNECTED);
		if (poll(&pf, 1, 0) == 1)
			break;
	}
	again = accept(fp.lfd, NULL, NULL);
	assert_true(again >= 0);
	close(again);
	tb_subscriber_close(sub);
	fp_close(&fp);
}

/* Skipped, and the stream goes quiet: no frame comes to show the gap, the
 * heartbeat names it, and the subscriber reads it back from where its
 * last frame ended, up to the range's last sequence. */
static void a_quiet_lap_is_read_back(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	fake_pub_t fp;
	rb_got_t g = {0};

	(void)state;
	fp_open(&fp, test_port(22));
	rc_cfg(&cfg, test_port(22), 64 << 10);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	fp_accept(&fp, fp.ring_mr->rkey);
	fp_publish_to(&fp, 12);
	fp_send_range(&fp, 1, 5, 1);
	assert_int_equal(rb_poll(sub, &g, 5), 0);
	fp_heartbeat(&fp, 6, 12);
	assert_int_equal(rb_poll(sub, &g, 12), 0);
	rb_expect(&g, 0, 1, 12, 6, 12);
	assert_int_equal(sub_counter(TB_CTR_READ_FILLED), 7);
	/* The same range again: delivered already, nothing more. */
	fp_heartbeat(&fp, 6, 12);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(tb_sub_poll(sub, rb_on_msg, &g, 64), 0);
		nap();
	}
	assert_int_equal(g.n, 12);
	/* It follows on: 13..14 skipped too, 15 written. */
	fp_publish_to(&fp, 15);
	fp_send_range(&fp, 15, 15, 1);
	assert_int_equal(rb_poll(sub, &g, 15), 0);
	rb_expect(&g, 12, 13, 15, 13, 14);
	assert_int_equal(sub_counter(TB_CTR_READ_MISSED), 0);
	tb_subscriber_close(sub);
	fp_close(&fp);
}


/* A scripted publisher on `port`: a subscriber with liveness `live_ms`
 * joins, is told 1..9 were published, is written 1..5 and takes them. */
static void one_to_five_of_nine(fake_pub_t *fp, tb_subscriber_t **sub,
				rb_got_t *g, int port, uint32_t live_ms)
{
	tb_stream_cfg_t cfg;

	fp_open(fp, port);
	rc_cfg(&cfg, port, 64 << 10);
	cfg.liveness_timeout_ms = live_ms;
	assert_int_equal(tb_subscriber_open(sub, &cfg), 0);
	fp_accept(fp, fp->ring_mr->rkey);
	fp_publish_to(fp, 9);
	fp_send_range(fp, 1, 5, 1);
	fp_heartbeat(fp, 0, 0);             /* last_seq = 9, nothing skipped */
	assert_int_equal(rb_poll(*sub, g, 5), 0);
}

/* The publisher announced 1..9, wrote 1..5, and fell silent: its death is
 * not all the subscriber says.  6..9 go up first as a loss (it knows they
 * were published; none of them will come), then TB_PUBLISHER_DEAD --
 * never the death alone, which a caller with another copy gone too takes
 * as the stream's end at 5, 6..9 silently missing. */
static void a_silent_publisher_s_announced_frames_are_a_loss(void **state)
{
	tb_subscriber_t *sub;
	fake_pub_t fp;
	rb_got_t g = {0};
	uint64_t first = 0, last = 0;
	int rc = 0;

	(void)state;
	one_to_five_of_nine(&fp, &sub, &g, test_port(26), 200);
	rb_expect(&g, 0, 1, 5, 0, 0);
	/* No more heartbeats: past its liveness, the publisher is lost. */
	for (uint64_t until = now_ms() + 5000; rc == 0 || rc == TB_NOT_CONNECTED;
	     nap()) {
		assert_true(now_ms() < until);
		rc = tb_sub_poll(sub, rb_on_msg, &g, 64);
	}
	assert_int_equal(rc, TB_LAPPED);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 6);
	assert_int_equal(last, 9);
	for (uint64_t until = now_ms() + 5000; rc != TB_PUBLISHER_DEAD; nap()) {
		assert_true(now_ms() < until);
		rc = tb_sub_poll(sub, rb_on_msg, &g, 64);
		assert_true(rc == 0 || rc == TB_NOT_CONNECTED ||
			    rc == TB_PUBLISHER_DEAD);
	}
	assert_int_equal(g.n, 5);
	tb_subscriber_close(sub);
	fp_close(&fp);
}

/* Dropped by the publisher (BYE timeout), which then goes away: every dial
 * is refused.  Past its liveness timeout from the last heartbeat (which
 * announced 1..9; 1..5 came) the subscriber tells 6..9 as a loss, then
 * TB_PUBLISHER_DEAD, once -- not TB_NOT_CONNECTED for ever -- and dials
 * on for a publisher that comes back. */
static void a_publisher_gone_while_reconnecting_is_dead(void **state)
{
	tb_subscriber_t *sub;
	tb_control_bye_t bye = {.reason = TB_CONTROL_BYE_TIMEOUT};
	uint8_t buf[TB_CONTROL_MSG_MAX];
	fake_pub_t fp;
	rb_got_t g = {0};
	uint64_t first = 0, last = 0;
	int rc = 0, again;

	(void)state;
	one_to_five_of_nine(&fp, &sub, &g, test_port(29), 300);
	send_buf(fp.p.fd, buf, tb_control_encode_bye(buf, sizeof(buf), &bye));
	close(fp.lfd);                       /* nothing listens now */
	for (uint64_t until = now_ms() + 5000; rc != TB_EVICTED; nap()) {
		assert_true(now_ms() < until);
		rc = tb_sub_poll(sub, rb_on_msg, &g, 64);
		assert_true(rc == 0 || rc == TB_EVICTED);
	}
	for (uint64_t until = now_ms() + 5000; rc != TB_LAPPED; nap()) {
		assert_true(now_ms() < until);
		rc = tb_sub_poll(sub, rb_on_msg, &g, 64);
		assert_true(rc == 0 || rc == TB_NOT_CONNECTED || rc == TB_LAPPED);
	}
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 6);
	assert_int_equal(last, 9);
	assert_int_equal(tb_sub_poll(sub, rb_on_msg, &g, 64), TB_PUBLISHER_DEAD);
	/* Back on its port: it is dialled again, and the death is not told
	 * twice meanwhile. */
	fp.lfd = fake_pub_listen(test_port(29));
	for (uint64_t until = now_ms() + 5000;; nap()) {
		struct pollfd pf = {.fd = fp.lfd, .events = POLLIN};

		assert_true(now_ms() < until);
		rc = tb_sub_poll(sub, rb_on_msg, &g, 64);
		assert_true(rc == 0 || rc == TB_NOT_CONNECTED);
		if (poll(&pf, 1, 0) == 1)
			break;
	}
	again = accept(fp.lfd, NULL, NULL);
	assert_true(again >= 0);
	close(again);
	assert_int_equal(g.n, 5);
	tb_subscriber_close(sub);
	fp_close(&fp);
}

/* -------------------------------------------------- batching (batch_us) */

/* Checks that w[0..n) are the data frames `seq0`.. of `len` bytes each
 * (payload), one after another from ring offset `off0` of `p`'s ring. */
static void expect_frames(const rec_wr_t *w, int n, const peer_t *p,
			  uint64_t off0, uint64_t seq0, uint32_t len)
{
	uint32_t space = tb_frame_space(TB_FRAME_HDR_LEN + len);

	for (int i = 0; i < n; i++) {
		uint64_t off = off0 + (uint64_t)i * space;

		assert_int_equal(w[i].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
		assert_true(w[i].raddr == (uintptr_t)p->buf + off);
		assert_int_equal(w[i].rkey, p->mr->rkey);
		assert_int_equal(w[i].imm, tb_rc_imm(off, seq0 + (uint64_t)i));
		assert_int_equal(w[i].len, TB_FRAME_HDR_LEN + len);
	}
}

static void batched_offers_go_in_one_post_per_subscriber(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p[2];
	uint8_t payload[64];
	struct ibv_wc wc[64];
	const rec_wr_t *w;
	uint32_t qpn[2];
	const uint64_t held = (TB_RC_SIGNAL_EVERY - 1) / 10 * 10;
	int n, first, posts;

	(void)state;
	rc_cfg(&cfg, test_port(12), 256 << 10);
	cfg.batch_us = 1000000;  /* no deadline within the test */
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	for (int k = 0; k < 2; k++) {
		peer_open(&p[k], 64 << 10, 256);
		post_recvs(&p[k], 256);
		subscribe(&p[k], test_port(12), "right-token", 256);
		assert_int_equal(p[k].reply.type, TB_CONTROL_ACCEPT);
		qpn[k] = p[k].reply.accept.qpn;
		join(&p[k]);
	}
	memset(payload, 0x5a, sizeof(payload));

	/* Ten offers: nothing posted; the flush posts ten chained
	 * WRITE_WITH_IMMs per subscriber with one call, none signalled. */
	first = n_rec;
	posts = n_posts;
	for (int i = 0; i < 10; i++)
		assert_int_equal(tb_pub_offer(pub, 7, payload, 64), i + 1);
	assert_int_equal(n_rec, first);
	assert_int_equal(n_posts, posts);
	assert_int_equal(tb_pub_flush(pub), 0);
	assert_int_equal(n_posts, posts + 2);
	for (int k = 0; k < 2; k++) {
		w = recs_for(qpn[k], first, &n);
		assert_int_equal(n, 10);
		assert_int_equal(posts_in(w, n), 1);
		expect_frames(w, n, &p[k], 0, 1, 64);
		for (int i = 0; i < n; i++) {
			assert_true(w[i].flags & IBV_SEND_INLINE);
			assert_false(w[i].flags & IBV_SEND_SIGNALED);
		}
		assert_int_equal(wait_recvs(&p[k], wc, 10), 10);
		for (int i = 0; i < 10; i++) {
			assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
			assert_int_equal(be32toh(wc[i].imm_data),
					 tb_rc_imm((uint64_t)i * 96, (uint64_t)i + 1));
		}
		assert_int_equal(((tb_frame_hdr_t *)(p[k].buf + 9 * 96))->seq, 10);
	}
	/* A flush with nothing held posts nothing. */
	posts = n_posts;
	assert_int_equal(tb_pub_flush(pub), 0);
	assert_int_equal(n_posts, posts);

	/* Up to `held` (the tens below TB_RC_SIGNAL_EVERY) in bursts of
	 * ten, then a burst of ten that holds the TB_RC_SIGNAL_EVERYth
	 * request: one post still, with that one (and it alone) signalled,
	 * its wr_id the count of requests up to it. */
	for (uint64_t b = 1; b < held / 10; b++) {
		for (int i = 0; i < 10; i++)
			assert_true(tb_pub_offer(pub, 7, payload, 64) > 0);
		assert_int_equal(tb_pub_flush(pub), 0);
		for (int k = 0; k < 2; k++)
			assert_int_equal(wait_recvs(&p[k], wc, 10), 10);
	}
	first = n_rec;
	for (int i = 0; i < 10; i++)
		assert_int_equal(tb_pub_offer(pub, 7, payload, 64),
				 (int64_t)held + 1 + i);
	assert_int_equal(tb_pub_flush(pub), 0);
	for (int k = 0; k < 2; k++) {
		int sig = 0;

		w = recs_for(qpn[k], first, &n);
		assert_int_equal(n, 10);
		assert_int_equal(posts_in(w, n), 1);
		expect_frames(w, n, &p[k], held * 96, held + 1, 64);
		for (int i = 0; i < n; i++)
			sig += !!(w[i].flags & IBV_SEND_SIGNALED);
		assert_int_equal(sig, 1);
		assert_true(w[TB_RC_SIGNAL_EVERY - held - 1].flags &
			    IBV_SEND_SIGNALED);
		assert_int_equal(w[TB_RC_SIGNAL_EVERY - held - 1].wr_id,
				 TB_RC_SIGNAL_EVERY);
		assert_int_equal(wait_recvs(&p[k], wc, 10), 10);
	}

	/* Forty offers without a flush: a full chain (16) is posted at
	 * once, twice; the flush posts the other eight. */
	first = n_rec;
	for (int i = 0; i < 40; i++)
		assert_true(tb_pub_offer(pub, 7, payload, 64) > 0);
	for (int k = 0; k < 2; k++) {
		w = recs_for(qpn[k], first, &n);
		assert_int_equal(n, 2 * TB_RC_CHAIN);
		assert_int_equal(posts_in(w, n), 2);
		assert_int_equal(posts_in(w, TB_RC_CHAIN), 1);
		expect_frames(w, n, &p[k], (held + 10) * 96, held + 11, 64);
	}
	assert_int_equal(tb_pub_flush(pub), 0);
	for (int k = 0; k < 2; k++) {
		w = recs_for(qpn[k], first, &n);
		assert_int_equal(n, 40);
		assert_int_equal(posts_in(w, n), 3);
		expect_frames(w, n, &p[k], (held + 10) * 96, held + 11, 64);
		assert_int_equal(wait_recvs(&p[k], wc, 40), 40);
	}
	for (int k = 0; k < 2; k++)
		peer_close(&p[k]);
	tb_publisher_close(pub);
}

/* A held frame leaves at the first send once it is batch_us old (the
 * publishing thread posts; nothing else may), and at close. */
static void a_held_frame_leaves_by_its_deadline(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint8_t payload[64] = {0};
	struct ibv_wc wc[4];
	const rec_wr_t *w;
	uint32_t qpn;
	int n, first;

	(void)state;
	rc_cfg(&cfg, test_port(23), 256 << 10);
	cfg.batch_us = 2000;
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 64 << 10, 256);
	post_recvs(&p, 256);
	subscribe(&p, test_port(23), "right-token", 256);
	qpn = p.reply.accept.qpn;
	join(&p);

	first = n_rec;
	assert_int_equal(tb_pub_offer(pub, 7, payload, 64), 1);
	recs_for(qpn, first, &n);
	assert_int_equal(n, 0);
	usleep(10000);  /* well past 2 ms */
	assert_int_equal(tb_pub_offer(pub, 7, payload, 64), 2);
	w = recs_for(qpn, first, &n);
	assert_int_equal(n, 2);
	assert_int_equal(posts_in(w, n), 1);
	expect_frames(w, n, &p, 0, 1, 64);
	assert_int_equal(wait_recvs(&p, wc, 2), 2);

	/* Within the deadline: held, then sent by close. */
	first = n_rec;
	assert_int_equal(tb_pub_offer(pub, 7, payload, 64), 3);
	recs_for(qpn, first, &n);
	assert_int_equal(n, 0);
	tb_publisher_close(pub);
	w = recs_for(qpn, first, &n);
	assert_true(n >= 1);
	expect_frames(w, 1, &p, 2 * 96, 3, 64);
	assert_int_equal(wait_recvs(&p, wc, 1), 1);
	assert_int_equal(be32toh(wc[0].imm_data), tb_rc_imm(2 * 96, 3));
	peer_close(&p);
}

/* Back-pressure with frames held: they count as used room, which the
 * subscriber cannot give back before it has them, so a refusal posts
 * them (else the publisher would wait for credit that never comes). */
static void back_pressure_posts_what_is_held(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	static uint8_t payload[4000];
	struct ibv_wc wc[TB_RC_CHAIN];
	const rec_wr_t *w;
	int64_t r;
	int n, first, sent = 0;

	(void)state;
	rc_cfg(&cfg, test_port(24), 256 << 10);
	cfg.slow_consumer = TB_SLOW_BACKPRESSURE;
	cfg.batch_us = 1000000;
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 64 << 10, 256);
	post_recvs(&p, 256);
	subscribe(&p, test_port(24), "right-token", 256);
	join(&p);
	first = n_rec;
	/* 4032 bytes a frame, room for two more asked each time: 15 fit. */
	while ((r = tb_pub_offer(pub, 7, payload, sizeof(payload))) > 0)
		assert_true(++sent < (int)TB_RC_CHAIN);
	assert_int_equal(r, TB_BACK_PRESSURED);
	assert_int_equal(sent, 15);
	w = recs_for(p.reply.accept.qpn, first, &n);
	assert_int_equal(n, sent);
	assert_int_equal(posts_in(w, n), 1);
	expect_frames(w, n, &p, 0, 1, sizeof(payload));
	assert_int_equal(wait_recvs(&p, wc, sent), sent);
	give_credit(&p, (uint64_t)sent * 4032, 0);
	assert_int_equal(tb_pub_offer(pub, 7, payload, sizeof(payload)), sent + 1);
	peer_close(&p);
	tb_publisher_close(pub);
}

/* ------------------------------------------- the offer's inline send */

/* A byte pattern of its own per sequence. */
static void pattern(uint8_t *b, uint32_t len, uint64_t seq)
{
	for (uint32_t i = 0; i < len; i++)
		b[i] = (uint8_t)(seq * 131u + i * 7u + 1u);
}

/* Offers `n` messages to `pub`, their sizes `sizes[0..nsizes)` in turn,
 * each taken by `p` (whose ring is `ring` bytes) before the next, and
 * checks that each frame lands where the test's own count of that ring
 * says (a pad where a frame would straddle its end), with its immediate,
 * sequence, header and payload.  Returns the pads its ring took. */
static uint64_t offers_land_in_turn(tb_publisher_t *pub, peer_t *p,
				    uint64_t ring, const uint32_t *sizes,
				    size_t nsizes, uint64_t n)
{
	uint8_t payload[256];
	uint64_t wpos = 0, pads = 0;
	struct ibv_wc wc;

	for (uint64_t seq = 1; seq <= n; seq++) {
		uint32_t len = sizes[(seq - 1) % nsizes];
		uint64_t space = tb_frame_space(TB_FRAME_HDR_LEN + len);
		uint64_t off = wpos & (ring - 1);
		const tb_frame_hdr_t *f;

		assert_true(len <= sizeof(payload));
		if (off + space > ring) {  /* its ring pads here */
			wpos += ring - off;
			off = 0;
			pads++;
		}
		pattern(payload, len, seq);
		assert_int_equal(tb_pub_offer(pub, 5, payload, len), (int64_t)seq);
		assert_int_equal(wait_recvs(p, &wc, 1), 1);
		assert_int_equal(wc.status, IBV_WC_SUCCESS);
		assert_int_equal(be32toh(wc.imm_data), tb_rc_imm(off, seq));
		f = (const tb_frame_hdr_t *)(p->buf + off);
		assert_int_equal(f->seq, seq);
		assert_int_equal(f->length, TB_FRAME_HDR_LEN + len);
		assert_int_equal(f->type, TB_FRAME_DATA);
		assert_int_equal(f->template_id, 5);
		assert_memory_equal(p->buf + off + TB_FRAME_HDR_LEN, payload, len);
		wpos += space;
		post_recvs(p, 1);
		give_credit(p, wpos, (uint32_t)seq);
	}
	return pads;
}

/*
 * Small offers take tb_pub_offer's inline rc send (rc_pub.h); the one
 * whose frame would straddle the end of the publisher's own ring goes the
 * checked way (a pad in our ring, the frame at 0), and the subscriber's
 * ring, of the same size, wraps at the same frame with a padding WRITE.
 * Across two laps of both, every frame arrives once, at the offset its
 * immediate names, whole, and the signalled requests come one in 64.
 */
static void small_offers_cross_the_publishers_ring_end(void **state)
{
	static const uint32_t size[] = {64};
	const uint64_t ring = 64 << 10;
	const uint64_t n = 2 * (ring / 96) + 40;
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	const rec_wr_t *w;
	uint64_t pads, signalled = 0;
	int first, nw;

	(void)state;
	rc_cfg(&cfg, test_port(25), ring);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, ring, 256);
	post_recvs(&p, 256);
	subscribe(&p, test_port(25), "right-token", 256);
	join(&p);
	first = n_rec;
	pads = offers_land_in_turn(pub, &p, ring, size, 1, n);
	/* One request per frame, one per pad, nothing else. */
	w = recs_for(p.reply.accept.qpn, first, &nw);
	assert_int_equal((uint64_t)nw, n + pads);
	assert_int_equal(pads, 2);
	for (int i = 0; i < nw; i++)
		signalled += !!(w[i].flags & IBV_SEND_SIGNALED);
	assert_int_equal(signalled, (n + pads) / TB_RC_SIGNAL_EVERY);
	for (int i = 0; i < nw; i++)
		if (w[i].opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
			assert_true(w[i].flags & IBV_SEND_INLINE);
	peer_close(&p);
	tb_publisher_close(pub);
}

/* Small offers (the inline send, whose immediate and remote address each
 * subscriber keeps ready from the frame before) between larger ones (the
 * send op's path, which moves them on too), over two laps of a ring with
 * its pads and the slow path's signalled requests: every frame lands
 * where its immediate says, with its sequence, whichever path sent the
 * frame before it. */
static void mixed_offers_land_where_their_immediates_say(void **state)
{
	/* 1,248 bytes of frames in every ten: 1,100 offers pass two laps. */
	static const uint32_t sizes[] = {64, 100, 0, 64, 64, 180, 33, 64, 250, 7};
	const uint64_t ring = 64 << 10, n = 1100;
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	const rec_wr_t *w;
	uint64_t pads;
	int first, nw;

	(void)state;
	rc_cfg(&cfg, test_port(35), ring);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, ring, 256);
	post_recvs(&p, 256);
	subscribe(&p, test_port(35), "right-token", 256);
	join(&p);
	first = n_rec;
	pads = offers_land_in_turn(pub, &p, ring, sizes,
				   sizeof(sizes) / sizeof(sizes[0]), n);
	/* One request per frame, one per pad; each frame's remote address is
	 * the ring's plus its immediate's offset. */
	w = recs_for(p.reply.accept.qpn, first, &nw);
	assert_int_equal((uint64_t)nw, n + pads);
	assert_int_equal(pads, 2);
	for (int i = 0; i < nw; i++)
		if (w[i].opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
			assert_int_equal(w[i].raddr, (uintptr_t)p.buf +
					 tb_rc_imm_offset(w[i].imm));
	peer_close(&p);
	tb_publisher_close(pub);
}

/*
 * A subscriber whose QP is granted less inline data than a small frame
 * (64 bytes where a 64-byte message's frame is 96): the small offers of a
 * lapping stream go by reference, from the publisher's ring with its key
 * for that subscriber, each to the place its immediate names, whole.
 */
static void small_offers_go_by_reference_below_the_inline_grant(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	peer_t p;
	uint8_t payload[64];
	struct ibv_wc wc[4];
	const rec_wr_t *w;
	int first, n;

	(void)state;
	rc_cfg(&cfg, test_port(28), 256 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	peer_open(&p, 64 << 10, 64);
	post_recvs(&p, 64);
	inline_cap = 64;
	subscribe(&p, test_port(28), "right-token", 64);
	join(&p);
	inline_cap = 0;
	first = n_rec;
	for (uint64_t seq = 1; seq <= 3; seq++) {
		pattern(payload, sizeof(payload), seq);
		assert_int_equal(tb_pub_offer(pub, 7, payload, sizeof(payload)),
				 (int64_t)seq);
	}
	assert_int_equal(wait_recvs(&p, wc, 3), 3);
	w = recs_for(p.reply.accept.qpn, first, &n);
	assert_int_equal(n, 3);
	for (uint64_t i = 0; i < 3; i++) {
		const tb_frame_hdr_t *f = (const tb_frame_hdr_t *)(p.buf + 96 * i);

		assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
		assert_int_equal(w[i].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
		assert_false(w[i].flags & IBV_SEND_INLINE);
		assert_true(w[i].lkey != 0);
		assert_int_equal(w[i].len, 96);
		assert_true(w[i].raddr == (uintptr_t)p.buf + 96 * i);
		assert_int_equal(w[i].imm, tb_rc_imm(96 * i, i + 1));
		assert_int_equal(f->seq, i + 1);
		assert_int_equal(f->template_id, 7);
		pattern(payload, sizeof(payload), i + 1);
		assert_memory_equal(p.buf + 96 * i + TB_FRAME_HDR_LEN, payload,
				    sizeof(payload));
	}
	peer_close(&p);
	tb_publisher_close(pub);
}

/* Each test's records start empty, whatever the tests before it posted. */
static int rec_reset(void **state)
{
	(void)state;
	n_rec = 0;
	rec_lost = 0;
	return 0;
}

#define T(f) cmocka_unit_test_setup(f, rec_reset)

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		T(publisher_posts_exact_work_requests),
		T(a_burst_posts_one_write_a_message),
		T(publisher_skips_a_subscriber_without_credit),
		T(publisher_drops_a_failed_subscriber),
		T(a_refused_post_fails_that_subscriber_alone),
		T(wrong_token_gets_no_rkey),
		T(subscriber_credits_and_rkey_bounds),
		T(inline_threshold_fits_one_wqe),
		T(nothing_is_written_before_ready),
		T(a_credit_rkey_reaches_its_own_slot_only),
		T(the_path_mtu_is_the_publishers_choice),
		T(a_fence_for_every_skip_while_completions_stall),
		T(back_pressure_waits_while_completions_stall),
		T(back_pressure_with_large_frames_goes_on),
		T(a_lapping_stream_signals_large_frames_by_bytes),
		T(a_batched_stream_signals_large_frames_by_bytes),
		T(heartbeats_name_the_skipped_range),
		T(close_beats_while_it_drains),
		T(token_guessing_is_slowed),
		T(memlock_budget_is_checked_at_open),
		T(a_version_one_subscriber_is_refused),
		T(a_version_one_publisher_is_named),
		T(the_subscriber_uses_the_accepted_mtu),
		T(dropped_by_the_publisher_is_evicted),
		T(the_publisher_anchors_where_a_reader_resumes),
		T(a_read_key_reads_the_ring_alone),
		T(a_lap_is_read_back_from_the_publishers_ring),
		T(an_untrustworthy_read_back_is_a_lap),
		T(a_refused_read_is_a_lap_and_a_new_session),
		T(a_quiet_lap_is_read_back),
		T(a_silent_publisher_s_announced_frames_are_a_loss),
		T(a_publisher_gone_while_reconnecting_is_dead),
		T(batched_offers_go_in_one_post_per_subscriber),
		T(a_held_frame_leaves_by_its_deadline),
		T(back_pressure_posts_what_is_held),
		T(small_offers_cross_the_publishers_ring_end),
		T(mixed_offers_land_where_their_immediates_say),
		T(small_offers_go_by_reference_below_the_inline_grant),
	};

	(void)argc;
	(void)argv;

	if (!getenv("SOFTRDMA_FABRIC")) {
		char name[64];

		snprintf(name, sizeof(name), "t-rc-%d", (int)getpid());
		setenv("SOFTRDMA_FABRIC", name, 1);
	}
	setenv("TICKBUS_QUIET", "1", 0);
	/* TB_CMOCKA_FILTER=glob runs the matching tests alone. */
	if (getenv("TB_CMOCKA_FILTER"))
		cmocka_set_test_filter(getenv("TB_CMOCKA_FILTER"));
	return cmocka_run_group_tests_name("transport_rc", tests, NULL, NULL);
}
