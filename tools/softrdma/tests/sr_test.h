/*
 * Helpers shared by the softrdma tests: open the device, build and connect
 * RC QPs, poll with a deadline, and run a second process.  Everything waits
 * with a deadline; nothing spins without bound.
 */
#ifndef SR_TEST_H
#define SR_TEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <infiniband/verbs.h>

#define T_TIMEOUT_MS 5000

static inline uint64_t t_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void t_nap(void)
{
	struct timespec ts = {0, 100000}; /* 100 us */
	nanosleep(&ts, NULL);
}

/* Gives each test binary its own fabric when not run by the test runner. */
static inline void t_fabric_setup(const char *name)
{
	if (!getenv("SOFTRDMA_FABRIC")) {
		char buf[64];
		snprintf(buf, sizeof buf, "t-%s-%d", name, (int)getpid());
		setenv("SOFTRDMA_FABRIC", buf, 1);
	}
}

static inline int t_fabric_exists(void)
{
	char path[128];
	struct stat st;
	snprintf(path, sizeof path, "/dev/shm/softrdma.%s", getenv("SOFTRDMA_FABRIC"));
	return stat(path, &st) == 0;
}

/* End of a test binary: the fabric file must be gone (every context was
 * closed); remove it anyway so a failed run leaves nothing behind. */
static inline int t_fabric_check_removed(int rc)
{
	if (!t_fabric_exists())
		return rc;
	char path[128];
	snprintf(path, sizeof path, "/dev/shm/softrdma.%s", getenv("SOFTRDMA_FABRIC"));
	unlink(path);
	fprintf(stderr, "fabric file %s was left behind (removed now)\n", path);
	return rc ? rc : 1;
}

/* 1 when the loaded libibverbs is softrdma; tests skip (77) otherwise. */
static inline int t_is_softrdma(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	int ok = l && n == 1 && !strcmp(ibv_get_device_name(l[0]), "softrdma0");
	if (l)
		ibv_free_device_list(l);
	return ok;
}

static inline struct ibv_context *t_open(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		return NULL;
	struct ibv_context *c = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	return c;
}

/* One endpoint: context, PD, one CQ for send and receive, one RC QP. */
struct t_node {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

struct t_qp_opts {
	int sig_all;
	uint32_t max_send_wr, max_recv_wr, max_inline;
	int cqe;
	int channel;
};

static inline int t_node_init(struct t_node *n, const struct t_qp_opts *o)
{
	memset(n, 0, sizeof *n);
	n->ctx = t_open();
	if (!n->ctx)
		return -1;
	n->pd = ibv_alloc_pd(n->ctx);
	if (o->channel)
		n->ch = ibv_create_comp_channel(n->ctx);
	n->cq = ibv_create_cq(n->ctx, o->cqe ? o->cqe : 256, NULL, n->ch, 0);
	if (!n->pd || !n->cq)
		return -1;
	struct ibv_qp_init_attr ia = {
		.send_cq = n->cq,
		.recv_cq = n->cq,
		.cap = {.max_send_wr = o->max_send_wr ? o->max_send_wr : 64,
			.max_recv_wr = o->max_recv_wr ? o->max_recv_wr : 64,
			.max_send_sge = 2,
			.max_recv_sge = 2,
			.max_inline_data = o->max_inline},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = o->sig_all,
	};
	n->qp = ibv_create_qp(n->pd, &ia);
	return n->qp ? 0 : -1;
}

static inline void t_node_fini(struct t_node *n)
{
	if (n->qp)
		ibv_destroy_qp(n->qp);
	if (n->cq)
		ibv_destroy_cq(n->cq);
	if (n->ch)
		ibv_destroy_comp_channel(n->ch);
	if (n->pd)
		ibv_dealloc_pd(n->pd);
	if (n->ctx)
		ibv_close_device(n->ctx);
	memset(n, 0, sizeof *n);
}

static inline int t_to_init(struct ibv_qp *qp, unsigned access)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0,
				.port_num = 1, .qp_access_flags = access};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					     IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static inline void t_rtr_attr(struct ibv_qp_attr *a, uint32_t dest_qpn,
			      uint8_t min_rnr_timer)
{
	memset(a, 0, sizeof *a);
	a->qp_state = IBV_QPS_RTR;
	a->path_mtu = IBV_MTU_1024;
	a->dest_qp_num = dest_qpn;
	a->rq_psn = 0;
	a->max_dest_rd_atomic = 1;
	a->min_rnr_timer = min_rnr_timer;
	a->ah_attr.is_global = 1;
	a->ah_attr.port_num = 1;
	a->ah_attr.grh.hop_limit = 1;
	a->ah_attr.grh.sgid_index = 3;      /* RoCE v2, IPv4 (mlx5's layout) */
	a->ah_attr.grh.dgid.raw[10] = 0xff; /* ::ffff:127.0.0.1 */
	a->ah_attr.grh.dgid.raw[11] = 0xff;
	a->ah_attr.grh.dgid.raw[12] = 127;
	a->ah_attr.grh.dgid.raw[15] = 1;
}

