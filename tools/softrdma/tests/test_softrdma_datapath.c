/*
 * softrdma: the data path and its failures, between two endpoints in one
 * process and between two processes.
 */
#include "sr_test.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <sched.h>

#define BUFSZ 65536

struct pair {
	struct t_node a, b;          /* a is the requester, b the responder */
	char *abuf, *bbuf;
	struct ibv_mr *amr, *bmr;
};

static struct pair *mkpair(const struct t_qp_opts *ao, const struct t_qp_opts *bo,
			   const struct t_conn *ac, const struct t_conn *bc,
			   unsigned bmr_access)
{
	struct pair *p = calloc(1, sizeof *p);
	assert_int_equal(t_node_init(&p->a, ao), 0);
	assert_int_equal(t_node_init(&p->b, bo), 0);
	p->abuf = calloc(1, BUFSZ);
	p->bbuf = calloc(1, BUFSZ);
	p->amr = ibv_reg_mr(p->a.pd, p->abuf, BUFSZ, IBV_ACCESS_LOCAL_WRITE);
	p->bmr = ibv_reg_mr(p->b.pd, p->bbuf, BUFSZ, bmr_access);
	assert_non_null(p->amr);
	assert_non_null(p->bmr);
	assert_int_equal(t_connect(p->a.qp, p->b.qp->qp_num, ac), 0);
	assert_int_equal(t_connect(p->b.qp, p->a.qp->qp_num, bc), 0);
	return p;
}

static const unsigned RW = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ;

static struct pair *mkpair_default(void)
{
	struct t_qp_opts o = {.max_inline = 256};
	return mkpair(&o, &o, &t_conn_default, &t_conn_default, RW);
}

static void freepair(struct pair *p)
{
	ibv_dereg_mr(p->amr);
	ibv_dereg_mr(p->bmr);
	t_node_fini(&p->a);
	t_node_fini(&p->b);
	free(p->abuf);
	free(p->bbuf);
	free(p);
}

static enum ibv_qp_state qstate(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
	return a.qp_state;
}

static int async_event(struct ibv_context *c, struct ibv_async_event *ev, int ms)
{
	struct pollfd p = {c->async_fd, POLLIN, 0};
	if (poll(&p, 1, ms) != 1)
		return -1;
	return ibv_get_async_event(c, ev);
}

static void fill(char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (char)(seed + i * 7);
}

/* ---- success paths ---- */

static void test_write(void **state)
{
	(void)state;
	struct pair *p = mkpair_default();
	fill(p->abuf, 4096, 1);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE, p->abuf, 4096,
				      p->amr->lkey, (uintptr_t)p->bbuf + 100,
				      p->bmr->rkey, 0, IBV_SEND_SIGNALED, 42), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(p->a.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_RDMA_WRITE);
	assert_int_equal(wc.wr_id, 42);
	assert_int_equal(wc.qp_num, p->a.qp->qp_num);
	assert_memory_equal(p->bbuf + 100, p->abuf, 4096);
	/* a plain write consumes no receive and completes nothing remotely */
	assert_int_equal(ibv_poll_cq(p->b.cq, 1, &wc), 0);
	freepair(p);
}

static void test_write_imm(void **state)
{
	(void)state;
	struct pair *p = mkpair_default();
	assert_int_equal(t_post_recv(p->b.qp, NULL, 0, 0, 77), 0);
	fill(p->abuf, 300, 2);
	uint32_t imm = htonl(0xdeadbeef);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, p->abuf,
				      300, p->amr->lkey, (uintptr_t)p->bbuf,
				      p->bmr->rkey, imm, 0, 1), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(p->b.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	assert_true(wc.wc_flags & IBV_WC_WITH_IMM);
	assert_int_equal(wc.imm_data, imm); /* network order, untouched */
	assert_int_equal(wc.byte_len, 300);
	assert_int_equal(wc.wr_id, 77);
	assert_int_equal(wc.qp_num, p->b.qp->qp_num);
	assert_int_equal(wc.src_qp, p->a.qp->qp_num);
	assert_memory_equal(p->bbuf, p->abuf, 300);
	/* unsignalled at the requester: nothing there */
	assert_int_equal(ibv_poll_cq(p->a.cq, 1, &wc), 0);
	freepair(p);
}

