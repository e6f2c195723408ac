/*
 * transport/udp.c - UDP multicast sockets under the datagram core (see
 * transport/udp.h for the design).  Set-up, the send path and the poll
 * loop; packing and checking datagrams is dgram.h's.
 */
#include "bus/transport/udp.h"

#include "bus/clock.h"
#include "bus/error.h"
#include "bus/ring.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ENDs sent at close: one may be lost like any datagram. */
#define TB_UDP_END_COPIES 3

/* The group's address and port, and the interface to send and join on. */
struct udp_where {
	struct sockaddr_in group;
	struct ip_mreqn iface;
};

static int resolve(const tb_stream_cfg_t *cfg, struct udp_where *w)
{
	memset(w, 0, sizeof(*w));
	w->group.sin_family = AF_INET;
	w->group.sin_port = htons(cfg->group.port);
	if (inet_pton(AF_INET, cfg->group.host, &w->group.sin_addr) != 1 ||
	    (ntohl(w->group.sin_addr.s_addr) >> 28) != 0xe)
		return tb_error_set(TB_ECONFIG, "udp: stream '%s': group '%s' is not "
				  "an IPv4 multicast address", cfg->name,
				  cfg->group.host);
	if (cfg->group.port == 0)
		return tb_error_set(TB_ECONFIG, "udp: stream '%s': group port 0",
				  cfg->name);
	w->iface.imr_multiaddr = w->group.sin_addr;
	w->iface.imr_address.s_addr = htonl(INADDR_ANY);
	if (!cfg->interface[0])
		return 0;
	if (inet_pton(AF_INET, cfg->interface, &w->iface.imr_address) == 1)
		return 0;
	w->iface.imr_ifindex = (int)if_nametoindex(cfg->interface);
	if (w->iface.imr_ifindex == 0)
		return tb_error_set(TB_ECONFIG, "udp: stream '%s': interface '%s' is "
				  "neither an IPv4 address nor a network device "
				  "on this host", cfg->name, cfg->interface);
	return 0;
}

static int sockopt(int fd, int level, int name, const void *v, socklen_t len,
		   const char *what)
{
	if (setsockopt(fd, level, name, v, len) == 0)
		return 0;
	return tb_error_sys(errno, "udp: setsockopt %s", what);
}

static uint32_t udp_mtu(const tb_stream_cfg_t *cfg)
{
	return cfg->mtu ? cfg->mtu : TB_DGRAM_UDP_MTU;
}

/* ---------------------------------------------------------- publishing */

/* Sends one datagram, packet header `h` and `len` bytes of frames: from a
 * copy by send when it fits TB_UDP_COPY_MAX (no message header or iovecs
 * for the kernel to copy in), else by sendmsg, gathered.  0 or TB_EIO.
 * Hot path. */
static inline int send_lone(tb_udp_tx_t *u, const tb_packet_hdr_t *h,
			    const void *frames, uint32_t len)
{
	ssize_t rc;

	if (tb_likely(len <= TB_UDP_COPY_MAX - TB_PACKET_HDR_LEN)) {
		memcpy(u->one, h, TB_PACKET_HDR_LEN);
		memcpy(u->one + TB_PACKET_HDR_LEN, frames, len);
		u->send_calls++;
		rc = send(u->fd, u->one, TB_PACKET_HDR_LEN + len, 0);
	} else {
		u->iov[0][0].iov_base = (void *)h;
		u->iov[0][0].iov_len = TB_PACKET_HDR_LEN;
		u->iov[0][1].iov_base = (void *)frames;
		u->iov[0][1].iov_len = len;
		u->sendmsg_calls++;
		rc = sendmsg(u->fd, &u->msgs[0].msg_hdr, 0);
	}
	return tb_unlikely(rc < 0) ? TB_EIO : 0;
}

/* Sends the n (> 1) ready datagrams, each gathered, with as few sendmmsg
 * calls as the kernel takes them in.  0 or TB_EIO.  Hot path. */
static int send_batch(tb_udp_tx_t *u, int n)
{
	int sent = 0;

	for (int i = 0; i < n; i++) {
		const tb_dgram_out_t *o = &u->dg.out[i];

		u->iov[i][0].iov_base = (void *)o->hdr;
		u->iov[i][0].iov_len = TB_PACKET_HDR_LEN;
		u->iov[i][1].iov_base = (void *)o->frames;
		u->iov[i][1].iov_len = o->frames_len;
	}
	while (sent < n) {
		int r = sendmmsg(u->fd, &u->msgs[sent], (unsigned)(n - sent), 0);

		u->sendmmsg_calls++;
		if (tb_unlikely(r <= 0)) {
			if (r < 0 && errno == EINTR)
				continue;
			return TB_EIO;
		}
		sent += r;
	}
	return 0;
}

