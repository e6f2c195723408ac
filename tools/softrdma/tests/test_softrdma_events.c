/*
 * softrdma: asynchronous events (ibv_get_async_event / ibv_ack_async_event)
 * driven from outside by softrdma-ctl, as an operator or a link would:
 *
 *   - port down: IBV_EVENT_PORT_ERR to every context of that process, the
 *     port reads DOWN, RC requests to or from it time out
 *     (IBV_WC_RETRY_EXC_ERR), UD datagrams to it are lost; port up:
 *     IBV_EVENT_PORT_ACTIVE and traffic flows again;
 *   - a GID change: IBV_EVENT_GID_CHANGE, the table reads the new entry,
 *     requests to the old GID are lost;
 *   - a QP made fatal: IBV_EVENT_QP_FATAL, the QP in ERR with its
 *     receives flushed.
 * (CQ overrun, QP_FATAL on the QPs of that CQ, and the responder's
 * QP_ACCESS_ERR / QP_REQ_ERR are in test_softrdma_datapath.)
 */
#include "sr_test.h"

#include <arpa/inet.h>

#define BUFSZ 4096

static const unsigned RW = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ;

static const struct t_conn fast = {
	.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	.min_rnr_timer = 1, .timeout = 8, .retry_cnt = 2, .rnr_retry = 3,
};

struct xinfo {
	uint32_t qpn, rkey;
	uint64_t addr;
	int32_t pid;
};

static int async_event(struct ibv_context *c, struct ibv_async_event *ev, int ms)
{
	struct pollfd p = {c->async_fd, POLLIN, 0};
	if (poll(&p, 1, ms) != 1)
		return -1;
	return ibv_get_async_event(c, ev);
}

/* The peer: one RC QP with a ring, and a second context that must hear
 * the port events too.  It reports each event it gets, in order, to the
 * parent (one byte: the event type), until told to stop. */
static int child_peer(int fd, void *arg)
{
	(void)arg;
	struct t_node n;
	struct t_qp_opts o = {0};
	CHILD_CHECK(t_node_init(&n, &o) == 0);
	struct ibv_context *c2 = t_open();
	CHILD_CHECK(c2);
	char *ring = calloc(1, BUFSZ);
	struct ibv_mr *mr = ibv_reg_mr(n.pd, ring, BUFSZ, RW);
	CHILD_CHECK(mr);
	struct xinfo me = {n.qp->qp_num, mr->rkey, (uintptr_t)ring, (int32_t)getpid()}, peer;
	CHILD_CHECK(t_send(fd, &me, sizeof me) == 0);
	CHILD_CHECK(t_recv(fd, &peer, sizeof peer, T_TIMEOUT_MS) == 0);
	CHILD_CHECK(t_connect(n.qp, peer.qpn, &fast) == 0);
	CHILD_CHECK(t_post_recv(n.qp, ring, 64, mr->lkey, 77) == 0);
	CHILD_CHECK(t_send(fd, &me, sizeof me) == 0);
	for (;;) {
		char cmd;
		CHILD_CHECK(t_recv(fd, &cmd, 1, 20000) == 0);
		if (cmd == 'q')
			break;
		if (cmd == 'e' || cmd == 'E') {
			/* the next event on each context */
			struct ibv_async_event ev;
			CHILD_CHECK(async_event(n.ctx, &ev, T_TIMEOUT_MS) == 0);
			char t = (char)ev.event_type;
			if (ev.event_type == IBV_EVENT_QP_FATAL)
				CHILD_CHECK(ev.element.qp == n.qp);
			else
				CHILD_CHECK(ev.element.port_num == 1);
			ibv_ack_async_event(&ev);
			if (cmd == 'E') {
				CHILD_CHECK(async_event(c2, &ev, T_TIMEOUT_MS) == 0);
				CHILD_CHECK(ev.event_type == (enum ibv_event_type)t);
				ibv_ack_async_event(&ev);
			}
			CHILD_CHECK(t_send(fd, &t, 1) == 0);
		} else if (cmd == 's') {
			/* port state and GID 3 */
			struct ibv_port_attr pa;
			union ibv_gid g;
			CHILD_CHECK(ibv_query_port(n.ctx, 1, &pa) == 0);
			CHILD_CHECK(ibv_query_gid(n.ctx, 1, 3, &g) == 0);
			char r[17];
			r[0] = (char)pa.state;
			memcpy(r + 1, g.raw, 16);
			CHILD_CHECK(t_send(fd, r, sizeof r) == 0);
		} else if (cmd == 'w') {
			/* the flushed receive and the QP's state */
			struct ibv_wc wc;
			CHILD_CHECK(t_poll1(n.cq, &wc, T_TIMEOUT_MS) == 1);
			struct ibv_qp_attr a;
			struct ibv_qp_init_attr ia;
			CHILD_CHECK(ibv_query_qp(n.qp, &a, IBV_QP_STATE, &ia) == 0);
			char r[2] = {(char)wc.status, (char)a.qp_state};
			CHILD_CHECK(wc.wr_id == 77);
			CHILD_CHECK(t_send(fd, r, 2) == 0);
		}
	}
	ibv_dereg_mr(mr);
	ibv_close_device(c2);
	t_node_fini(&n);
	free(ring);
	return 0;
}