#define T_RTR_MASK                                                     \
	(IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |    \
	 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define T_RTS_MASK                                                     \
	(IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |                \
	 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)

static inline void t_rts_attr(struct ibv_qp_attr *a, uint8_t timeout,
			      uint8_t retry_cnt, uint8_t rnr_retry)
{
	memset(a, 0, sizeof *a);
	a->qp_state = IBV_QPS_RTS;
	a->timeout = timeout;
	a->retry_cnt = retry_cnt;
	a->rnr_retry = rnr_retry;
	a->sq_psn = 0;
	a->max_rd_atomic = 1;
}

struct t_conn {
	unsigned access;
	uint8_t min_rnr_timer, timeout, retry_cnt, rnr_retry;
};

/* Defaults for tests: remote write+read, short timers, few retries. */
static const struct t_conn t_conn_default = {
	.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	.min_rnr_timer = 1, /* 10 us */
	.timeout = 8,       /* ~1 ms */
	.retry_cnt = 3,
	.rnr_retry = 3,
};

static inline int t_connect(struct ibv_qp *qp, uint32_t dest_qpn,
			    const struct t_conn *c)
{
	struct ibv_qp_attr a;
	if (t_to_init(qp, c->access))
		return -1;
	t_rtr_attr(&a, dest_qpn, c->min_rnr_timer);
	if (ibv_modify_qp(qp, &a, T_RTR_MASK))
		return -2;
	t_rts_attr(&a, c->timeout, c->retry_cnt, c->rnr_retry);
	if (ibv_modify_qp(qp, &a, T_RTS_MASK))
		return -3;
	return 0;
}

/* Polls until n completions arrived or the deadline passed; returns count. */
static inline int t_poll(struct ibv_cq *cq, struct ibv_wc *wc, int n, int ms)
{
	uint64_t end = t_now_ms() + (uint64_t)ms;
	int got = 0;
	for (unsigned spin = 0; got < n; spin++) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r < 0)
			return got ? got : r;
		got += r;
		if (got >= n)
			break;
		if (t_now_ms() > end)
			break;
		if (spin > 1000)
			t_nap();
	}
	return got;
}

/* Polls until at least one completion or deadline; 0 when none came. */
static inline int t_poll1(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	return t_poll(cq, wc, 1, ms);
}

static inline int t_post_write(struct ibv_qp *qp, enum ibv_wr_opcode op,
			       void *buf, uint32_t len, uint32_t lkey,
			       uint64_t raddr, uint32_t rkey, uint32_t imm,
			       unsigned flags, uint64_t wr_id)
{
	struct ibv_sge sge = {(uintptr_t)buf, len, lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge,
				 .num_sge = len ? 1 : 0, .opcode = op,
				 .send_flags = flags, .imm_data = imm};
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	struct ibv_send_wr *bad = NULL;
	return ibv_post_send(qp, &wr, &bad);
}

