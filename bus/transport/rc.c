/*
 * transport/rc.c - the rc transport (the design is in transport/rc.h).
 *
 * Publisher: the ops below write each committed frame to every subscriber in
 * the table with ibv_post_send; the control thread listens on cfg.control,
 * runs the HELLO / SUBSCRIBE / ACCEPT exchange, brings a queue pair up per
 * subscriber, heartbeats, and removes subscribers that leave, time out or
 * whose queue pair failed.  Table changes are published with
 * rcu_assign_pointer and freed after synchronize_rcu(), on the control
 * thread; the publishing thread is an RCU reader that is online only inside
 * send and room, so it never holds a grace period up while idle.
 *
 * Subscriber: the control thread connects (and reconnects), creates the
 * queue pair, posts the first receives and hands a ready session to the
 * polling thread through an atomic generation number.  From then on only the
 * polling thread touches that queue pair, until it releases it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bus/transport/rc.h"

#include "bus/clock.h"
#include "bus/counters.h"
#include "bus/error.h"
#include "bus/frame.h"
#include "bus/mem.h"
#include "bus/transport/control.h"
#include "bus/transport/transport.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include <urcu-qsbr.h>

#define CTL_TICK_MS 20
#define CONNECT_TIMEOUT_MS 500
#define REPLY_TIMEOUT_MS 3000
#define DRAIN_TIMEOUT_NS 1000000000ull
#define CQ_BATCH 32
#define SUB_SQ_DEPTH 64u
#define SUB_SIGNAL_EVERY 16u

/* ------------------------------------------------------------- the device */

typedef struct rc_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint8_t port;
	int gid_index;
	union ibv_gid gid;
	enum ibv_mtu mtu;
	int global;                /* Ethernet (RoCE): a GRH on every packet */
	uint32_t max_inline;
} rc_dev_t;

static int gid_is_ipv4_mapped(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	return memcmp(g->raw, prefix, sizeof(prefix)) == 0;
}

/* The GID to use: cfg's index, else the first RoCE v2 IPv4 entry, else 0. */
static int pick_gid(rc_dev_t *d, const struct ibv_port_attr *pa,
		    const tb_stream_cfg_t *cfg)
{
	if (cfg->gid_index >= 0) {
		if (cfg->gid_index >= pa->gid_tbl_len)
			return tb_error_set(TB_ECONFIG, "gid_index %d: port %u has %d "
					  "GIDs", cfg->gid_index, d->port,
					  pa->gid_tbl_len);
		d->gid_index = cfg->gid_index;
	} else {
		d->gid_index = 0;
		for (int i = 0; i < pa->gid_tbl_len; i++) {
			struct ibv_gid_entry e;

			if (ibv_query_gid_ex(d->ctx, d->port, (uint32_t)i, &e, 0) != 0)
				continue;
			if (e.gid_type == IBV_GID_TYPE_ROCE_V2 &&
			    gid_is_ipv4_mapped((const union ibv_gid *)&e.gid)) {
				d->gid_index = i;
				break;
			}
		}
	}
	if (ibv_query_gid(d->ctx, d->port, d->gid_index, &d->gid) != 0)
		return tb_error_sys(errno, "ibv_query_gid(port %u, index %d)",
				  d->port, d->gid_index);
	return 0;
}

/* Opens the configured device and port, or the first with an active port. */
static int dev_open(rc_dev_t *d, const tb_stream_cfg_t *cfg)
{
	struct ibv_device **list;
	int n, rc = TB_ENOENT;

	memset(d, 0, sizeof(*d));
	list = ibv_get_device_list(&n);
	if (!list)
		return tb_error_set(TB_ENOTSUP, "no RDMA devices (ibv_get_device_list: "
				  "%s); without an RDMA NIC, run with softrdma: "
				  "LD_LIBRARY_PATH=build/softrdma", strerror(errno));
	tb_error_set(TB_ENOENT, "no RDMA device%s%s with an active port",
		   cfg->rdma_device[0] ? " named " : "", cfg->rdma_device);
	for (int i = 0; i < n && !d->ctx; i++) {
		struct ibv_device_attr da;

		if (cfg->rdma_device[0] &&
		    strcmp(ibv_get_device_name(list[i]), cfg->rdma_device) != 0)
			continue;
		d->ctx = ibv_open_device(list[i]);
		if (!d->ctx)
			continue;
		if (ibv_query_device(d->ctx, &da) == 0) {
			for (int p = 1; p <= da.phys_port_cnt; p++) {
				struct ibv_port_attr pa;

				if (cfg->rdma_port && p != cfg->rdma_port)
					continue;
				if (ibv_query_port(d->ctx, (uint8_t)p, &pa) != 0 ||
				    pa.state != IBV_PORT_ACTIVE)
					continue;
				d->port = (uint8_t)p;
				d->mtu = pa.active_mtu;
				d->global = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
				rc = pick_gid(d, &pa, cfg);
				break;
			}
		}
		if (!d->port || rc < 0) {
			ibv_close_device(d->ctx);
			d->ctx = NULL;
			d->port = 0;
		}
	}
	ibv_free_device_list(list);
	if (!d->ctx)
		return rc < 0 ? rc : TB_ENOENT;
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd) {
		rc = tb_error_sys(errno, "ibv_alloc_pd");
		ibv_close_device(d->ctx);
		d->ctx = NULL;
		return rc;
	}
	tb_error_clear();
	return 0;
}

static void dev_close(rc_dev_t *d)
{
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	memset(d, 0, sizeof(*d));
}

/* A new RC queue pair in INIT, on `cq` for both queues. */
static struct ibv_qp *qp_create(rc_dev_t *d, struct ibv_cq *cq, uint32_t sq,
				uint32_t rq, uint32_t inline_want)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = sq, .max_recv_wr = rq, .max_send_sge = 1,
			.max_recv_sge = 1, .max_inline_data = inline_want},
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = d->port,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
	};
	struct ibv_qp *qp = ibv_create_qp(d->pd, &ia);

	if (!qp) {
		tb_error_sys(errno, "ibv_create_qp (send %u, receive %u)", sq, rq);
		return NULL;
	}
	d->max_inline = ia.cap.max_inline_data;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS) != 0) {
		tb_error_sys(errno, "ibv_modify_qp to INIT");
		ibv_destroy_qp(qp);
		return NULL;
	}
	return qp;
}

/* INIT -> RTR -> RTS towards the peer (qpn, gid, psn), both PSNs 24-bit. */
static int qp_connect(rc_dev_t *d, struct ibv_qp *qp, uint32_t peer_qpn,
		      const uint8_t *peer_gid, uint32_t peer_psn,
		      uint32_t my_psn, enum ibv_mtu mtu)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = mtu, .dest_qp_num = peer_qpn,
		.rq_psn = peer_psn, .max_dest_rd_atomic = 1, .min_rnr_timer = 1,
		.ah_attr = {.port_num = d->port, .is_global = (uint8_t)d->global},
	};

	if (d->global) {
		memcpy(a.ah_attr.grh.dgid.raw, peer_gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
		a.ah_attr.grh.hop_limit = 64;
	}
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
		return tb_error_sys(errno, "ibv_modify_qp to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;      /* 4.096 us * 2^14 = 67 ms per try */
	a.retry_cnt = 7;     /* a dead peer fails the QP in about half a second */
	a.rnr_retry = 7;     /* never: credits keep receives ahead of writes */
	a.sq_psn = my_psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			  IBV_QP_MAX_QP_RD_ATOMIC) != 0)
		return tb_error_sys(errno, "ibv_modify_qp to RTS");
	return 0;
}

static uint32_t random_psn(void)
{
	uint32_t v = 0;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint32_t)tb_clock_now_ns();
	return v & TB_CONTROL_PSN_MASK;
}

static enum ibv_mtu mtu_min(enum ibv_mtu a, uint8_t b)
{
	return (unsigned)a < b ? a : (enum ibv_mtu)b;
}

/* ------------------------------------------------------------ TCP helpers */