static void test_send_recv(void **state)
{
	(void)state;
	struct pair *p = mkpair_default();
	/* a receive scattered over two sges */
	struct ibv_sge sg[2] = {{(uintptr_t)p->bbuf, 10, p->bmr->lkey},
				{(uintptr_t)p->bbuf + 1000, 100, p->bmr->lkey}};
	struct ibv_recv_wr rw = {.wr_id = 5, .sg_list = sg, .num_sge = 2}, *rbad;
	assert_int_equal(ibv_post_recv(p->b.qp, &rw, &rbad), 0);
	assert_int_equal(t_post_recv(p->b.qp, p->bbuf + 2000, 64, p->bmr->lkey, 6), 0);
	fill(p->abuf, 50, 3);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_SEND, p->abuf, 50, p->amr->lkey,
				      0, 0, 0, IBV_SEND_SIGNALED, 100), 0);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_SEND_WITH_IMM, p->abuf, 20,
				      p->amr->lkey, 0, 0, htonl(7),
				      IBV_SEND_SIGNALED, 101), 0);
	struct ibv_wc wc[2];
	assert_int_equal(t_poll(p->b.cq, wc, 2, T_TIMEOUT_MS), 2);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(wc[0].opcode, IBV_WC_RECV);
	assert_int_equal(wc[0].byte_len, 50);
	assert_int_equal(wc[0].wr_id, 5);
	assert_false(wc[0].wc_flags & IBV_WC_WITH_IMM);
	assert_memory_equal(p->bbuf, p->abuf, 10);
	assert_memory_equal(p->bbuf + 1000, p->abuf + 10, 40);
	assert_int_equal(wc[1].opcode, IBV_WC_RECV);
	assert_int_equal(wc[1].wr_id, 6);
	assert_int_equal(wc[1].byte_len, 20);
	assert_true(wc[1].wc_flags & IBV_WC_WITH_IMM);
	assert_int_equal(ntohl(wc[1].imm_data), 7);
	assert_int_equal(t_poll(p->a.cq, wc, 2, T_TIMEOUT_MS), 2);
	assert_int_equal(wc[0].opcode, IBV_WC_SEND);
	assert_int_equal(wc[0].wr_id, 100);
	assert_int_equal(wc[1].wr_id, 101);
	freepair(p);
}

static void test_inline(void **state)
{
	(void)state;
	struct pair *p = mkpair_default();
	char src[200];
	fill(src, sizeof src, 4);
	char copy[200];
	memcpy(copy, src, sizeof src);
	/* inline data needs no MR: lkey 0, a stack buffer */
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE, src, 200, 0,
				      (uintptr_t)p->bbuf, p->bmr->rkey, 0,
				      IBV_SEND_INLINE | IBV_SEND_SIGNALED, 1), 0);
	memset(src, 0, sizeof src); /* the buffer is free once posted */
	struct ibv_wc wc;
	assert_int_equal(t_poll1(p->a.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_memory_equal(p->bbuf, copy, 200);
	/* more than max_inline_data (as granted) is refused at post time */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	assert_int_equal(ibv_query_qp(p->a.qp, &qa, IBV_QP_CAP, &qi), 0);
	assert_int_equal(qi.cap.max_inline_data, 316); /* asked 256 */
	char big[317] = {0};
	struct ibv_sge sge = {(uintptr_t)big, sizeof big, 0};
	struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_INLINE}, *bad = NULL;
	assert_int_equal(ibv_post_send(p->a.qp, &wr, &bad), EINVAL);
	assert_ptr_equal(bad, &wr);
	freepair(p);
}

static void test_read(void **state)
{
	(void)state;
	struct pair *p = mkpair_default();
	fill(p->bbuf, 1000, 5);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_READ, p->abuf, 1000,
				      p->amr->lkey, (uintptr_t)p->bbuf, p->bmr->rkey,
				      0, IBV_SEND_SIGNALED, 3), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(p->a.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_RDMA_READ);
	assert_int_equal(wc.byte_len, 1000);
	assert_memory_equal(p->abuf, p->bbuf, 1000);
	freepair(p);
}

/* Unsignalled WQEs hold their SQ slot until a later signalled completion is
 * polled; a full send queue refuses with ENOMEM and *bad_wr. */