static int send_ready(void *ctx, int n)
{
	tb_udp_tx_t *u = ctx;
	int rc = n == 1 ? send_lone(u, u->dg.out[0].hdr, u->dg.out[0].frames,
				    u->dg.out[0].frames_len)
			: send_batch(u, n);

	if (tb_unlikely(rc < 0))
		u->send_errors++;
	/* Sent or not, they are gone: a receiver sees the loss as a gap. */
	tb_dgram_tx_sent(&u->dg);
	return rc;
}

static int udp_tx_send(tb_tx_t *tx, uint64_t from, uint64_t to)
{
	tb_udp_tx_t *u = (tb_udp_tx_t *)tx;
	const tb_packet_hdr_t *h;
	const void *frames;
	uint32_t len;
	int rc = 0;

	/* Hot path: the system call is the send itself.  One frame and no
	 * batching (the latency path): packed, signed and sent straight;
	 * anything else through the datagram core's drain. */
	(void)from;
	h = tb_dgram_tx_one(&u->dg, to, &frames, &len);
	if (tb_unlikely(!h))
		return tb_dgram_tx_drain(&u->dg, to, 0, send_ready, tx);
	if (tb_unlikely((rc = send_lone(u, h, frames, len)) < 0))
		u->send_errors++;
	tb_dgram_tx_sent_one(&u->dg); /* sent or not, it is gone */
	return rc;
}

static int udp_tx_flush(tb_tx_t *tx)
{
	return tb_dgram_tx_drain(&((tb_udp_tx_t *)tx)->dg, tx->ring.tail, 1,
				 send_ready, tx);
}

static void send_control(tb_udp_tx_t *u, const tb_packet_hdr_t *h)
{
	if (send(u->fd, h, sizeof(*h), 0) < 0)
		u->send_errors++;
}

static void udp_tx_beat(tb_tx_t *tx, uint64_t now_ns, uint64_t last_seq)
{
	tb_udp_tx_t *u = (tb_udp_tx_t *)tx;
	tb_packet_hdr_t h;

	/* Heartbeat thread: what has left, not what was published, so that a
	 * datagram held for batching is not taken for a lost tail. */
	(void)now_ns;
	(void)last_seq;
	tb_dgram_tx_beat(&u->dg, &h, tb_dgram_tx_sent_next(&u->dg));
	send_control(u, &h);
}

static void udp_tx_free(tb_udp_tx_t *u)
{
	if (u->fd >= 0)
		close(u->fd);
	tb_dgram_tx_fini(&u->dg);
	free(u->ring_mem);
	free(u);
}

static void udp_tx_close(tb_tx_t *tx, uint64_t final_seq)
{
	tb_udp_tx_t *u = (tb_udp_tx_t *)tx;
	tb_packet_hdr_t h;

	for (int i = 0; i < TB_UDP_END_COPIES; i++) {
		tb_dgram_tx_end(&u->dg, &h, final_seq);
		send_control(u, &h);
	}
	udp_tx_free(u);
}

static int tx_socket(tb_udp_tx_t *u, const tb_stream_cfg_t *cfg)
{
	struct udp_where w;
	int ttl = cfg->ttl, loop = cfg->loopback ? 1 : 0, rc;

	rc = resolve(cfg, &w);
	if (rc < 0)
		return rc;
	u->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (u->fd < 0)
		return tb_error_sys(errno, "udp: socket");
	if ((rc = sockopt(u->fd, IPPROTO_IP, IP_MULTICAST_IF, &w.iface,
			  sizeof(w.iface), "IP_MULTICAST_IF")) < 0 ||
	    (rc = sockopt(u->fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof(ttl),
			  "IP_MULTICAST_TTL")) < 0 ||
	    (rc = sockopt(u->fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop,
			  sizeof(loop), "IP_MULTICAST_LOOP")) < 0)
		return rc;
	if (connect(u->fd, (struct sockaddr *)&w.group, sizeof(w.group)) != 0)
		return tb_error_sys(errno, "udp: connect to group %s:%u",
				  cfg->group.host, cfg->group.port);
	return 0;
}