static inline int t_post_recv(struct ibv_qp *qp, void *buf, uint32_t len,
			      uint32_t lkey, uint64_t wr_id)
{
	struct ibv_sge sge = {(uintptr_t)buf, len, lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge,
				 .num_sge = buf ? 1 : 0};
	struct ibv_recv_wr *bad = NULL;
	return ibv_post_recv(qp, &wr, &bad);
}

/* ---- a second process ---- */

/* What two endpoints tell each other to connect. */
struct t_info {
	uint32_t qpn;
	uint32_t rkey;
	uint64_t addr;
	uint64_t len;
	uint64_t arg;
};

struct t_child {
	pid_t pid;
	int fd;
};

#define CHILD_CHECK(c)                                                 \
	do {                                                           \
		if (!(c)) {                                            \
			fprintf(stderr, "child %s:%d: check failed: %s\n", \
				__FILE__, __LINE__, #c);               \
			_exit(1);                                      \
		}                                                      \
	} while (0)

/* Runs fn(fd, arg) in a child process; fd is a socket to the parent. */
static inline struct t_child t_fork(int (*fn)(int fd, void *arg), void *arg)
{
	int sv[2];
	struct t_child c = {-1, -1};
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return c;
	fflush(NULL);
	c.pid = fork();
	if (c.pid == 0) {
		close(sv[0]);
		alarm(30); /* a child never outlives a stuck test */
		_exit(fn(sv[1], arg));
	}
	close(sv[1]);
	c.fd = sv[0];
	return c;
}

static inline int t_send(int fd, const void *m, size_t len)
{
	return write(fd, m, len) == (ssize_t)len ? 0 : -1;
}

static inline int t_recv(int fd, void *m, size_t len, int ms)
{
	struct pollfd p = {fd, POLLIN, 0};
	size_t got = 0;
	uint64_t end = t_now_ms() + (uint64_t)ms;
	while (got < len) {
		int left = (int)(end - t_now_ms());
		if (left <= 0 || poll(&p, 1, left) <= 0)
			return -1;
		ssize_t n = read(fd, (char *)m + got, len - got);
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return 0;
}

/* Waits for the child's exit status with a deadline; kills it after. */
static inline int t_wait(struct t_child *c, int ms)
{
	uint64_t end = t_now_ms() + (uint64_t)ms;
	int st;
	for (;;) {
		pid_t r = waitpid(c->pid, &st, WNOHANG);
		if (r == c->pid)
			break;
		if (t_now_ms() > end) {
			kill(c->pid, SIGKILL);
			waitpid(c->pid, &st, 0);
			close(c->fd);
			return -1;
		}
		t_nap();
	}
	close(c->fd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- running this binary again with a different environment ---- */

/* softrdma reads most SOFTRDMA_* variables when it is loaded, so a case
 * that needs them runs in a fresh image of this binary: argv[1] = "--child",
 * argv[2] = mode, with the NULL-terminated "NAME=value" list added to the
 * environment.  Returns the child's exit status (a deadline kills it). */
static inline int t_reexec(const char *mode, const char *const env[], int ms)
{
	fflush(NULL);
	pid_t p = fork();
	if (p == 0) {
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		alarm(60);
		execl("/proc/self/exe", "softrdma-test", "--child", mode, (char *)NULL);
		_exit(127);
	}
	struct t_child c = {p, dup(0)};
	return t_wait(&c, ms);
}

/* Drops a capability from this process (effective and permitted), as a
 * non-root user lacks it.  0 on success. */
static inline int t_drop_cap(int cap)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return -1;
	d[cap / 32].effective &= ~(1u << (cap % 32));
	d[cap / 32].permitted &= ~(1u << (cap % 32));
	return (int)syscall(SYS_capset, &h, d);
}

/* Runs softrdma-ctl (beside the library: ../softrdma from the tests) on
 * this binary's fabric; its exit status. */
static inline int t_ctl(const char *args)
{
	char exe[512], cmd[1200];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return -1;
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (!slash)
		return -1;
	*slash = 0;
	snprintf(cmd, sizeof cmd, "%s/../softrdma/softrdma-ctl %s", exe, args);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