struct me {
	struct t_node n;
	char *buf;
	struct ibv_mr *mr;
	struct xinfo peer;
	struct t_child c;
};

static void setup_pair(struct me *m)
{
	m->c = t_fork(child_peer, NULL);
	assert_true(m->c.pid > 0);
	struct t_qp_opts o = {.sig_all = 1};
	assert_int_equal(t_node_init(&m->n, &o), 0);
	m->buf = calloc(1, BUFSZ);
	m->mr = ibv_reg_mr(m->n.pd, m->buf, BUFSZ, RW);
	assert_non_null(m->mr);
	struct xinfo me = {m->n.qp->qp_num, 0, 0, 0};
	assert_int_equal(t_recv(m->c.fd, &m->peer, sizeof m->peer, T_TIMEOUT_MS), 0);
	assert_int_equal(t_send(m->c.fd, &me, sizeof me), 0);
	assert_int_equal(t_connect(m->n.qp, m->peer.qpn, &fast), 0);
	assert_int_equal(t_recv(m->c.fd, &m->peer, sizeof m->peer, T_TIMEOUT_MS), 0);
}

static void teardown_pair(struct me *m)
{
	assert_int_equal(t_send(m->c.fd, "q", 1), 0);
	assert_int_equal(t_wait(&m->c, T_TIMEOUT_MS), 0);
	ibv_dereg_mr(m->mr);
	t_node_fini(&m->n);
	free(m->buf);
}

static enum ibv_wc_status write_peer(struct me *m, uint64_t id)
{
	struct ibv_wc wc;
	if (t_post_write(m->n.qp, IBV_WR_RDMA_WRITE, m->buf, 8, m->mr->lkey,
			 m->peer.addr + 128, m->peer.rkey, 0, 0, id))
		return (enum ibv_wc_status)-1;
	if (t_poll1(m->n.cq, &wc, T_TIMEOUT_MS) != 1)
		return (enum ibv_wc_status)-2;
	return wc.status;
}

static char peer_event(struct me *m, int both)
{
	char t = 0;
	assert_int_equal(t_send(m->c.fd, both ? "E" : "e", 1), 0);
	assert_int_equal(t_recv(m->c.fd, &t, 1, T_TIMEOUT_MS), 0);
	return t;
}

static void peer_state(struct me *m, char *state, uint8_t gid3[16])
{
	char r[17];
	assert_int_equal(t_send(m->c.fd, "s", 1), 0);
	assert_int_equal(t_recv(m->c.fd, r, sizeof r, T_TIMEOUT_MS), 0);
	*state = r[0];
	memcpy(gid3, r + 1, 16);
}