static int udp_tx_open(tb_tx_t **out, const tb_stream_cfg_t *cfg, uint64_t epoch)
{
	uint32_t mtu = udp_mtu(cfg), cap = tb_dgram_max_frame(mtu);
	tb_udp_tx_t *u = calloc(1, sizeof(*u));
	int rc;

	if (!u)
		return tb_error_set(TB_ENOMEM, "udp: out of memory");
	u->fd = -1;
	u->mtu = mtu;
	if (!tb_ring_size_ok(cfg->ring_size)) {
		rc = tb_error_set(TB_EINVAL, "udp: ring_size %llu is not a power of "
				"two between 64 KiB and 1 GiB",
				(unsigned long long)cfg->ring_size);
		goto fail;
	}
	if (posix_memalign((void **)&u->ring_mem, 4096, cfg->ring_size) != 0) {
		u->ring_mem = NULL;
		rc = tb_error_set(TB_ENOMEM, "udp: no memory for a %llu-byte ring",
				(unsigned long long)cfg->ring_size);
		goto fail;
	}
	memset(u->ring_mem, 0, cfg->ring_size); /* fault it in now */
	tb_ring_init(&u->tx.ring, u->ring_mem, cfg->ring_size, cfg->id);
	if (cap < u->tx.ring.max_frame)
		u->tx.ring.max_frame = cap;
	rc = tb_dgram_tx_init(&u->dg, &u->tx.ring, mtu, cfg->id, epoch,
			      cfg->batch_us, cfg->token);
	if (rc < 0)
		goto fail;
	tb_dgram_token_check(cfg);
	for (int i = 0; i < TB_DGRAM_READY_MAX; i++) {
		u->msgs[i].msg_hdr.msg_iov = u->iov[i];
		u->msgs[i].msg_hdr.msg_iovlen = 2;
	}
	rc = tx_socket(u, cfg);
	if (rc < 0)
		goto fail;
	u->tx.ops = &tb_udp_tx_ops;
	*out = &u->tx;
	return 0;
fail:
	udp_tx_free(u);
	return tb_error_prepend(rc, "stream '%s'", cfg->name);
}

const tb_tx_ops_t tb_udp_tx_ops = {
	.name = "udp",
	.open = udp_tx_open,
	.room = NULL, /* multicast never waits for a subscriber */
	.send = udp_tx_send,
	.flush = udp_tx_flush,
	.beat = udp_tx_beat,
	.close = udp_tx_close,
};

/* --------------------------------------------------------- subscribing */

/* One system call: recv of one datagram while they come one at a time,
 * recvmmsg of a batch after a receive that found one (a burst may follow)
 * and for as long as batches come back with two or more (udp.h).  A
 * datagram is never cut short: a buffer holds the largest. */
static int receive(tb_udp_rx_t *r)
{
	int got;

	r->recv_calls++;
	if (r->one) {
		ssize_t len = recv(r->fd, r->iov[0].iov_base, TB_UDP_RX_BUF,
				   MSG_DONTWAIT);

		got = len >= 0;
		if (got)
			r->msgs[0].msg_len = (unsigned)len;
		r->one = !got;
	} else {
		got = recvmmsg(r->fd, r->msgs, TB_UDP_RX_BATCH, MSG_DONTWAIT, NULL);
		r->one = got < 2;
	}
	r->got = got > 0 ? got : 0;
	r->next = 0;
	return r->got;
}

static int udp_rx_poll(tb_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		       tb_handler_t handler, void *clientd, int limit)
{
	tb_udp_rx_t *r = (tb_udp_rx_t *)rx;
	uint64_t now = 0;
	int n = 0, done, rc, received = 0;

	/* Hot path: at most one recvmmsg, when the last batch is used up,
	 * and nothing else: no allocation, lock or other system call.  A
	 * batch with nothing to deliver (garbage, another epoch) ends the
	 * poll like an empty one, so a flood cannot hold the caller here
	 * nor hide a dead publisher. */
	tb_dgram_rx_set_counters(&r->dg, rx->ctr);
	for (;;) {
		const uint8_t *buf;
		size_t len;

		if (r->next == r->got) {
			if (n > 0)
				return n;
			if (received || receive(r) == 0)
				return tb_dgram_rx_idle(&r->dg, tb_clock_now_ns_inline());
			received = 1;
			now = 0;
		}
		buf = r->bufs + (size_t)r->next * TB_UDP_RX_BUF;
		len = r->msgs[r->next].msg_len;
		if (!now)
			now = tb_clock_now_ns_inline();
		rc = tb_dgram_rx_input(&r->dg, seq, loss, buf, len, now, handler,
				       clientd, limit - n, n, &done);
		if (done)
			r->next++;
		if (rc < 0)
			return rc; /* only when n == 0 */
		n += rc;
		if (!done || n >= limit)
			return n;
	}
}

static uint64_t udp_rx_epoch(const tb_rx_t *rx)
{
	return ((const tb_udp_rx_t *)rx)->dg.epoch;
}

static void udp_rx_close(tb_rx_t *rx)
{
	tb_udp_rx_t *r = (tb_udp_rx_t *)rx;

	if (r->fd >= 0)
		close(r->fd);
	tb_dgram_rx_fini(&r->dg);
	free(r->bufs);
	free(r);
}