static int tcp_nodelay(int fd)
{
	int one = 1;

	return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int resolve(const tb_endpoint_t *ep, struct sockaddr_storage *ss,
		   socklen_t *len, int passive)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = passive ? AI_PASSIVE : 0};
	struct addrinfo *res;
	char port[8];
	int rc;

	snprintf(port, sizeof(port), "%u", ep->port);
	rc = getaddrinfo(ep->host[0] ? ep->host : NULL, port, &hints, &res);
	if (rc != 0)
		return tb_error_set(TB_ECONFIG, "control %s:%u: %s", ep->host,
				  ep->port, gai_strerror(rc));
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

/* Writes all of buf (a control message is a few hundred bytes). */
static int send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd pf = {.fd = fd, .events = POLLOUT};

			if (poll(&pf, 1, 1000) <= 0)
				return tb_error_set(TB_ETIMEDOUT, "control: peer not reading");
			continue;
		}
		if (n <= 0)
			return tb_error_sys(errno, "control: send");
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A buffered control-protocol reader over a non-blocking socket. */
typedef struct ctl_in {
	uint8_t buf[TB_CONTROL_MSG_MAX * 2];
	size_t have;
} ctl_in_t;

/*
 * Reads what the socket has and decodes one message if a whole one is
 * there: 1 = *m filled, 0 = need more, TB_CLOSED = peer closed, other < 0 =
 * broken peer (message set).
 */
static int ctl_read(int fd, ctl_in_t *in, tb_control_msg_t *m)
{
	for (;;) {
		int need = in->have ? tb_control_frame_need(in->buf, in->have)
				    : (int)TB_WIRE_HDR_LEN;
		ssize_t n;

		if (need < 0)
			return need;
		if (in->have && need == 0) {
			int used = tb_control_decode(in->buf, in->have, m);

			if (used < 0)
				return used;
			memmove(in->buf, in->buf + used, in->have - (size_t)used);
			in->have -= (size_t)used;
			return 1;
		}
		n = recv(fd, in->buf + in->have, sizeof(in->buf) - in->have, 0);
		if (n == 0)
			return TB_CLOSED;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return tb_error_sys(errno, "control: recv");
		}
		in->have += (size_t)n;
	}
}

/* ============================================================= publisher */

extern const tb_tx_ops_t tb_rc_bp_tx_ops;

typedef struct rc_sub {
	/* Hot: read by the publishing thread for every frame.  The work
	 * requests are templates filled once at subscribe, so a frame costs
	 * a handful of stores, not a zeroed 128-byte struct. */
	struct ibv_send_wr wr;     /* the frame's WRITE_WITH_IMM */
	struct ibv_sge sge;
	struct ibv_send_wr pad_wr; /* the padding WRITE before a wrap */
	struct ibv_sge pad_sge;
	tb_frame_hdr_t pad_hdr;
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	uint64_t raddr;
	uint64_t rmask;            /* its ring's size - 1 */
	uint32_t rkey;
	uint32_t recv_depth;
	uint64_t wpos;             /* where its next frame goes (free-running) */
	uint64_t wframes;          /* WRITE_WITH_IMMs sent */
	const _Atomic uint64_t *credit; /* its slot, written by it over RDMA */
	uint64_t posted;           /* work requests posted */
	uint64_t completed;        /* known complete (last signalled wr_id) */
	uint64_t last_signal;      /* `posted` at the last signalled request */
	uint64_t pin;              /* our ring position its oldest may read */
	struct {
		uint64_t wr_id;    /* a signalled request ... */
		uint64_t pos_end;  /* ... and where its frame ends in our ring */
	} sig[32];
	uint32_t sig_head, sig_tail;
	uint32_t max_inline;
	uint64_t laps;             /* frames it was skipped for */
	int skipping;
	_Atomic int dead;          /* its queue pair failed; control removes it */
	const char *why_dead;      /* set before dead, read after it */
	/* Cold: control thread. */
	struct ibv_mr *credit_mr;
	int slot;
	char client[TB_CONTROL_CLIENT_ID_LEN];
} rc_sub_t;

typedef struct rc_table {
	int n;
	rc_sub_t *sub[TB_RC_MAX_SUBS];
} rc_table_t;

enum { CLIENT_HELLO, CLIENT_SUBSCRIBE, CLIENT_LIVE };

typedef struct rc_client {
	int fd;
	int state;
	ctl_in_t in;
	uint64_t last_rx_ns;
	uint64_t opened_ns;
	rc_sub_t *sub;
	char id[TB_CONTROL_CLIENT_ID_LEN];
} rc_client_t;

#define MAX_CLIENTS (TB_RC_MAX_SUBS + 16)

typedef struct rc_tx {
	tb_tx_t base;
	/* Hot. */
	rc_table_t *table;         /* RCU-protected */
	uint32_t lkey;
	int backpressure;
	uint64_t size;
	/* Cold. */
	rc_dev_t dev;
	tb_mem_t ring_mem;
	tb_mem_t slot_mem;
	struct ibv_mr *ring_mr;
	uint64_t slot_used;        /* bitmap of credit slots */
	tb_stream_cfg_t cfg;
	uint64_t epoch;
	uint32_t psn;
	int listen_fd;
	int wake_fd;
	pthread_t ctl;
	int ctl_started;
	_Atomic int stop;
	_Atomic uint64_t last_seq;
	_Atomic uint64_t final_seq;
	rc_client_t clients[MAX_CLIENTS];
	int n_clients;
	uint64_t rejected;
} rc_tx_t;

/* The publishing thread registers with RCU once, and unregisters when it
 * exits (a QSBR registry must not hold a dead thread). */
static pthread_key_t rcu_key;
static pthread_once_t rcu_key_once = PTHREAD_ONCE_INIT;
static __thread int rcu_registered __attribute__((tls_model("initial-exec")));

static void rcu_thread_gone(void *arg)
{
	(void)arg;
	rcu_unregister_thread();
}

static void rcu_key_init(void)
{
	pthread_key_create(&rcu_key, rcu_thread_gone);
}

static void rcu_register_once(void)
{
	pthread_once(&rcu_key_once, rcu_key_init);
	rcu_register_thread();
	rcu_thread_offline();
	pthread_setspecific(rcu_key, (void *)1);
	rcu_registered = 1;
}

static inline rc_table_t *reader_enter(rc_tx_t *t)
{
	if (tb_unlikely(!rcu_registered))
		rcu_register_once();
	rcu_thread_online();
	return rcu_dereference(t->table);
}

static inline void reader_leave(void)
{
	rcu_thread_offline();
}

/* Reaps a subscriber's send completions; marks it dead on an error. */
static int sub_reap(rc_sub_t *s)
{
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(s->cq, 16, wc);

	for (int i = 0; i < n; i++) {
		if (tb_unlikely(wc[i].status != IBV_WC_SUCCESS)) {
			s->why_dead = ibv_wc_status_str(wc[i].status);
			atomic_store_explicit(&s->dead, 1, memory_order_release);
			return -1;
		}
		s->completed = wc[i].wr_id;
		while (s->sig_tail != s->sig_head &&
		       s->sig[s->sig_tail & 31].wr_id <= s->completed)
			s->pin = s->sig[s->sig_tail++ & 31].pos_end;
	}
	if (tb_unlikely(n < 0)) {
		s->why_dead = "polling its completion queue failed";
		atomic_store_explicit(&s->dead, 1, memory_order_release);
		return -1;
	}
	return 0;
}

/*
 * `s` is about to be skipped with unsignalled writes outstanding: nothing
 * would ever report them complete, and its pin would hold until our ring
 * laps it (and `s` is failed for it).  One signalled zero-length WRITE,
 * which consumes no receive, reports them all.  `pos`: where the writes
 * before it end in our ring.  Cold.
 */