static void test_port_down_and_up(void **state)
{
	(void)state;
	struct me m;
	char st, args[128];
	uint8_t g[16];
	setup_pair(&m);
	assert_int_equal(write_peer(&m, 1), IBV_WC_SUCCESS);
	snprintf(args, sizeof args, "port %d down", m.peer.pid);
	assert_int_equal(t_ctl(args), 0);
	assert_int_equal(peer_event(&m, 1), IBV_EVENT_PORT_ERR); /* both contexts */
	peer_state(&m, &st, g);
	assert_int_equal(st, IBV_PORT_DOWN);
	/* our port is up, theirs is down: the write is lost, retried, failed */
	assert_int_equal(write_peer(&m, 2), IBV_WC_RETRY_EXC_ERR);
	/* up again: the event, and a new connection works */
	snprintf(args, sizeof args, "port %d up", m.peer.pid);
	assert_int_equal(t_ctl(args), 0);
	assert_int_equal(peer_event(&m, 1), IBV_EVENT_PORT_ACTIVE);
	peer_state(&m, &st, g);
	assert_int_equal(st, IBV_PORT_ACTIVE);
	struct ibv_qp_attr z = {.qp_state = IBV_QPS_RESET};
	assert_int_equal(ibv_modify_qp(m.n.qp, &z, IBV_QP_STATE), 0);
	assert_int_equal(t_connect(m.n.qp, m.peer.qpn, &fast), 0);
	assert_int_equal(write_peer(&m, 3), IBV_WC_SUCCESS);
	/* a port that is already up: no event (nothing changed) */
	assert_int_equal(t_ctl(args), 0);
	/* our own port down: nothing leaves it */
	snprintf(args, sizeof args, "port %d down", (int)getpid());
	assert_int_equal(t_ctl(args), 0);
	struct ibv_async_event ev;
	assert_int_equal(async_event(m.n.ctx, &ev, T_TIMEOUT_MS), 0);
	assert_int_equal(ev.event_type, IBV_EVENT_PORT_ERR);
	ibv_ack_async_event(&ev);
	struct ibv_port_attr pa;
	assert_int_equal(ibv_query_port(m.n.ctx, 1, &pa), 0);
	assert_int_equal(pa.state, IBV_PORT_DOWN);
	assert_int_equal(write_peer(&m, 4), IBV_WC_RETRY_EXC_ERR);
	snprintf(args, sizeof args, "port %d up", (int)getpid());
	assert_int_equal(t_ctl(args), 0);
	assert_int_equal(async_event(m.n.ctx, &ev, T_TIMEOUT_MS), 0);
	assert_int_equal(ev.event_type, IBV_EVENT_PORT_ACTIVE);
	ibv_ack_async_event(&ev);
	teardown_pair(&m);
}

static void test_gid_change(void **state)
{
	(void)state;
	struct me m;
	char st, args[160];
	uint8_t g[16];
	setup_pair(&m);
	snprintf(args, sizeof args, "gid %d 3 ::ffff:10.1.2.3 v2", m.peer.pid);
	assert_int_equal(t_ctl(args), 0);
	assert_int_equal(peer_event(&m, 0), IBV_EVENT_GID_CHANGE);
	peer_state(&m, &st, g);
	static const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
					 10, 1, 2, 3};
	assert_memory_equal(g, want, 16);
	/* we still address its ::ffff:127.0.0.1 as RoCE v2: no such GID */
	assert_int_equal(write_peer(&m, 1), IBV_WC_RETRY_EXC_ERR);
	/* an entry emptied reads as the zero GID */
	snprintf(args, sizeof args, "gid %d 3 - none", m.peer.pid);
	assert_int_equal(t_ctl(args), 0);
	assert_int_equal(peer_event(&m, 0), IBV_EVENT_GID_CHANGE);
	peer_state(&m, &st, g);
	assert_memory_equal(g, ((uint8_t[16]){0}), 16);
	/* refusals */
	assert_int_not_equal(t_ctl("gid 1 99 ::1 v2"), 0);
	assert_int_not_equal(t_ctl("port 1 sideways"), 0);
	assert_int_not_equal(t_ctl("port 999999 down"), 0); /* no such process */
	teardown_pair(&m);
}

static void test_qp_fatal(void **state)
{
	(void)state;
	struct me m;
	char args[64], r[2];
	setup_pair(&m);
	snprintf(args, sizeof args, "qp-fatal %u", m.peer.qpn);
	assert_int_equal(t_ctl(args), 0);
	assert_int_equal(peer_event(&m, 0), IBV_EVENT_QP_FATAL);
	assert_int_equal(t_send(m.c.fd, "w", 1), 0);
	assert_int_equal(t_recv(m.c.fd, r, 2, T_TIMEOUT_MS), 0);
	assert_int_equal(r[0], IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(r[1], IBV_QPS_ERR);
	/* its QP in ERR: our writes find no one */
	assert_int_equal(write_peer(&m, 1), IBV_WC_RETRY_EXC_ERR);
	assert_int_not_equal(t_ctl("qp-fatal 12345678"), 0);
	assert_int_equal(t_ctl("show > /dev/null"), 0);
	teardown_pair(&m);
}

int main(void)
{
	t_fabric_setup("events");
	if (!t_is_softrdma()) {
		fprintf(stderr, "SKIP: the loaded libibverbs is not softrdma\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_port_down_and_up),
		cmocka_unit_test(test_gid_change),
		cmocka_unit_test(test_qp_fatal),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	return t_fabric_check_removed(r);
}