static int rx_socket(tb_udp_rx_t *r, const tb_stream_cfg_t *cfg)
{
	struct udp_where w;
	int one = 1, zero = 0, rc;
	socklen_t len = sizeof(r->rcvbuf);
	uint64_t granted;

	rc = resolve(cfg, &w);
	if (rc < 0)
		return rc;
	r->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (r->fd < 0)
		return tb_error_sys(errno, "udp: socket");
	if ((rc = sockopt(r->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one),
			  "SO_REUSEADDR")) < 0 ||
	    (rc = sockopt(r->fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one),
			  "SO_REUSEPORT")) < 0)
		return rc;
	/* With CAP_NET_ADMIN the size asked for is taken whatever
	 * net.core.rmem_max says (SO_RCVBUFFORCE); without it, up to that
	 * ceiling (the warning below says when it bit). */
	if (cfg->rcvbuf) {
		int want = (int)cfg->rcvbuf;

		if (setsockopt(r->fd, SOL_SOCKET, SO_RCVBUFFORCE, &want,
			       sizeof(want)) != 0 &&
		    (rc = sockopt(r->fd, SOL_SOCKET, SO_RCVBUF, &want,
				  sizeof(want), "SO_RCVBUF")) < 0)
			return rc;
	}
	if (getsockopt(r->fd, SOL_SOCKET, SO_RCVBUF, &r->rcvbuf, &len) != 0)
		return tb_error_sys(errno, "udp: getsockopt SO_RCVBUF");
	/* Linux doubles the value asked for (bookkeeping overhead) after
	 * capping it at net.core.rmem_max (SO_RCVBUF) or INT_MAX / 2 (either
	 * option). */
	granted = (uint64_t)r->rcvbuf / 2;
	if (cfg->rcvbuf && granted < cfg->rcvbuf && granted < INT_MAX / 2)
		tb_warn("udp: stream '%s': SO_RCVBUF of %u bytes capped by the "
			"kernel at %" PRIu64 "; raise net.core.rmem_max (sysctl "
			"-w net.core.rmem_max=%u) or run with CAP_NET_ADMIN, or "
			"datagrams may be dropped in bursts", cfg->name,
			cfg->rcvbuf, granted, cfg->rcvbuf);
	/* Bound to the group address: only this group's datagrams, even when
	 * another group shares the port. */
	if (bind(r->fd, (struct sockaddr *)&w.group, sizeof(w.group)) != 0)
		return tb_error_sys(errno, "udp: bind %s:%u", cfg->group.host,
				  cfg->group.port);
	if ((rc = sockopt(r->fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &w.iface,
			  sizeof(w.iface), "IP_ADD_MEMBERSHIP")) < 0)
		return tb_error_prepend(rc, "join %s on %s", cfg->group.host,
				      cfg->interface[0] ? cfg->interface :
				      "the default interface");
	return sockopt(r->fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof(zero),
		       "IP_MULTICAST_ALL");
}

static int udp_rx_open(tb_rx_t **out, const tb_stream_cfg_t *cfg)
{
	tb_udp_rx_t *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return tb_error_set(TB_ENOMEM, "udp: out of memory");
	r->fd = -1;
	tb_dgram_rx_init(&r->dg, cfg->id, cfg->liveness_timeout_ms, cfg->token,
			 TB_UDP_RX_BUF);
	tb_dgram_token_check(cfg);
	if (posix_memalign((void **)&r->bufs, 4096,
			   (size_t)TB_UDP_RX_BATCH * TB_UDP_RX_BUF) != 0) {
		r->bufs = NULL;
		rc = tb_error_set(TB_ENOMEM, "udp: no memory for receive buffers");
		goto fail;
	}
	for (int i = 0; i < TB_UDP_RX_BATCH; i++) {
		r->iov[i].iov_base = r->bufs + (size_t)i * TB_UDP_RX_BUF;
		r->iov[i].iov_len = TB_UDP_RX_BUF;
		r->msgs[i].msg_hdr.msg_iov = &r->iov[i];
		r->msgs[i].msg_hdr.msg_iovlen = 1;
	}
	r->one = 1;
	rc = rx_socket(r, cfg);
	if (rc < 0)
		goto fail;
	r->rx.ops = &tb_udp_rx_ops;
	*out = &r->rx;
	return 0;
fail:
	udp_rx_close(&r->rx);
	return tb_error_prepend(rc, "stream '%s'", cfg->name);
}

const tb_rx_ops_t tb_udp_rx_ops = {
	.name = "udp",
	.open = udp_rx_open,
	.poll = udp_rx_poll,
	.epoch = udp_rx_epoch,
	.close = udp_rx_close,
};