static void sub_fence(rc_sub_t *s, uint64_t pos)
{
	struct ibv_send_wr w = {.wr_id = s->posted + 1, .opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED,
				.wr.rdma = {.remote_addr = s->raddr, .rkey = s->rkey}};
	struct ibv_send_wr *bad;

	if (s->posted - s->completed + 1 > TB_RC_SQ_DEPTH ||
	    s->sig_head - s->sig_tail >= 32)
		return; /* signalled requests are outstanding: they will do */
	if (ibv_post_send(s->qp, &w, &bad) != 0) {
		s->why_dead = "ibv_post_send failed";
		atomic_store_explicit(&s->dead, 1, memory_order_release);
		return;
	}
	s->posted++;
	s->last_signal = s->posted;
	s->sig[s->sig_head & 31].wr_id = s->posted;
	s->sig[s->sig_head++ & 31].pos_end = pos;
}

/* Frames and bytes `s` has not yet given back credit for. */
static inline int sub_has_room(const rc_sub_t *s, uint64_t need)
{
	uint64_t c = tb_atomic_load_relaxed(s->credit);
	uint64_t used = (s->wpos - c) & TB_RC_CREDIT_POS_MASK;
	uint32_t frames = (uint32_t)(s->wframes - (c >> TB_RC_CREDIT_POS_BITS)) &
			  TB_RC_CREDIT_RECV_MASK;

	return used + need <= s->rmask + 1 && frames < s->recv_depth;
}

/*
 * Writes the frame at our ring position `pos` into `s`'s ring: a padding
 * WRITE first when it would straddle the end, then the WRITE_WITH_IMM.
 * Returns 0, or 1 when `s` had no room (it is skipped and will see a gap).
 * Hot path.
 */
static inline int sub_write(rc_tx_t *t, rc_sub_t *s, const tb_frame_hdr_t *f,
			    uint64_t pos, uint64_t pub_tail)
{
	uint32_t space = tb_frame_space(f->length);
	uint64_t off = s->wpos & s->rmask;
	uint64_t pad = off + space > s->rmask + 1 ? s->rmask + 1 - off : 0;
	struct ibv_send_wr *w = &s->wr, *bad;
	unsigned nwr = 1;

	if (tb_unlikely(s->posted - s->completed + 2 > TB_RC_SQ_DEPTH ||
			(s->posted != s->completed && pub_tail - s->pin > t->size / 2))) {
		sub_reap(s);
		if (s->posted - s->completed + 2 > TB_RC_SQ_DEPTH)
			goto skip;
		if (s->posted != s->completed && pub_tail - s->pin > t->size / 2) {
			/* It holds requests that read frames we are about
			 * to overwrite: fail it rather than send it garbage. */
			struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};

			ibv_modify_qp(s->qp, &a, IBV_QP_STATE);
			s->why_dead = "its writes did not complete before the "
				      "frames they read were overwritten";
			atomic_store_explicit(&s->dead, 1, memory_order_release);
			return 1;
		}
	}
	if (tb_unlikely(!sub_has_room(s, pad + space)))
		goto skip;
	(void)t;
	if (tb_unlikely(pad)) {
		/* Inline: copied at post time, so one header serves all. */
		tb_frame_init_pad(&s->pad_hdr, (uint32_t)pad, f->stream_id, f->seq);
		s->pad_wr.wr.rdma.remote_addr = s->raddr + off;
		w = &s->pad_wr;
		nwr = 2;
		off = 0;
	}
	s->sge.addr = (uintptr_t)f;
	s->sge.length = f->length;
	s->wr.imm_data = htobe32(tb_rc_imm(off, f->seq));
	s->wr.wr.rdma.remote_addr = s->raddr + off;
	s->wr.send_flags = f->length <= s->max_inline ? IBV_SEND_INLINE : 0;
	if (s->posted + nwr - s->last_signal >= TB_RC_SIGNAL_EVERY) {
		s->wr.send_flags |= IBV_SEND_SIGNALED;
		s->wr.wr_id = s->posted + nwr;
		s->last_signal = s->posted + nwr;
		s->sig[s->sig_head & 31].wr_id = s->wr.wr_id;
		s->sig[s->sig_head++ & 31].pos_end = pos + space;
	}
	if (s->posted == s->completed)
		s->pin = pos;
	if (tb_unlikely(ibv_post_send(s->qp, w, &bad) != 0)) {
		s->why_dead = "ibv_post_send failed";
		atomic_store_explicit(&s->dead, 1, memory_order_release);
		return 1;
	}
	/* Reap with every signalled request: completions come back at the
	 * pace they are asked for, and an error shows within 64 frames. */
	if (s->wr.send_flags & IBV_SEND_SIGNALED)
		sub_reap(s);
	s->posted += nwr;
	s->wpos += pad + space;
	s->wframes++;
	s->skipping = 0;
	return 0;
skip:
	if (!s->skipping && s->posted != s->last_signal)
		sub_fence(s, pos);
	s->laps++;
	s->skipping = 1;
	return 1;
}

static int rc_tx_send(tb_tx_t *tx, uint64_t from, uint64_t to)
{
	rc_tx_t *t = (rc_tx_t *)tx;
	rc_table_t *tab = reader_enter(t);

	/* Hot path: one post per subscriber per frame. */
	for (uint64_t pos = from; pos != to;) {
		const tb_frame_hdr_t *f = tb_ring_at(&t->base.ring, pos);

		if (f->type == TB_FRAME_DATA) {
			for (int i = 0; i < tab->n; i++) {
				rc_sub_t *s = tab->sub[i];

				if (tb_likely(!atomic_load_explicit(&s->dead,
								    memory_order_relaxed)))
					sub_write(t, s, f, pos, to);
			}
		}
		pos += tb_frame_space(f->length);
	}
	reader_leave();
	return 0;
}

/* Back-pressure: every live subscriber must have room for the frame (with
 * a padding frame's worth to spare, since its ring wraps on its own). */
static int rc_tx_room(tb_tx_t *tx, uint64_t new_tail)
{
	rc_tx_t *t = (rc_tx_t *)tx;
	uint64_t span = new_tail - t->base.ring.tail;
	rc_table_t *tab = reader_enter(t);
	int rc = 0;

	for (int i = 0; i < tab->n && rc == 0; i++) {
		rc_sub_t *s = tab->sub[i];

		if (!atomic_load_explicit(&s->dead, memory_order_relaxed) &&
		    !sub_has_room(s, 2 * span))
			rc = TB_BACK_PRESSURED;
	}
	reader_leave();
	return rc;
}

static void rc_tx_beat(tb_tx_t *tx, uint64_t now_ns, uint64_t last_seq)
{
	rc_tx_t *t = (rc_tx_t *)tx;

	(void)now_ns;
	atomic_store_explicit(&t->last_seq, last_seq, memory_order_relaxed);
}

/* ------------------------------------------- publisher: the control thread */

static void sub_free(rc_tx_t *t, rc_sub_t *s)
{
	if (s->qp)
		ibv_destroy_qp(s->qp);
	if (s->cq)
		ibv_destroy_cq(s->cq);
	if (s->credit_mr)
		ibv_dereg_mr(s->credit_mr);
	if (s->slot >= 0)
		t->slot_used &= ~(1ull << s->slot);
	free(s);
}

/* Publishes a copy of the table with `add` added or `del` removed. */
static int table_change(rc_tx_t *t, rc_sub_t *add, rc_sub_t *del)
{
	rc_table_t *old = t->table, *nt = calloc(1, sizeof(*nt));

	if (!nt)
		return tb_error_set(TB_ENOMEM, "out of memory");
	for (int i = 0; i < old->n; i++)
		if (old->sub[i] != del)
			nt->sub[nt->n++] = old->sub[i];
	if (add)
		nt->sub[nt->n++] = add;
	rcu_assign_pointer(t->table, nt);
	synchronize_rcu();     /* the publishing thread is done with `old` */
	free(old);
	return 0;
}

static int send_msg(int fd, int (*enc)(void *, size_t, const void *),
		    const void *m)
{
	uint8_t buf[TB_CONTROL_MSG_MAX];
	int n = enc(buf, sizeof(buf), m);

	return n < 0 ? n : send_all(fd, buf, (size_t)n);
}