static void test_signalling_and_sq_full(void **state)
{
	(void)state;
	struct t_qp_opts ao = {.max_send_wr = 4}, bo = {0};
	struct pair *p = mkpair(&ao, &bo, &t_conn_default, &t_conn_default, RW);
	for (int i = 0; i < 3; i++)
		assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE, p->abuf, 8,
					      p->amr->lkey, (uintptr_t)p->bbuf,
					      p->bmr->rkey, 0, 0, (uint64_t)i), 0);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE, p->abuf, 8,
				      p->amr->lkey, (uintptr_t)p->bbuf,
				      p->bmr->rkey, 0, IBV_SEND_SIGNALED, 3), 0);
	struct ibv_sge sge = {(uintptr_t)p->abuf, 8, p->amr->lkey};
	struct ibv_send_wr w2 = {.wr_id = 5, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE};
	struct ibv_send_wr w1 = w2;
	w1.wr_id = 4;
	w1.next = &w2;
	w1.wr.rdma.remote_addr = w2.wr.rdma.remote_addr = (uintptr_t)p->bbuf;
	w1.wr.rdma.rkey = w2.wr.rdma.rkey = p->bmr->rkey;
	struct ibv_send_wr *bad = NULL;
	assert_int_equal(ibv_post_send(p->a.qp, &w1, &bad), ENOMEM);
	assert_ptr_equal(bad, &w1);
	/* only the signalled WQE completes (waited for as long as a loaded
	 * machine takes; then 50 ms show nothing more comes) */
	struct ibv_wc wc[4];
	assert_int_equal(t_poll1(p->a.cq, wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc[0].wr_id, 3);
	assert_int_equal(t_poll(p->a.cq, wc + 1, 3, 50), 0);
	/* polling it freed all four slots */
	bad = NULL;
	assert_int_equal(ibv_post_send(p->a.qp, &w1, &bad), 0);
	freepair(p);
}

/* Completion events: armed CQ, event on the channel fd, ack. */
static void test_completion_channel(void **state)
{
	(void)state;
	struct t_qp_opts ao = {0}, bo = {.channel = 1};
	struct pair *p = mkpair(&ao, &bo, &t_conn_default, &t_conn_default, RW);
	assert_int_equal(ibv_req_notify_cq(p->b.cq, 0), 0);
	assert_int_equal(t_post_recv(p->b.qp, NULL, 0, 0, 1), 0);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, p->abuf, 4,
				      p->amr->lkey, (uintptr_t)p->bbuf, p->bmr->rkey,
				      htonl(1), 0, 1), 0);
	struct pollfd pf = {p->b.ch->fd, POLLIN, 0};
	assert_int_equal(poll(&pf, 1, T_TIMEOUT_MS), 1);
	struct ibv_cq *ecq = NULL;
	void *ectx = (void *)1;
	assert_int_equal(ibv_get_cq_event(p->b.ch, &ecq, &ectx), 0);
	assert_ptr_equal(ecq, p->b.cq);
	assert_null(ectx);
	ibv_ack_cq_events(ecq, 1);
	struct ibv_wc wc;
	assert_int_equal(ibv_poll_cq(p->b.cq, 1, &wc), 1);
	/* not re-armed: the next completion raises no event */
	assert_int_equal(t_post_recv(p->b.qp, NULL, 0, 0, 2), 0);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, p->abuf, 4,
				      p->amr->lkey, (uintptr_t)p->bbuf, p->bmr->rkey,
				      htonl(2), 0, 2), 0);
	assert_int_equal(poll(&pf, 1, 20), 0);
	assert_int_equal(t_poll1(p->b.cq, &wc, T_TIMEOUT_MS), 1);
	freepair(p);
}

/* ---- failures ---- */