#define SEND(fd, kind, m) \
	send_msg(fd, (int (*)(void *, size_t, const void *))tb_control_encode_##kind, m)

static void reject(rc_tx_t *t, rc_client_t *c, uint32_t reason,
		   const char *text)
{
	tb_control_reject_t r = {.stream_id = t->cfg.id, .reason = reason};

	snprintf(r.text, sizeof(r.text), "%s", text);
	SEND(c->fd, reject, &r);
	t->rejected++;
	tb_warn("stream '%s': rejected subscriber '%s': %s", t->cfg.name,
		c->id[0] ? c->id : "?", text);
}

/* Drops client `i`: BYE `bye_reason` first (0 = none: it is gone), and
 * says `why` when it was a subscriber. */
static void client_drop(rc_tx_t *t, int i, uint32_t bye_reason, const char *why)
{
	rc_client_t *c = &t->clients[i];

	if (bye_reason) {
		tb_control_bye_t b = {.reason = bye_reason};

		SEND(c->fd, bye, &b);
	}
	if (c->sub) {
		tb_info("stream '%s': subscriber '%s' left: %s; it was lapped "
			"for %llu frames", t->cfg.name, c->id, why,
			(unsigned long long)c->sub->laps);
		table_change(t, NULL, c->sub);
		sub_free(t, c->sub);
	}
	close(c->fd);
	t->clients[i] = t->clients[--t->n_clients];
}

/* SUBSCRIBE: a queue pair and a credit slot for the subscriber, then
 * ACCEPT.  Returns 0, or < 0 after rejecting it. */
static int client_subscribe(rc_tx_t *t, rc_client_t *c,
			    const tb_control_subscribe_t *m)
{
	tb_control_accept_t a = {.stream_id = t->cfg.id, .epoch = t->epoch,
			     .psn = t->psn};
	_Atomic uint64_t *slot;
	rc_sub_t *s;
	char why[160];

	if (m->stream_id != t->cfg.id) {
		reject(t, c, TB_CONTROL_REJ_UNKNOWN_STREAM, "SUBSCRIBE names another stream");
		return -1;
	}
	if (m->transport != TB_TRANSPORT_RC) {
		reject(t, c, TB_CONTROL_REJ_UNSUPPORTED_TRANSPORT, "this stream is rc");
		return -1;
	}
	if (m->ring_len < 2ull * t->base.ring.max_frame) {
		snprintf(why, sizeof(why), "ring of %llu bytes is under twice the "
			 "largest frame (%u)", (unsigned long long)m->ring_len,
			 t->base.ring.max_frame);
		reject(t, c, TB_CONTROL_REJ_MALFORMED, why);
		return -1;
	}
	if (t->table->n >= TB_RC_MAX_SUBS || t->slot_used == ~0ull) {
		reject(t, c, TB_CONTROL_REJ_FULL, "no room for another subscriber");
		return -1;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		goto internal;
	s->slot = __builtin_ctzll(~t->slot_used);
	t->slot_used |= 1ull << s->slot;
	slot = (_Atomic uint64_t *)((uint8_t *)t->slot_mem.addr +
				    (size_t)s->slot * TB_RC_SLOT_SIZE);
	tb_atomic_store_relaxed(slot, 0);
	s->credit = slot;
	s->credit_mr = ibv_reg_mr(t->dev.pd, (void *)slot, TB_RC_SLOT_SIZE,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	s->cq = ibv_create_cq(t->dev.ctx, (int)TB_RC_SQ_DEPTH + 16, NULL, NULL, 0);
	if (!s->credit_mr || !s->cq)
		goto internal;
	s->qp = qp_create(&t->dev, s->cq, TB_RC_SQ_DEPTH, 1, TB_RC_INLINE);
	if (!s->qp || qp_connect(&t->dev, s->qp, m->qpn, m->gid, m->psn, t->psn,
				 mtu_min(t->dev.mtu, m->mtu)) < 0)
		goto internal;
	s->max_inline = t->dev.max_inline < TB_RC_INLINE ? t->dev.max_inline
							  : TB_RC_INLINE;
	s->raddr = m->ring_addr;
	s->rkey = m->rkey;
	s->sge.lkey = t->lkey;
	s->wr = (struct ibv_send_wr){.sg_list = &s->sge, .num_sge = 1,
				     .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				     .wr.rdma.rkey = m->rkey};
	s->pad_sge = (struct ibv_sge){.addr = (uintptr_t)&s->pad_hdr,
				      .length = TB_FRAME_HDR_LEN};
	s->pad_wr = (struct ibv_send_wr){.next = &s->wr, .sg_list = &s->pad_sge,
					 .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_INLINE,
					 .wr.rdma.rkey = m->rkey};
	s->rmask = m->ring_len - 1;
	s->recv_depth = m->recv_depth;
	memcpy(s->client, c->id, sizeof(s->client));
	a.qpn = s->qp->qp_num;
	memcpy(a.gid, t->dev.gid.raw, 16);
	a.credit_rkey = s->credit_mr->rkey;
	a.credit_addr = (uintptr_t)slot;
	a.next_seq = atomic_load(&t->last_seq) + 1;
	a.ring_offset = 0;
	if (table_change(t, s, NULL) < 0)
		goto internal;
	c->sub = s;
	if (SEND(c->fd, accept, &a) < 0)
		return -1;   /* the caller drops it, and with it the sub */
	tb_info("stream '%s': subscriber '%s' joined (qp %u, ring %llu bytes)",
		t->cfg.name, c->id, s->qp->qp_num,
		(unsigned long long)m->ring_len);
	return 0;
internal:
	snprintf(why, sizeof(why), "publisher could not set up RDMA: %s",
		 tb_errmsg());
	if (s)
		sub_free(t, s);
	reject(t, c, TB_CONTROL_REJ_INTERNAL, why);
	return -1;
}

/* One message from client i; returns < 0 when the client must go. */
static int client_message(rc_tx_t *t, rc_client_t *c, const tb_control_msg_t *m)
{
	switch (c->state) {
	case CLIENT_HELLO:
		if (m->type != TB_CONTROL_HELLO)
			break;
		memcpy(c->id, m->hello.client_id, sizeof(c->id));
		if (m->hello.stream_id != t->cfg.id) {
			reject(t, c, TB_CONTROL_REJ_UNKNOWN_STREAM, "no such stream here");
			return -1;
		}
		if (t->cfg.token[0] && !tb_control_token_equal(m->hello.token, t->cfg.token)) {
			reject(t, c, TB_CONTROL_REJ_BAD_TOKEN, "token does not match");
			return -1;
		}
		c->state = CLIENT_SUBSCRIBE;
		return 0;
	case CLIENT_SUBSCRIBE:
		if (m->type != TB_CONTROL_SUBSCRIBE)
			break;
		if (client_subscribe(t, c, &m->subscribe) < 0)
			return -1;
		c->state = CLIENT_LIVE;
		return 0;
	case CLIENT_LIVE:
		if (m->type == TB_CONTROL_HEARTBEAT)
			return 0;
		if (m->type == TB_CONTROL_BYE)
			return -1;
		break;
	}
	reject(t, c, TB_CONTROL_REJ_MALFORMED, "unexpected message");
	return -1;
}

static void accept_clients(rc_tx_t *t)
{
	for (;;) {
		int fd = accept4(t->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		rc_client_t *c;

		if (fd < 0)
			return;
		if (t->n_clients == MAX_CLIENTS) {
			close(fd);
			continue;
		}
		tcp_nodelay(fd);
		c = &t->clients[t->n_clients++];
		memset(c, 0, sizeof(*c));
		c->fd = fd;
		c->state = CLIENT_HELLO;
		c->opened_ns = c->last_rx_ns = tb_clock_now_ns();
	}
}

static void heartbeat_all(rc_tx_t *t, uint64_t now, uint64_t last_seq)
{
	tb_control_heartbeat_t hb = {.timestamp_ns = now, .last_seq = last_seq};

	for (int i = 0; i < t->n_clients; i++)
		if (t->clients[i].state == CLIENT_LIVE)
			SEND(t->clients[i].fd, heartbeat, &hb);
}

static void *ctl_main(void *arg)
{
	rc_tx_t *t = arg;
	uint64_t beat_ns = (uint64_t)t->cfg.heartbeat_ms * 1000000ull;
	uint64_t dead_ns = (uint64_t)t->cfg.liveness_timeout_ms * 1000000ull;
	uint64_t next_beat = 0;
	struct pollfd pf[MAX_CLIENTS + 2];

	while (!atomic_load(&t->stop)) {
		uint64_t now;
		int n = 0;

		pf[n++] = (struct pollfd){.fd = t->listen_fd, .events = POLLIN};
		pf[n++] = (struct pollfd){.fd = t->wake_fd, .events = POLLIN};
		for (int i = 0; i < t->n_clients; i++)
			pf[n++] = (struct pollfd){.fd = t->clients[i].fd, .events = POLLIN};
		poll(pf, (nfds_t)n, CTL_TICK_MS);
		if (pf[0].revents)
			accept_clients(t);
		now = tb_clock_now_ns();
		for (int i = t->n_clients - 1; i >= 0; i--) {
			rc_client_t *c = &t->clients[i];
			tb_control_msg_t m;
			int rc;

			while ((rc = ctl_read(c->fd, &c->in, &m)) == 1) {
				c->last_rx_ns = now;
				if ((rc = client_message(t, c, &m)) < 0)
					break;
			}
			if (rc < 0 && rc != TB_CLOSED && c->state != CLIENT_LIVE &&
			    rc != -1)
				reject(t, c, TB_CONTROL_REJ_MALFORMED, tb_errmsg());
			if (rc < 0)
				client_drop(t, i, 0, "its control connection ended");
			else if (c->sub && atomic_load(&c->sub->dead))
				client_drop(t, i, TB_CONTROL_BYE_ERROR,
					    c->sub->why_dead ? c->sub->why_dead
							     : "a write failed");
			else if (now - c->last_rx_ns > dead_ns)
				client_drop(t, i, TB_CONTROL_BYE_TIMEOUT,
					    "silent for longer than liveness_timeout_ms");
		}
		if (now >= next_beat) {
			heartbeat_all(t, now, atomic_load(&t->last_seq));
			next_beat = now + beat_ns;
		}
	}
	return NULL;
}

/* ------------------------------------------------ publisher: open, close */

static int listen_on(rc_tx_t *t)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int one = 1, rc;

	if (!t->cfg.control.port)
		return tb_error_set(TB_ECONFIG, "an rc stream needs `control = "
				  "host:port`");
	if ((rc = resolve(&t->cfg.control, &ss, &len, 1)) < 0)
		return rc;
	t->listen_fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (t->listen_fd < 0)
		return tb_error_sys(errno, "socket");
	setsockopt(t->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(t->listen_fd, (struct sockaddr *)&ss, len) < 0)
		return tb_error_sys(errno, "control endpoint %s:%u: bind",
				  t->cfg.control.host, t->cfg.control.port);
	if (listen(t->listen_fd, 64) < 0)
		return tb_error_sys(errno, "listen");
	return 0;
}

static void rc_tx_free(rc_tx_t *t)
{
	if (t->table) {
		for (int i = 0; i < t->table->n; i++)
			sub_free(t, t->table->sub[i]);
		free(t->table);
	}
	for (int i = 0; i < t->n_clients; i++)
		close(t->clients[i].fd);
	if (t->listen_fd >= 0)
		close(t->listen_fd);
	if (t->wake_fd >= 0)
		close(t->wake_fd);
	if (t->ring_mr)
		ibv_dereg_mr(t->ring_mr);
	dev_close(&t->dev);
	tb_mem_free(&t->ring_mem);
	tb_mem_free(&t->slot_mem);
	free(t);
}

static int rc_tx_open(tb_tx_t **out, const tb_stream_cfg_t *cfg, uint64_t epoch)
{
	int node = cfg->publisher_core >= 0 ? tb_mem_node_of_core(cfg->publisher_core) : -1;
	rc_tx_t *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return tb_error_set(TB_ENOMEM, "out of memory");
	t->listen_fd = t->wake_fd = -1;
	t->cfg = *cfg;
	t->epoch = epoch;
	t->psn = random_psn();
	t->size = cfg->ring_size;
	t->backpressure = cfg->slow_consumer == TB_SLOW_BACKPRESSURE;
	t->table = calloc(1, sizeof(*t->table));
	if (!t->table) {
		free(t);
		return tb_error_set(TB_ENOMEM, "out of memory");
	}
	if ((rc = dev_open(&t->dev, cfg)) < 0 ||
	    (rc = tb_mem_alloc(&t->ring_mem, cfg->ring_size, node, 0)) < 0 ||
	    (rc = tb_mem_alloc(&t->slot_mem, TB_RC_MAX_SUBS * TB_RC_SLOT_SIZE,
			       node, 0)) < 0)
		goto fail;
	t->ring_mr = ibv_reg_mr(t->dev.pd, t->ring_mem.addr, cfg->ring_size,
				IBV_ACCESS_LOCAL_WRITE);
	if (!t->ring_mr) {
		rc = tb_error_sys(errno, "ibv_reg_mr (ring, %llu bytes)",
				(unsigned long long)cfg->ring_size);
		goto fail;
	}
	t->lkey = t->ring_mr->lkey;
	tb_ring_init(&t->base.ring, t->ring_mem.addr, cfg->ring_size, cfg->id,
		     NULL, NULL);
	t->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (t->wake_fd < 0) {
		rc = tb_error_sys(errno, "eventfd");
		goto fail;
	}
	if ((rc = listen_on(t)) < 0)
		goto fail;
	rc = pthread_create(&t->ctl, NULL, ctl_main, t);
	if (rc != 0) {
		rc = tb_error_sys(rc, "start the control thread");
		goto fail;
	}
	t->ctl_started = 1;
	t->base.ops = t->backpressure ? &tb_rc_bp_tx_ops : &tb_rc_tx_ops;
	*out = &t->base;
	tb_info("stream '%s': rc publisher on %s port %u (gid index %d), control "
		"%s:%u", cfg->name, ibv_get_device_name(t->dev.ctx->device),
		t->dev.port, t->dev.gid_index, cfg->control.host, cfg->control.port);
	return 0;
fail:
	rc_tx_free(t);
	return rc;
}

/* Waits until everything posted to `s` has completed, so the last frames
 * are in its ring before BYE tells it the stream ended. */
static void sub_drain(rc_sub_t *s)
{
	struct ibv_send_wr wr = {.opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = s->raddr, .rkey = s->rkey}};
	struct ibv_send_wr *bad;
	uint64_t until = tb_clock_now_ns() + DRAIN_TIMEOUT_NS;

	if (atomic_load(&s->dead))
		return;
	while (s->posted - s->completed + 1 > TB_RC_SQ_DEPTH &&
	       tb_clock_now_ns() < until && sub_reap(s) == 0)
		usleep(100);
	wr.wr_id = s->posted + 1;
	if (ibv_post_send(s->qp, &wr, &bad) != 0)
		return;
	s->posted++;
	while (s->completed != s->posted && tb_clock_now_ns() < until &&
	       sub_reap(s) == 0)
		usleep(100);
}

static void rc_tx_close(tb_tx_t *tx, uint64_t final_seq)
{
	rc_tx_t *t = (rc_tx_t *)tx;
	uint64_t one = 1;

	atomic_store(&t->stop, 1);
	if (write(t->wake_fd, &one, sizeof(one)) < 0)
		(void)0;
	if (t->ctl_started)
		pthread_join(t->ctl, NULL);
	for (int i = 0; i < t->table->n; i++)
		sub_drain(t->table->sub[i]);
	/* The end: the last sequence, then BYE, to everyone still here. */
	heartbeat_all(t, tb_clock_now_ns(), final_seq);
	while (t->n_clients)
		client_drop(t, t->n_clients - 1, TB_CONTROL_BYE_CLOSED,
			    "the stream closed");
	rc_tx_free(t);
}

/* A lapping stream never asks for room: a slow subscriber is skipped. */
const tb_tx_ops_t tb_rc_tx_ops = {
	.name = "rc",
	.open = rc_tx_open,
	.room = NULL,
	.send = rc_tx_send,
	.flush = NULL,
	.beat = rc_tx_beat,
	.close = rc_tx_close,
};

/* Back-pressure streams ask for room before every claim. */
const tb_tx_ops_t tb_rc_bp_tx_ops = {
	.name = "rc",
	.open = rc_tx_open,
	.room = rc_tx_room,
	.send = rc_tx_send,
	.flush = NULL,
	.beat = rc_tx_beat,
	.close = rc_tx_close,
};

/* ============================================================ subscriber */

enum { CTL_CONNECTING, CTL_LIVE, CTL_CLOSED, CTL_LOST, CTL_REJECTED };

typedef struct rc_session {
	struct ibv_qp *qp;
	uint64_t epoch;
	uint64_t credit_addr;
	uint32_t credit_rkey;
	uint64_t next_seq;
} rc_session_t;

typedef struct rc_rx {
	tb_rx_t base;
	/* Hot: the polling thread. */
	struct ibv_cq *cq;
	struct ibv_qp *qp;          /* of the adopted session; NULL = none */
	uint8_t *ring;
	uint64_t mask;
	uint64_t cpos;              /* consumed up to (free-running) */
	uint64_t credited;          /* cpos when credit was last returned */
	uint32_t regranted;         /* receives re-posted beyond the first */
	uint32_t recv_owed;         /* consumed, not yet re-posted */
	uint64_t credit_addr;
	uint32_t credit_rkey;
	uint64_t cposted, ccompleted, clast_signal;
	int wc_n, wc_i;
	_Atomic int cq_broken;      /* overrun: remade before the next session */
	uint32_t idle_polls;
	uint64_t epoch;
	uint64_t seen_gen;
	uint32_t stream_id;
	uint64_t dead_ns;
	struct ibv_wc wc[CQ_BATCH];
	struct ibv_recv_wr rwr[TB_RC_RECV_BATCH];
	/* Shared with the control thread. */
	_Atomic uint64_t gen;       /* bumped when `sess` is ready */
	_Atomic uint64_t released;  /* last gen the poller let go of */
	_Atomic int ctl_state;
	_Atomic uint64_t last_beat_ns;
	_Atomic uint64_t pub_last_seq;
	_Atomic int stop;
	rc_session_t sess;
	/* Cold: the control thread. */
	rc_dev_t dev;
	tb_mem_t ring_mem;
	struct ibv_mr *ring_mr;
	tb_stream_cfg_t cfg;
	pthread_t ctl;
	int ctl_started;
	int fd;
	ctl_in_t in;
	struct ibv_qp *old_qp;      /* waiting for the poller to release it */
	uint64_t old_gen;
	char reject_text[TB_CONTROL_TEXT_LEN + 32];
} rc_rx_t;

static int post_recvs(rc_rx_t *r, struct ibv_qp *qp, uint32_t n)
{
	struct ibv_recv_wr *bad;

	while (n) {
		uint32_t k = n < TB_RC_RECV_BATCH ? n : TB_RC_RECV_BATCH;

		r->rwr[k - 1].next = NULL;
		if (ibv_post_recv(qp, r->rwr, &bad) != 0) {
			r->rwr[k - 1].next = k < TB_RC_RECV_BATCH ? &r->rwr[k] : NULL;
			return -1;
		}
		r->rwr[k - 1].next = k < TB_RC_RECV_BATCH ? &r->rwr[k] : NULL;
		n -= k;
	}
	return 0;
}

static void ctl_close_fd(rc_rx_t *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	r->in.have = 0;
}

static int connect_timeout(rc_rx_t *r)
{
	struct sockaddr_storage ss;
	socklen_t len;
	struct pollfd pf;
	int err = 0, rc;
	socklen_t el = sizeof(err);

	if ((rc = resolve(&r->cfg.control, &ss, &len, 0)) < 0)
		return rc;
	r->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (r->fd < 0)
		return tb_error_sys(errno, "socket");
	if (connect(r->fd, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS)
		goto fail;
	pf = (struct pollfd){.fd = r->fd, .events = POLLOUT};
	if (poll(&pf, 1, CONNECT_TIMEOUT_MS) <= 0)
		goto fail;
	getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &err, &el);
	if (err)
		goto fail;
	tcp_nodelay(r->fd);
	return 0;
fail:
	ctl_close_fd(r);
	return TB_NOT_CONNECTED;
}

/* Reads one whole message, waiting up to `ms`. */
static int read_msg(rc_rx_t *r, tb_control_msg_t *m, int ms)
{
	uint64_t until = tb_clock_now_ns() + (uint64_t)ms * 1000000ull;

	for (;;) {
		struct pollfd pf = {.fd = r->fd, .events = POLLIN};
		int rc = ctl_read(r->fd, &r->in, m);
		uint64_t now;

		if (rc != 0)
			return rc;
		now = tb_clock_now_ns();
		if (now >= until)
			return TB_ETIMEDOUT;
		poll(&pf, 1, (int)((until - now) / 1000000ull) + 1);
	}
}

/* One attempt: connect, new QP, HELLO + SUBSCRIBE, ACCEPT, QP up. */
static int session_open(rc_rx_t *r)
{
	tb_control_hello_t h = {.stream_id = r->cfg.id};
	tb_control_subscribe_t s = {
		.stream_id = r->cfg.id, .transport = TB_TRANSPORT_RC,
		.mtu = (uint8_t)r->dev.mtu, .flags = TB_CONTROL_SUB_F_CREDIT_SLOT,
		.ring_addr = (uintptr_t)r->ring, .ring_len = r->mask + 1,
		.rkey = r->ring_mr->rkey, .recv_depth = TB_RC_RECV_DEPTH,
	};
	uint32_t psn = random_psn();
	struct ibv_qp *qp;
	tb_control_msg_t m;
	int rc;

	if ((rc = connect_timeout(r)) < 0)
		return rc;
	qp = qp_create(&r->dev, r->cq, SUB_SQ_DEPTH, TB_RC_RECV_DEPTH, 8);
	if (!qp) {
		tb_warn("stream '%s': %s", r->cfg.name, tb_errmsg());
		ctl_close_fd(r);
		return TB_ESYS;
	}
	if (post_recvs(r, qp, TB_RC_RECV_DEPTH) < 0) {
		rc = tb_error_sys(errno, "ibv_post_recv");
		goto fail;
	}
	snprintf(h.client_id, sizeof(h.client_id), "pid-%d", (int)getpid());
	snprintf(h.token, sizeof(h.token), "%s", r->cfg.token[0] ? r->cfg.token : "none");
	s.qpn = qp->qp_num;
	memcpy(s.gid, r->dev.gid.raw, 16);
	s.psn = psn;
	if ((rc = SEND(r->fd, hello, &h)) < 0 || (rc = SEND(r->fd, subscribe, &s)) < 0)
		goto fail;
	rc = read_msg(r, &m, REPLY_TIMEOUT_MS);
	if (rc == 1 && m.type == TB_CONTROL_REJECT) {
		snprintf(r->reject_text, sizeof(r->reject_text), "%s (reason %u)",
			 m.reject.text, m.reject.reason);
		tb_warn("stream '%s': the publisher rejected this subscriber: %s",
			r->cfg.name, r->reject_text);
		rc = m.reject.reason == TB_CONTROL_REJ_BAD_TOKEN ? TB_EAUTH : TB_ESTATE;
		goto fail;
	}
	if (rc != 1 || m.type != TB_CONTROL_ACCEPT) {
		rc = rc < 0 ? rc : TB_EPROTO;
		goto fail;
	}
	if ((rc = qp_connect(&r->dev, qp, m.accept.qpn, m.accept.gid,
			     m.accept.psn, psn, r->dev.mtu)) < 0)
		goto fail;
	r->sess = (rc_session_t){.qp = qp, .epoch = m.accept.epoch,
				 .credit_addr = m.accept.credit_addr,
				 .credit_rkey = m.accept.credit_rkey,
				 .next_seq = m.accept.next_seq};
	atomic_store(&r->last_beat_ns, tb_clock_now_ns());
	atomic_store(&r->ctl_state, CTL_LIVE);
	atomic_fetch_add_explicit(&r->gen, 1, memory_order_release);
	return 0;
fail:
	ibv_destroy_qp(qp);
	ctl_close_fd(r);
	return rc;
}

static void *rx_ctl_main(void *arg)
{
	rc_rx_t *r = arg;
	uint64_t beat_ns = (uint64_t)r->cfg.heartbeat_ms * 1000000ull;
	uint64_t next_beat = 0;

	while (!atomic_load(&r->stop)) {
		int st = atomic_load(&r->ctl_state);

		if (r->old_qp && atomic_load(&r->released) >= r->old_gen) {
			ibv_destroy_qp(r->old_qp);
			r->old_qp = NULL;
		}
		if (st == CTL_REJECTED) {
			usleep(CTL_TICK_MS * 1000);
			continue;
		}
		if (st == CTL_CONNECTING) {
			int rc;

			if (r->old_qp) {   /* one session at a time */
				usleep(CTL_TICK_MS * 1000);
				continue;
			}
			if (atomic_load(&r->cq_broken)) {
				struct ibv_cq *cq = ibv_create_cq(r->dev.ctx,
					(int)(TB_RC_RECV_DEPTH + SUB_SQ_DEPTH) * 2,
					NULL, NULL, 0);

				if (!cq) {
					usleep(100 * 1000);
					continue;
				}
				tb_warn("stream '%s': completion queue overrun; "
					"reconnecting on a new one", r->cfg.name);
				ibv_destroy_cq(r->cq);
				r->cq = cq;
				atomic_store(&r->cq_broken, 0);
			}
			rc = session_open(r);
			if (rc == TB_EAUTH)
				atomic_store(&r->ctl_state, CTL_REJECTED);
			else if (rc < 0)
				usleep(100 * 1000);
			continue;
		}
		if (r->fd >= 0) {
			struct pollfd pf = {.fd = r->fd, .events = POLLIN};
			tb_control_msg_t m;
			int rc;
			uint64_t now;

			poll(&pf, 1, CTL_TICK_MS);
			while ((rc = ctl_read(r->fd, &r->in, &m)) == 1) {
				if (m.type == TB_CONTROL_HEARTBEAT) {
					atomic_store(&r->pub_last_seq, m.heartbeat.last_seq);
					atomic_store(&r->last_beat_ns, tb_clock_now_ns());
				} else if (m.type == TB_CONTROL_BYE) {
					atomic_store(&r->ctl_state,
						     m.bye.reason == TB_CONTROL_BYE_CLOSED
							     ? CTL_CLOSED : CTL_LOST);
					break;
				}
			}
			if (rc < 0 && atomic_load(&r->ctl_state) == CTL_LIVE)
				atomic_store(&r->ctl_state, CTL_LOST);
			now = tb_clock_now_ns();
			if (atomic_load(&r->ctl_state) == CTL_LIVE && now >= next_beat) {
				tb_control_heartbeat_t hb = {.timestamp_ns = now};

				SEND(r->fd, heartbeat, &hb);
				next_beat = now + beat_ns;
			}
			if (atomic_load(&r->ctl_state) != CTL_LIVE)
				ctl_close_fd(r);
			continue;
		}
		/* CLOSED or LOST with the socket gone: wait for the poller to
		 * release the session, then connect again (a publisher that
		 * restarts is a new epoch). */
		if (atomic_load(&r->released) >= atomic_load(&r->gen)) {
			r->old_qp = r->sess.qp;
			r->old_gen = atomic_load(&r->gen);
			r->sess.qp = NULL;
			atomic_store(&r->ctl_state, CTL_CONNECTING);
		} else {
			usleep(CTL_TICK_MS * 1000);
		}
	}
	ctl_close_fd(r);
	return NULL;
}

static void rc_rx_free(rc_rx_t *r)
{
	if (r->sess.qp)
		ibv_destroy_qp(r->sess.qp);
	if (r->old_qp && r->old_qp != r->sess.qp)
		ibv_destroy_qp(r->old_qp);
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->ring_mr)
		ibv_dereg_mr(r->ring_mr);
	dev_close(&r->dev);
	tb_mem_free(&r->ring_mem);
	free(r);
}

static int rc_rx_open(tb_rx_t **out, const tb_stream_cfg_t *cfg)
{
	int node = cfg->subscriber_core >= 0 ? tb_mem_node_of_core(cfg->subscriber_core) : -1;
	rc_rx_t *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return tb_error_set(TB_ENOMEM, "out of memory");
	r->fd = -1;
	r->cfg = *cfg;
	r->stream_id = cfg->id;
	r->mask = cfg->ring_size - 1;
	r->dead_ns = (uint64_t)cfg->liveness_timeout_ms * 1000000ull;
	for (uint32_t i = 0; i < TB_RC_RECV_BATCH; i++)
		r->rwr[i].next = i + 1 < TB_RC_RECV_BATCH ? &r->rwr[i + 1] : NULL;
	if (!cfg->control.port) {
		free(r);
		return tb_error_set(TB_ECONFIG, "an rc stream needs `control = host:port`");
	}
	if ((rc = dev_open(&r->dev, cfg)) < 0 ||
	    (rc = tb_mem_alloc(&r->ring_mem, cfg->ring_size, node, 0)) < 0)
		goto fail;
	r->ring = r->ring_mem.addr;
	/* Remote write on the ring alone: nothing else of ours is exposed. */
	r->ring_mr = ibv_reg_mr(r->dev.pd, r->ring, cfg->ring_size,
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!r->ring_mr) {
		rc = tb_error_sys(errno, "ibv_reg_mr (ring, %llu bytes)",
				(unsigned long long)cfg->ring_size);
		goto fail;
	}
	r->cq = ibv_create_cq(r->dev.ctx, (int)(TB_RC_RECV_DEPTH + SUB_SQ_DEPTH) * 2,
			      NULL, NULL, 0);
	if (!r->cq) {
		rc = tb_error_sys(errno, "ibv_create_cq");
		goto fail;
	}
	rc = pthread_create(&r->ctl, NULL, rx_ctl_main, r);
	if (rc != 0) {
		rc = tb_error_sys(rc, "start the control thread");
		goto fail;
	}
	r->ctl_started = 1;
	r->base.ops = &tb_rc_rx_ops;
	*out = &r->base;
	return 0;
fail:
	rc_rx_free(r);
	return rc;
}

static void rc_rx_close(tb_rx_t *rx)
{
	rc_rx_t *r = (rc_rx_t *)rx;

	atomic_store(&r->stop, 1);
	if (r->ctl_started)
		pthread_join(r->ctl, NULL);
	if (r->fd >= 0) {
		tb_control_bye_t b = {.reason = TB_CONTROL_BYE_NORMAL};

		SEND(r->fd, bye, &b);
	}
	ctl_close_fd(r);
	rc_rx_free(r);
}

static uint64_t rc_rx_epoch(const tb_rx_t *rx)
{
	return ((const rc_rx_t *)rx)->epoch;
}

/* Lets go of the session: the control thread may destroy its QP. */
static void rx_release(rc_rx_t *r)
{
	r->qp = NULL;
	r->wc_n = r->wc_i = 0;
	atomic_store_explicit(&r->released, r->seen_gen, memory_order_release);
}

/* Takes over a session the control thread made ready. */
static int rx_adopt(rc_rx_t *r, tb_seq_t *seq)
{
	uint64_t epoch = r->sess.epoch;

	r->seen_gen = atomic_load_explicit(&r->gen, memory_order_acquire);
	if (!r->sess.qp)
		return 0;
	r->qp = r->sess.qp;
	r->credit_addr = r->sess.credit_addr;
	r->credit_rkey = r->sess.credit_rkey;
	r->cpos = r->credited = 0;
	r->regranted = r->recv_owed = 0;
	r->cposted = r->ccompleted = r->clast_signal = 0;
	r->wc_n = r->wc_i = 0;
	r->idle_polls = 0;
	if (r->epoch && r->epoch != epoch) {
		r->epoch = epoch;
		tb_seq_init(seq, 0);
		return TB_NEW_EPOCH;
	}
	r->epoch = epoch;
	return 0;
}

/* Re-posts consumed receives and tells the publisher where we are. */
static void rx_credit(rc_rx_t *r)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	uint64_t value;

	if (tb_unlikely(atomic_load_explicit(&r->ctl_state, memory_order_relaxed) ==
			CTL_CLOSED))
		return;   /* the publisher is gone: nobody reads credits */
	if (r->recv_owed) {
		if (post_recvs(r, r->qp, r->recv_owed) < 0)
			return;
		r->regranted += r->recv_owed;
		r->recv_owed = 0;
	}
	if (r->cposted - r->ccompleted + 1 >= SUB_SQ_DEPTH)
		return;   /* the next poll reaps, then we write */
	value = tb_rc_credit(r->cpos, r->regranted);
	sge = (struct ibv_sge){.addr = (uintptr_t)&value, .length = sizeof(value)};
	wr = (struct ibv_send_wr){
		.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_INLINE,
		.wr.rdma = {.remote_addr = r->credit_addr, .rkey = r->credit_rkey},
	};
	if (r->cposted + 1 - r->clast_signal >= SUB_SIGNAL_EVERY) {
		wr.send_flags |= IBV_SEND_SIGNALED;
		wr.wr_id = r->cposted + 1;
		r->clast_signal = r->cposted + 1;
	}
	if (ibv_post_send(r->qp, &wr, &bad) != 0)
		return;
	r->cposted++;
	r->credited = r->cpos;
}

/* Nothing to deliver: the connection's conditions, checked now and then. */
static int rx_idle(rc_rx_t *r, tb_seq_t *seq, tb_seq_range_t *loss)
{
	int st = atomic_load_explicit(&r->ctl_state, memory_order_relaxed);

	if (!r->qp) {
		if (st == CTL_REJECTED)
			return tb_error_set(TB_EAUTH, "stream '%s': rejected by the "
					  "publisher: %s", r->cfg.name, r->reject_text);
		return TB_NOT_CONNECTED;
	}
	if (r->cpos != r->credited || r->recv_owed)
		rx_credit(r);
	if ((++r->idle_polls & 255) != 0)
		return 0;
	if (st == CTL_CLOSED) {
		uint64_t final = atomic_load(&r->pub_last_seq);

		if (seq->expected && final >= seq->expected) {
			/* Frames it skipped us for at the very end. */
			tb_seq_gap_to(seq, final + 1, loss);
			return TB_LAPPED;
		}
		rx_release(r);
		return TB_CLOSED;
	}
	if (st == CTL_LOST || tb_clock_now_ns() -
	    atomic_load(&r->last_beat_ns) > r->dead_ns) {
		rx_release(r);
		if (st == CTL_LIVE)
			atomic_store(&r->ctl_state, CTL_LOST);
		return TB_PUBLISHER_DEAD;
	}
	return 0;
}