static void test_local_protection(void **state)
{
	(void)state;
	struct pair *p = mkpair_default();
	/* bad lkey, then local bounds: each errors even though unsignalled */
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE, p->abuf, 8,
				      p->amr->lkey ^ 0x5500, (uintptr_t)p->bbuf,
				      p->bmr->rkey, 0, 0, 1), 0);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE, p->abuf, 8,
				      p->amr->lkey, (uintptr_t)p->bbuf,
				      p->bmr->rkey, 0, 0, 2), 0);
	struct ibv_wc wc[2];
	assert_int_equal(t_poll(p->a.cq, wc, 2, T_TIMEOUT_MS), 2);
	assert_int_equal(wc[0].status, IBV_WC_LOC_PROT_ERR);
	assert_int_equal(wc[0].wr_id, 1);
	assert_int_equal(wc[1].status, IBV_WC_WR_FLUSH_ERR); /* behind the error */
	assert_int_equal(wc[1].wr_id, 2);
	assert_int_equal(qstate(p->a.qp), IBV_QPS_ERR);
	assert_int_equal(qstate(p->b.qp), IBV_QPS_RTS); /* not the responder's fault */
	freepair(p);

	p = mkpair_default();
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE, p->abuf + BUFSZ - 4, 8,
				      p->amr->lkey, (uintptr_t)p->bbuf,
				      p->bmr->rkey, 0, 0, 3), 0);
	assert_int_equal(t_poll1(p->a.cq, wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc[0].status, IBV_WC_LOC_PROT_ERR);
	freepair(p);
}