/* A completion that is not a frame: our credit writes, or an error. */
static int rx_other_wc(rc_rx_t *r, const struct ibv_wc *wc)
{
	if (wc->qp_num != r->qp->qp_num)
		return 0;            /* a released session's leftovers */
	if (wc->status == IBV_WC_SUCCESS) {
		if (wc->opcode == IBV_WC_RDMA_WRITE && wc->wr_id)
			r->ccompleted = wc->wr_id;
		return 0;
	}
	if (atomic_load(&r->ctl_state) == CTL_CLOSED)
		return 0;   /* a credit the closed publisher never took, and
			     * the receives flushed after it */
	if (r->base.ctr)
		tb_counter_inc(r->base.ctr, TB_CTR_ERRORS);
	atomic_store(&r->ctl_state, CTL_LOST);
	return -1;
}

static int rc_rx_poll(tb_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		      tb_handler_t handler, void *clientd, int limit)
{
	rc_rx_t *r = (rc_rx_t *)rx;
	uint64_t size = r->mask + 1, now_ns;
	tb_msg_t msg;
	int n = 0;

	/* Hot path: no allocation, lock or system call. */
	if (tb_unlikely(r->seen_gen != atomic_load_explicit(&r->gen,
							    memory_order_acquire))) {
		int rc = rx_adopt(r, seq);

		if (rc < 0)
			return rc;
	}
	if (tb_unlikely(!r->qp))
		return rx_idle(r, seq, loss);
	if (r->wc_i == r->wc_n) {
		r->wc_i = 0;
		r->wc_n = ibv_poll_cq(r->cq, CQ_BATCH, r->wc);
		if (tb_unlikely(r->wc_n <= 0)) {
			if (r->wc_n < 0) {
				/* The CQ is in error (overrun): completions were
				 * lost.  A new session on a new CQ follows, and
				 * the frames missed show as a lap. */
				atomic_store(&r->cq_broken, 1);
				atomic_store(&r->ctl_state, CTL_LOST);
			}
			r->wc_n = 0;
			return rx_idle(r, seq, loss);
		}
	}
	r->idle_polls = 0;
	now_ns = tb_clock_now_ns_inline();
	while (r->wc_i < r->wc_n && n < limit) {
		const struct ibv_wc *wc = &r->wc[r->wc_i];
		uint64_t off = r->cpos & r->mask;
		const tb_frame_hdr_t *f;
		uint32_t imm;

		if (tb_unlikely(wc->status != IBV_WC_SUCCESS ||
				wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
				wc->qp_num != r->qp->qp_num)) {
			r->wc_i++;
			if (rx_other_wc(r, wc) < 0)
				break;
			continue;
		}
		imm = be32toh(wc->imm_data);
		if (tb_unlikely(tb_rc_imm_offset(imm) != off)) {
			/* The only other place it may be: the start, after a
			 * padding frame that fills our tail. */
			const tb_frame_hdr_t *p = (const tb_frame_hdr_t *)(r->ring + off);

			if (tb_rc_imm_offset(imm) != 0 || p->type != TB_FRAME_PAD ||
			    p->length != size - off)
				goto corrupt;
			r->cpos += size - off;
			off = 0;
		}
		f = (const tb_frame_hdr_t *)(r->ring + off);
		if (tb_unlikely(tb_frame_check(f, size - off) < 0 ||
				f->type != TB_FRAME_DATA || f->stream_id != r->stream_id ||
				f->length != wc->byte_len ||
				(f->seq & TB_RC_IMM_SEQ_MASK) != tb_rc_imm_seq_bits(imm)))
			goto corrupt;
		switch (tb_seq_admit(seq, f->seq)) {
		case TB_SEQ_NEXT:
			break;
		case TB_SEQ_DUPLICATE:
			goto consumed;
		case TB_SEQ_GAP:
			if (n > 0)
				goto out;         /* report the loss on its own */
			tb_seq_gap_to(seq, f->seq, loss);
			return TB_LAPPED;  /* rc is reliable: we were skipped */
		}
		tb_frame_to_msg(f, &msg);
		msg.receive_ns = now_ns;
		handler(clientd, &msg);
		n++;
consumed:
		r->cpos += tb_frame_space(f->length);
		r->recv_owed++;
		r->wc_i++;
		continue;
corrupt:
		/* Never happens with a tickbus publisher; drop the session
		 * rather than deliver garbage, and let it reconnect. */
		if (r->base.ctr)
			tb_counter_inc(r->base.ctr, TB_CTR_MALFORMED);
		tb_warn("stream '%s': frame at ring offset %llu does not match its "
			"completion; reconnecting", r->cfg.name,
			(unsigned long long)off);
		atomic_store(&r->ctl_state, CTL_LOST);
		r->wc_i++;
		break;
	}
out:
	if (r->recv_owed >= TB_RC_RECV_BATCH || r->cpos - r->credited >= size / 8)
		rx_credit(r);
	return n;
}

const tb_rx_ops_t tb_rc_rx_ops = {
	.name = "rc",
	.open = rc_rx_open,
	.poll = rc_rx_poll,
	.epoch = rc_rx_epoch,
	.close = rc_rx_close,
};