static void check_remote_access(uint64_t off, uint32_t len, uint32_t rkey_xor,
				unsigned bmr_access)
{
	struct t_qp_opts o = {0};
	struct pair *p = mkpair(&o, &o, &t_conn_default, &t_conn_default, bmr_access);
	assert_int_equal(t_post_recv(p->b.qp, p->bbuf, 8, p->bmr->lkey, 9), 0);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE, p->abuf, len,
				      p->amr->lkey, (uintptr_t)p->bbuf + off,
				      p->bmr->rkey ^ rkey_xor, 0, IBV_SEND_SIGNALED, 1), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(p->a.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_REM_ACCESS_ERR);
	assert_int_equal(qstate(p->a.qp), IBV_QPS_ERR);
	/* the responder goes to ERR too, flushes, and hears of it */
	assert_int_equal(qstate(p->b.qp), IBV_QPS_ERR);
	assert_int_equal(t_poll1(p->b.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(wc.wr_id, 9);
	struct ibv_async_event ev;
	assert_int_equal(async_event(p->b.ctx, &ev, T_TIMEOUT_MS), 0);
	assert_int_equal(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
	assert_ptr_equal(ev.element.qp, p->b.qp);
	ibv_ack_async_event(&ev);
	freepair(p);
}

static void test_remote_access(void **state)
{
	(void)state;
	check_remote_access(0, 8, 0x7700, RW);                          /* bad rkey */
	check_remote_access(BUFSZ - 4, 8, 0, RW);                       /* bounds */
	check_remote_access(0, 8, 0, IBV_ACCESS_LOCAL_WRITE);           /* no REMOTE_WRITE */
}

/* The responder QP itself does not allow RDMA WRITE: invalid request. */
static void test_remote_invalid_request(void **state)
{
	(void)state;
	struct t_qp_opts o = {0};
	struct t_conn bc = t_conn_default;
	bc.access = 0;
	struct pair *p = mkpair(&o, &o, &t_conn_default, &bc, RW);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE, p->abuf, 8,
				      p->amr->lkey, (uintptr_t)p->bbuf,
				      p->bmr->rkey, 0, IBV_SEND_SIGNALED, 1), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(p->a.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_REM_INV_REQ_ERR);
	struct ibv_async_event ev;
	assert_int_equal(async_event(p->b.ctx, &ev, T_TIMEOUT_MS), 0);
	assert_int_equal(ev.event_type, IBV_EVENT_QP_REQ_ERR);
	ibv_ack_async_event(&ev);
	freepair(p);
}

/* A receive too small: local length error there, invalid request here. */
static void test_recv_too_small(void **state)
{
	(void)state;
	struct pair *p = mkpair_default();
	assert_int_equal(t_post_recv(p->b.qp, p->bbuf, 8, p->bmr->lkey, 1), 0);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_SEND, p->abuf, 100, p->amr->lkey,
				      0, 0, 0, IBV_SEND_SIGNALED, 2), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(p->a.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_REM_INV_REQ_ERR);
	assert_int_equal(t_poll1(p->b.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_LOC_LEN_ERR);
	assert_int_equal(wc.wr_id, 1);
	assert_int_equal(qstate(p->b.qp), IBV_QPS_ERR);
	freepair(p);
}

static void test_rnr_retry_exceeded(void **state)
{
	(void)state;
	struct t_qp_opts o = {0};
	struct t_conn ac = t_conn_default;
	ac.rnr_retry = 2;
	struct pair *p = mkpair(&o, &o, &ac, &t_conn_default, RW);
	/* SEND, then WRITE-with-imm on a fresh pair: neither finds a receive */
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_SEND, p->abuf, 8, p->amr->lkey,
				      0, 0, 0, 0, 1), 0);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE, p->abuf, 8,
				      p->amr->lkey, (uintptr_t)p->bbuf, p->bmr->rkey,
				      0, IBV_SEND_SIGNALED, 2), 0);
	struct ibv_wc wc[2];
	assert_int_equal(t_poll(p->a.cq, wc, 2, T_TIMEOUT_MS), 2);
	assert_int_equal(wc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
	assert_int_equal(wc[0].wr_id, 1);
	assert_int_equal(wc[1].status, IBV_WC_WR_FLUSH_ERR); /* waited behind it */
	assert_int_equal(qstate(p->a.qp), IBV_QPS_ERR);
	freepair(p);

	p = mkpair(&o, &o, &ac, &t_conn_default, RW);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, p->abuf, 8,
				      p->amr->lkey, (uintptr_t)p->bbuf, p->bmr->rkey,
				      0, 0, 3), 0);
	assert_int_equal(t_poll1(p->a.cq, wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
	freepair(p);
}

/* rnr_retry 7 retries forever: the send lands once a receive is posted. */
static void test_rnr_infinite(void **state)
{
	(void)state;
	struct t_qp_opts o = {0};
	struct t_conn ac = t_conn_default;
	ac.rnr_retry = 7;
	struct pair *p = mkpair(&o, &o, &ac, &t_conn_default, RW);
	fill(p->abuf, 16, 6);
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_SEND, p->abuf, 16, p->amr->lkey,
				      0, 0, 0, IBV_SEND_SIGNALED, 1), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(p->a.cq, &wc, 50), 0); /* still waiting */
	assert_int_equal(t_post_recv(p->b.qp, p->bbuf, 64, p->bmr->lkey, 2), 0);
	assert_int_equal(t_poll1(p->a.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(t_poll1(p->b.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.byte_len, 16);
	assert_memory_equal(p->bbuf, p->abuf, 16);
	freepair(p);
}

/* The peer QP is gone (or never connected): the requester's retries run
 * out. */
static void test_retry_exceeded(void **state)
{
	(void)state;
	struct pair *p = mkpair_default();
	ibv_destroy_qp(p->b.qp);
	p->b.qp = NULL;
	assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE, p->abuf, 8,
				      p->amr->lkey, (uintptr_t)p->bbuf, p->bmr->rkey,
				      0, 0, 1), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(p->a.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
	assert_int_equal(qstate(p->a.qp), IBV_QPS_ERR);
	freepair(p);
}

/* More completions than the CQ holds: CQ error, async event to its owner,
 * the QP on it to ERR with IBV_EVENT_QP_FATAL; ibv_poll_cq never reports
 * the overrun itself. */
static void test_cq_overrun(void **state)
{
	(void)state;
	struct t_qp_opts ao = {0}, bo = {.cqe = 2};
	struct pair *p = mkpair(&ao, &bo, &t_conn_default, &t_conn_default, RW);
	int cap = p->b.cq->cqe;
	for (int i = 0; i <= cap; i++)
		assert_int_equal(t_post_recv(p->b.qp, NULL, 0, 0, (uint64_t)i), 0);
	for (int i = 0; i <= cap; i++)
		assert_int_equal(t_post_write(p->a.qp, IBV_WR_RDMA_WRITE_WITH_IMM,
					      p->abuf, 4, p->amr->lkey,
					      (uintptr_t)p->bbuf, p->bmr->rkey, 0, 0,
					      (uint64_t)i), 0);
	struct ibv_async_event ev;
	assert_int_equal(async_event(p->b.ctx, &ev, T_TIMEOUT_MS), 0);
	assert_int_equal(ev.event_type, IBV_EVENT_CQ_ERR);
	assert_ptr_equal(ev.element.cq, p->b.cq);
	ibv_ack_async_event(&ev);
	assert_int_equal(async_event(p->b.ctx, &ev, T_TIMEOUT_MS), 0);
	assert_int_equal(ev.event_type, IBV_EVENT_QP_FATAL);
	assert_ptr_equal(ev.element.qp, p->b.qp);
	ibv_ack_async_event(&ev);
	assert_int_equal(qstate(p->b.qp), IBV_QPS_ERR);
	struct ibv_wc wc[8];
	assert_int_equal(t_poll(p->b.cq, wc, 8, 50), cap); /* what fitted */
	assert_int_equal(ibv_poll_cq(p->b.cq, 8, wc), 0);  /* then nothing */
	freepair(p);
}

/* ---- across processes ---- */

/* The child: a subscriber-like endpoint.  It registers a ring, receives a
 * WRITE-with-imm (waiting on its completion channel), checks it, and answers
 * with a SEND-with-imm carrying the checksum it saw. */
static int child_responder(int fd, void *arg)
{
	(void)arg;
	struct t_node n;
	struct t_qp_opts o = {.channel = 1};
	CHILD_CHECK(t_node_init(&n, &o) == 0);
	char *ring = calloc(1, BUFSZ);
	struct ibv_mr *mr = ibv_reg_mr(n.pd, ring, BUFSZ, RW);
	CHILD_CHECK(mr);
	struct t_info me = {n.qp->qp_num, mr->rkey, (uintptr_t)ring, BUFSZ, 0}, peer;
	CHILD_CHECK(t_send(fd, &me, sizeof me) == 0);
	CHILD_CHECK(t_recv(fd, &peer, sizeof peer, T_TIMEOUT_MS) == 0);
	CHILD_CHECK(t_connect(n.qp, peer.qpn, &t_conn_default) == 0);
	CHILD_CHECK(t_post_recv(n.qp, NULL, 0, 0, 11) == 0);
	CHILD_CHECK(ibv_req_notify_cq(n.cq, 0) == 0);
	CHILD_CHECK(t_send(fd, &me, sizeof me) == 0); /* ready */

	struct pollfd pf = {n.ch->fd, POLLIN, 0};
	CHILD_CHECK(poll(&pf, 1, T_TIMEOUT_MS) == 1);
	struct ibv_cq *ecq;
	void *ectx;
	CHILD_CHECK(ibv_get_cq_event(n.ch, &ecq, &ectx) == 0 && ecq == n.cq);
	ibv_ack_cq_events(ecq, 1);
	struct ibv_wc wc;
	CHILD_CHECK(ibv_poll_cq(n.cq, 1, &wc) == 1);
	CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
	CHILD_CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
	CHILD_CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
	CHILD_CHECK(wc.imm_data == htonl(0x01020304));
	CHILD_CHECK(wc.byte_len == 1000);
	CHILD_CHECK(wc.src_qp == peer.qpn);
	uint32_t sum = 0;
	for (int i = 0; i < 1000; i++)
		sum = sum * 31 + (uint8_t)ring[512 + i];
	memcpy(ring, &sum, 4);
	CHILD_CHECK(t_post_write(n.qp, IBV_WR_SEND_WITH_IMM, ring, 4, mr->lkey, 0, 0,
				 htonl(sum), IBV_SEND_SIGNALED, 12) == 0);
	CHILD_CHECK(t_poll1(n.cq, &wc, T_TIMEOUT_MS) == 1);
	CHILD_CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 12);
	/* wait for the parent to finish before tearing down */
	char done;
	CHILD_CHECK(t_recv(fd, &done, 1, T_TIMEOUT_MS) == 0);
	ibv_dereg_mr(mr);
	t_node_fini(&n);
	free(ring);
	return 0;
}

static void test_cross_process(void **state)
{
	(void)state;
	struct t_child c = t_fork(child_responder, NULL);
	assert_true(c.pid > 0);
	struct t_node n;
	struct t_qp_opts o = {0};
	assert_int_equal(t_node_init(&n, &o), 0);
	char *buf = calloc(1, BUFSZ);
	struct ibv_mr *mr = ibv_reg_mr(n.pd, buf, BUFSZ, IBV_ACCESS_LOCAL_WRITE);
	struct t_info peer, me = {n.qp->qp_num, 0, 0, 0, 0};
	assert_int_equal(t_recv(c.fd, &peer, sizeof peer, T_TIMEOUT_MS), 0);
	assert_int_equal(t_send(c.fd, &me, sizeof me), 0);
	assert_int_equal(t_connect(n.qp, peer.qpn, &t_conn_default), 0);
	assert_int_equal(t_post_recv(n.qp, buf + 8192, 64, mr->lkey, 21), 0);
	assert_int_equal(t_recv(c.fd, &peer, sizeof peer, T_TIMEOUT_MS), 0);

	fill(buf, 1000, 9);
	uint32_t sum = 0;
	for (int i = 0; i < 1000; i++)
		sum = sum * 31 + (uint8_t)buf[i];
	assert_int_equal(t_post_write(n.qp, IBV_WR_RDMA_WRITE_WITH_IMM, buf, 1000,
				      mr->lkey, peer.addr + 512, peer.rkey,
				      htonl(0x01020304), IBV_SEND_SIGNALED, 20), 0);
	struct ibv_wc wc[2];
	assert_int_equal(t_poll(n.cq, wc, 2, T_TIMEOUT_MS), 2);
	/* The answer may complete before our own send does: send and receive
	 * completions of one QP are not ordered with each other. */
	if (wc[0].wr_id == 21) {
		struct ibv_wc t = wc[0];
		wc[0] = wc[1];
		wc[1] = t;
	}
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(wc[0].wr_id, 20);
	assert_int_equal(wc[1].status, IBV_WC_SUCCESS);
	assert_int_equal(wc[1].opcode, IBV_WC_RECV);
	assert_int_equal(wc[1].wr_id, 21);
	assert_int_equal(ntohl(wc[1].imm_data), sum);
	assert_memory_equal(buf + 8192, &sum, 4);
	assert_int_equal(t_send(c.fd, "x", 1), 0);
	assert_int_equal(t_wait(&c, T_TIMEOUT_MS), 0);
	ibv_dereg_mr(mr);
	t_node_fini(&n);
	free(buf);
}

/* The child connects and dies without cleaning up. */
static int child_dies(int fd, void *arg)
{
	(void)arg;
	struct t_node n;
	struct t_qp_opts o = {0};
	CHILD_CHECK(t_node_init(&n, &o) == 0);
	char *ring = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(n.pd, ring, 4096, RW);
	struct t_info me = {n.qp->qp_num, mr->rkey, (uintptr_t)ring, 4096, 0}, peer;
	CHILD_CHECK(t_send(fd, &me, sizeof me) == 0);
	CHILD_CHECK(t_recv(fd, &peer, sizeof peer, T_TIMEOUT_MS) == 0);
	CHILD_CHECK(t_connect(n.qp, peer.qpn, &t_conn_default) == 0);
	CHILD_CHECK(t_send(fd, &me, sizeof me) == 0);
	return 0; /* _exit: no destroy, no close */
}

static void test_dead_peer(void **state)
{
	(void)state;
	struct t_child c = t_fork(child_dies, NULL);
	struct t_node n;
	struct t_qp_opts o = {0};
	assert_int_equal(t_node_init(&n, &o), 0);
	char buf[64] = {0};
	struct ibv_mr *mr = ibv_reg_mr(n.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	struct t_info peer, me = {n.qp->qp_num, 0, 0, 0, 0};
	assert_int_equal(t_recv(c.fd, &peer, sizeof peer, T_TIMEOUT_MS), 0);
	assert_int_equal(t_send(c.fd, &me, sizeof me), 0);
	assert_int_equal(t_connect(n.qp, peer.qpn, &t_conn_default), 0);
	assert_int_equal(t_recv(c.fd, &peer, sizeof peer, T_TIMEOUT_MS), 0);
	assert_int_equal(t_wait(&c, T_TIMEOUT_MS), 0); /* it is dead now */
	assert_int_equal(t_post_write(n.qp, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey,
				      peer.addr, peer.rkey, 0, IBV_SEND_SIGNALED, 1), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(n.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
	ibv_dereg_mr(mr);
	t_node_fini(&n);
}

/* The thread id of this process's send engine ("sr-engine"), waiting
 * up to `ms` for it to name itself; -1 if there is none. */
static pid_t engine_tid(int ms)
{
	uint64_t end = t_now_ms() + (uint64_t)ms;
	do {
		DIR *d = opendir("/proc/self/task");
		struct dirent *e;
		pid_t found = -1;
		while (d && found < 0 && (e = readdir(d)) != NULL) {
			char path[300], name[32] = "";
			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
			FILE *f = fopen(path, "r");
			if (!f)
				continue;
			if (fgets(name, sizeof name, f) && strcmp(name, "sr-engine\n") == 0)
				found = (pid_t)atoi(e->d_name);
			fclose(f);
		}
		if (d)
			closedir(d);
		if (found > 0)
			return found;
		usleep(1000);
	} while (t_now_ms() < end);
	return -1;
}

/* In a fresh process: the first post comes from a thread pinned to one
 * CPU (a strategy's polling thread); the engine it starts must run on the
 * CPUs the process had, not on that one. */
static int child_pinned_poster(int fd, void *arg)
{
	(void)fd;
	const cpu_set_t *all = arg;
	cpu_set_t one, got;
	int cpu = 0;
	while (!CPU_ISSET(cpu, all))
		cpu++;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	CHILD_CHECK(sched_setaffinity(0, sizeof one, &one) == 0);

	struct t_node a, b;
	struct t_qp_opts o = {0};
	CHILD_CHECK(t_node_init(&a, &o) == 0);
	CHILD_CHECK(t_node_init(&b, &o) == 0);
	char *src = calloc(1, 4096), *dst = calloc(1, 4096);
	struct ibv_mr *smr = ibv_reg_mr(a.pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(b.pd, dst, 4096, RW);
	CHILD_CHECK(smr && dmr);
	CHILD_CHECK(t_connect(a.qp, b.qp->qp_num, &t_conn_default) == 0);
	CHILD_CHECK(t_connect(b.qp, a.qp->qp_num, &t_conn_default) == 0);
	fill(src, 4096, 3);
	CHILD_CHECK(t_post_write(a.qp, IBV_WR_RDMA_WRITE, src, 4096, smr->lkey,
				 (uintptr_t)dst, dmr->rkey, 0, IBV_SEND_SIGNALED,
				 7) == 0);
	struct ibv_wc wc;
	CHILD_CHECK(t_poll1(a.cq, &wc, T_TIMEOUT_MS) == 1);
	CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
	CHILD_CHECK(memcmp(src, dst, 4096) == 0);

	pid_t tid = engine_tid(T_TIMEOUT_MS);
	CHILD_CHECK(tid > 0);
	CHILD_CHECK(sched_getaffinity(tid, sizeof got, &got) == 0);
	CHILD_CHECK(CPU_EQUAL(&got, all));
	CHILD_CHECK(!CPU_EQUAL(&got, &one));
	/* The poster itself stays where the application put it. */
	CHILD_CHECK(sched_getaffinity(0, sizeof got, &got) == 0);
	CHILD_CHECK(CPU_EQUAL(&got, &one));
	ibv_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	t_node_fini(&a);
	t_node_fini(&b);
	free(src);
	free(dst);
	return 0;
}

static void test_engine_off_the_posters_core(void **state)
{
	(void)state;
	cpu_set_t all;
	assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
	if (CPU_COUNT(&all) < 2) {
		fprintf(stderr, "SKIP: one CPU: the engine has nowhere else to run\n");
		skip();
	}
	struct t_child c = t_fork(child_pinned_poster, &all);
	assert_true(c.pid > 0);
	assert_int_equal(t_wait(&c, 2 * T_TIMEOUT_MS), 0);
}

int main(void)
{
	t_fabric_setup("datapath");
	if (!t_is_softrdma()) {
		fprintf(stderr, "SKIP: the loaded libibverbs is not softrdma\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write),
		cmocka_unit_test(test_write_imm),
		cmocka_unit_test(test_send_recv),
		cmocka_unit_test(test_inline),
		cmocka_unit_test(test_read),
		cmocka_unit_test(test_signalling_and_sq_full),
		cmocka_unit_test(test_completion_channel),
		cmocka_unit_test(test_local_protection),
		cmocka_unit_test(test_remote_access),
		cmocka_unit_test(test_remote_invalid_request),
		cmocka_unit_test(test_recv_too_small),
		cmocka_unit_test(test_rnr_retry_exceeded),
		cmocka_unit_test(test_rnr_infinite),
		cmocka_unit_test(test_retry_exceeded),
		cmocka_unit_test(test_cq_overrun),
		cmocka_unit_test(test_cross_process),
		cmocka_unit_test(test_dead_peer),
		cmocka_unit_test(test_engine_off_the_posters_core),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	return t_fabric_check_removed(r);
}
