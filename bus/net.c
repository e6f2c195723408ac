/*
 * net.c - TCP endpoints, connections and timed reads and writes (the
 * policy is in net.h).
 *
 * Every wait is a poll() bounded by what is left of the call's deadline,
 * taken from the one monotonic clock (clock.h); every read and write is
 * MSG_DONTWAIT, so a socket that a caller made blocking behaves the same.
 * The one exception is tb_net_reader_wait, a blocking recv() with
 * SO_RCVTIMEO for an owner that made its socket blocking on purpose.
 */
#include "bus/net.h"

#include "bus/clock.h"
#include "bus/error.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

/* ------------------------------------------------------------- deadlines */

static uint64_t deadline_of(uint32_t timeout_ms)
{
	return tb_clock_mono_ns() + (uint64_t)timeout_ms * 1000000u;
}

/* Waits for `events` on `fd` until `deadline`: 1 ready, 0 timed out, or
 * TB_ESYS with a message. */
static int wait_until(int fd, short events, uint64_t deadline)
{
	for (;;) {
		struct pollfd pf = {.fd = fd, .events = events};
		uint64_t now = tb_clock_mono_ns();
		int ms, rc;

		if (now >= deadline)
			ms = 0;
		else    /* rounded up, so a wait never ends just before it */
			ms = (int)((deadline - now + 999999u) / 1000000u);
		rc = poll(&pf, 1, ms);
		if (rc > 0)
			return 1;
		if (rc == 0 && tb_clock_mono_ns() >= deadline)
			return 0;
		if (rc < 0 && errno != EINTR)
			return tb_error_sys(errno, "poll");
	}
}

/* ------------------------------------------------------------- endpoints */

/* The host as the resolver wants it: "[::1]" -> "::1"; "" -> NULL. */
static const char *host_of(const tb_endpoint_t *ep, char *buf, size_t cap)
{
	size_t n = strnlen(ep->host, sizeof(ep->host));

	if (n == 0)
		return NULL;
	if (n >= 2 && ep->host[0] == '[' && ep->host[n - 1] == ']')
		snprintf(buf, cap, "%.*s", (int)n - 2, ep->host + 1);
	else
		snprintf(buf, cap, "%.*s", (int)n, ep->host);
	return buf;
}

static int addrinfo_of(const tb_endpoint_t *ep, int passive,
		       struct addrinfo **res)
{
	struct addrinfo hints;
	char host[TB_HOST_MAX], port[8];
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = passive ? AI_PASSIVE : 0;
	snprintf(port, sizeof(port), "%u", ep->port);
	rc = getaddrinfo(host_of(ep, host, sizeof(host)), port, &hints, res);
	if (rc == 0)
		return 0;
	return tb_error_set(rc == EAI_AGAIN || rc == EAI_MEMORY || rc == EAI_SYSTEM
				    ? TB_ESYS : TB_ECONFIG,
			    "%s:%u: %s", ep->host[0] ? ep->host : "(any)",
			    ep->port, rc == EAI_SYSTEM ? strerror(errno)
						       : gai_strerror(rc));
}

int tb_net_resolve(const tb_endpoint_t *ep, int passive,
		   struct sockaddr_storage *ss, socklen_t *len)
{
	struct addrinfo *res;
	int rc = addrinfo_of(ep, passive, &res);

	if (rc < 0)
		return rc;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

/* One option, best effort: without it a connection is slower, not wrong
 * (an option the kernel lacks or refuses, such as SO_BUSY_POLL without
 * CAP_NET_ADMIN, is skipped). */
static void opt(int fd, int level, int name, int v)
{
	(void)setsockopt(fd, level, name, &v, sizeof(v));
}

void tb_net_tune(int fd)
{
	opt(fd, IPPROTO_TCP, TCP_NODELAY, 1);
	opt(fd, IPPROTO_TCP, TCP_QUICKACK, 1);
	opt(fd, SOL_SOCKET, SO_KEEPALIVE, 1);
	opt(fd, IPPROTO_TCP, TCP_KEEPIDLE, TB_NET_KEEPALIVE_S);
	opt(fd, IPPROTO_TCP, TCP_KEEPINTVL, TB_NET_KEEPINTVL_S);
	opt(fd, IPPROTO_TCP, TCP_KEEPCNT, TB_NET_KEEPCNT);
	opt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, TB_NET_USER_TIMEOUT_MS);
#ifdef SO_BUSY_POLL
	opt(fd, SOL_SOCKET, SO_BUSY_POLL, TB_NET_BUSY_POLL_US);
#endif
}

/* ----------------------------------------------------------- connecting */

/* One address: 0 with *fd connected, or an errno value. */
static int dial_one(const struct addrinfo *a, uint64_t deadline, int *fd)
{
	int err = 0;
	socklen_t el = sizeof(err);
	int s = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		       a->ai_protocol);

	if (s < 0)
		return errno;
	if (connect(s, a->ai_addr, a->ai_addrlen) < 0) {
		int w;

		if (errno != EINPROGRESS) {
			err = errno;
			close(s);
			return err;
		}
		w = wait_until(s, POLLOUT, deadline);
		if (w <= 0) {
			close(s);
			return w == 0 ? ETIMEDOUT : EIO;
		}
		if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
			err = errno;
		if (err) {
			close(s);
			return err;
		}
	}
	*fd = s;
	return 0;
}

int tb_net_dial(const tb_endpoint_t *ep, uint32_t timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms);
	struct addrinfo *res, *a;
	int fd = -1, err = ECONNREFUSED, rc;

	if ((rc = addrinfo_of(ep, 0, &res)) < 0)
		return rc;
	for (a = res; a && fd < 0; a = a->ai_next) {
		err = dial_one(a, deadline, &fd);
		if (err == ETIMEDOUT)
			break;     /* the deadline is the call's: none is left */
	}
	freeaddrinfo(res);
	if (fd < 0)
		return tb_error_sys(err, "connect %s:%u",
				    ep->host[0] ? ep->host : "(loopback)",
				    ep->port);
	tb_net_tune(fd);
	return fd;
}

int tb_net_dial_start(const tb_endpoint_t *ep)
{
	struct addrinfo *res, *a;
	int fd = -1, err = ECONNREFUSED, rc;

	if ((rc = addrinfo_of(ep, 0, &res)) < 0)
		return rc;
	for (a = res; a && fd < 0; a = a->ai_next) {
		int s = socket(a->ai_family,
			       SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
			       a->ai_protocol);

		if (s < 0) {
			err = errno;
			continue;
		}
		if (connect(s, a->ai_addr, a->ai_addrlen) == 0 ||
		    errno == EINPROGRESS) {
			fd = s;
			break;
		}
		err = errno;
		close(s);
	}
	freeaddrinfo(res);
	if (fd < 0)
		return tb_error_sys(err, "connect %s:%u",
				    ep->host[0] ? ep->host : "(loopback)",
				    ep->port);
	return fd;
}

int tb_net_dial_done(int fd, const tb_endpoint_t *ep)
{
	struct pollfd pf = {.fd = fd, .events = POLLOUT};
	int err = 0;
	socklen_t el = sizeof(err);

	if (poll(&pf, 1, 0) == 0)
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		err = errno;
	if (err)
		return tb_error_sys(err, "connect %s:%u",
				    ep->host[0] ? ep->host : "(loopback)",
				    ep->port);
	tb_net_tune(fd);
	return 1;
}

int tb_net_listen(const tb_endpoint_t *ep, uint16_t *port)
{
	struct sockaddr_storage ss;
	socklen_t len, sl = sizeof(ss);
	int fd, rc, one = 1;

	if ((rc = tb_net_resolve(ep, 1, &ss, &len)) < 0)
		return rc;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return tb_error_sys(errno, "socket");
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 ||
	    listen(fd, TB_NET_BACKLOG) < 0) {
		rc = tb_error_sys(errno, "listen on %s:%u",
				  ep->host[0] ? ep->host : "(any)", ep->port);
		close(fd);
		return rc;
	}
	if (port) {
		if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
			rc = tb_error_sys(errno, "getsockname");
			close(fd);
			return rc;
		}
		*port = ntohs(ss.ss_family == AF_INET6
				      ? ((struct sockaddr_in6 *)&ss)->sin6_port
				      : ((struct sockaddr_in *)&ss)->sin_port);
	}
	return fd;
}

int tb_net_accept(int lfd, char *peer, size_t peer_len)
{
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);
	int fd = accept4(lfd, (struct sockaddr *)&sa, &sl,
			 SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
		    errno == ECONNABORTED)
			return TB_NOT_CONNECTED;
		return tb_error_sys(errno, "accept");
	}
	tb_net_tune(fd);
	if (peer) {
		const void *addr = NULL;

		if (sa.ss_family == AF_INET)
			addr = &((struct sockaddr_in *)&sa)->sin_addr;
		else if (sa.ss_family == AF_INET6)
			addr = &((struct sockaddr_in6 *)&sa)->sin6_addr;
		if (!addr || !inet_ntop(sa.ss_family, addr, peer, (socklen_t)peer_len))
			snprintf(peer, peer_len, "?");
	}
	return fd;
}

/* ------------------------------------------------------- reading, writing */

int tb_net_send_all(int fd, const void *buf, size_t len, uint32_t timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms);
	const uint8_t *p = buf;
	size_t sent = 0;

	while (sent < len) {
		ssize_t n = send(fd, p + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
		int w;

		if (n > 0) {
			sent += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
			return tb_error_sys(n == 0 ? EIO : errno, "send");
		w = wait_until(fd, POLLOUT, deadline);
		if (w < 0)
			return w;
		if (w == 0)
			return tb_error_set(TB_ETIMEDOUT, "send: the peer took %zu "
					  "of %zu bytes in %u ms", sent, len,
					  timeout_ms);
	}
	return 0;
}

/* tb_net_recv_some against an absolute deadline. */
static int recv_until(int fd, void *buf, size_t cap, uint64_t deadline)
{
	for (;;) {
		ssize_t n = recv(fd, buf, cap, MSG_DONTWAIT);
		int w;

		if (n > 0)
			return (int)n;
		if (n == 0)
			return TB_CLOSED;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return tb_error_sys(errno, "recv");
		w = wait_until(fd, POLLIN, deadline);
		if (w <= 0)
			return w;
	}
}

int tb_net_recv_some(int fd, void *buf, size_t cap, uint32_t timeout_ms)
{
	if (cap > INT32_MAX)
		cap = INT32_MAX;
	return recv_until(fd, buf, cap, deadline_of(timeout_ms));
}

/* What a read of `len` bytes that got `got` and then `rc` (0: the
 * deadline, TB_CLOSED: the peer) comes to. */
static int short_read(int rc, size_t got, size_t len, uint32_t timeout_ms)
{
	if (rc == TB_CLOSED)
		return got == 0 ? TB_CLOSED
				: tb_error_set(TB_EIO, "recv: the peer closed the "
					       "connection after %zu of %zu bytes",
					       got, len);
	if (rc == 0)
		return got == 0 ? tb_error_set(TB_ETIMEDOUT, "recv: nothing "
					       "within %u ms", timeout_ms)
				: tb_error_set(TB_ETIMEDOUT, "recv: %zu of %zu "
					       "bytes within %u ms", got, len,
					       timeout_ms);
	return rc;
}

int tb_net_recv_all(int fd, void *buf, size_t len, uint32_t timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms);
	uint8_t *p = buf;
	size_t got = 0;

	while (got < len) {
		size_t want = len - got < INT32_MAX ? len - got : INT32_MAX;
		int n = recv_until(fd, p + got, want, deadline);

		if (n <= 0)
			return short_read(n, got, len, timeout_ms);
		got += (size_t)n;
	}
	return 0;
}

int tb_net_idle_ok(int fd)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
	uint8_t b;
	ssize_t n;

	if (poll(&pf, 1, 0) == 0)
		return 1;
	if (pf.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL))
		return 0;
	n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0)
		return tb_error_set(TB_EPROTO, "%zd unasked-for bytes from the "
				  "peer", n);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 1;
	return 0;
}

void tb_net_reader_init(tb_net_reader_t *r, int fd, void *buf, size_t cap)
{
	r->fd = fd;
	r->buf = buf;
	r->cap = cap < INT32_MAX ? cap : INT32_MAX;
	r->have = r->off = 0;
	r->spin_ns = 0;
	r->rcvtimeo_ms = 0;
	r->rcvtimeo_set = 0;
}

int tb_net_set_blocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		return tb_error_sys(errno, "fcntl O_NONBLOCK");
	return 0;
}

int tb_net_reader_wait(tb_net_reader_t *r, uint32_t timeout_ms)
{
	ssize_t k;

	if (r->have > r->off)
		return 1;
	if (timeout_ms == 0) /* SO_RCVTIMEO 0 would block for ever */
		return 0;
	r->off = r->have = 0;
	if (!r->rcvtimeo_set || r->rcvtimeo_ms != timeout_ms) {
		struct timeval tv = {
			.tv_sec = (time_t)(timeout_ms / 1000u),
			.tv_usec = (suseconds_t)(timeout_ms % 1000u) * 1000,
		};

		if (setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
			return tb_error_sys(errno, "setsockopt SO_RCVTIMEO");
		r->rcvtimeo_ms = timeout_ms;
		r->rcvtimeo_set = 1;
	}
	k = recv(r->fd, r->buf, r->cap, 0);
	if (k > 0) {
		r->have = (size_t)k;
		return 1;
	}
	if (k == 0)
		return TB_CLOSED;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return 0;
	return tb_error_sys(errno, "recv");
}

int tb_net_reader_read(tb_net_reader_t *r, void *dst, size_t len,
		       uint32_t timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms);
	uint8_t *d = dst;
	size_t got = 0;

	while (got < len) {
		size_t k = r->have - r->off;
		int n;

		if (k > 0) {
			if (k > len - got)
				k = len - got;
			memcpy(d + got, r->buf + r->off, k);
			r->off += k;
			got += k;
			continue;
		}
		n = recv_until(r->fd, r->buf, r->cap, deadline);
		if (n <= 0)
			return short_read(n, got, len, timeout_ms);
		r->have = (size_t)n;
		r->off = 0;
	}
	return 0;
}

int tb_net_reader_try(tb_net_reader_t *r)
{
	ssize_t k;

	if (r->off == r->have) {
		r->off = r->have = 0;
	} else if (r->have == r->cap) {
		memmove(r->buf, r->buf + r->off, r->have - r->off);
		r->have -= r->off;
		r->off = 0;
	}
	if (r->have == r->cap)
		return 0;
	k = recv(r->fd, r->buf + r->have, r->cap - r->have, MSG_DONTWAIT);
	if (k > 0) {
		r->have += (size_t)k;
		return (int)k;
	}
	if (k == 0)
		return TB_CLOSED;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return 0;
	return tb_error_sys(errno, "recv");
}

/* Busy-polls the reader's socket for up to r->spin_ns: the bytes it got
 * (added to the buffer), or 0 when none came; an end or an error is left
 * for the poll()ing read after it to find and report. */
static int spin_recv(tb_net_reader_t *r)
{
	uint64_t until = tb_clock_mono_ns() + r->spin_ns;

	do {
		ssize_t k = recv(r->fd, r->buf + r->have, r->cap - r->have,
				 MSG_DONTWAIT);

		if (k > 0) {
			r->have += (size_t)k;
			return (int)k;
		}
		if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK &&
			       errno != EINTR))
			return 0;
		/* The answer may need this very core (the peer in this
		 * process, or a busy machine): let whatever waits for it
		 * run; with nothing else to run this returns at once. */
		sched_yield();
	} while (tb_clock_mono_ns() < until);
	return 0;
}

int tb_net_reader_fill(tb_net_reader_t *r, size_t n, uint32_t timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms);

	if (n > r->cap)
		return tb_error_set(TB_EINVAL, "recv: %zu bytes in one piece, the "
				  "buffer holds %zu", n, r->cap);
	if (r->off == r->have)
		r->off = r->have = 0;
	if (r->off + n > r->cap) {
		memmove(r->buf, r->buf + r->off, r->have - r->off);
		r->have -= r->off;
		r->off = 0;
	}
	while (r->have - r->off < n) {
		int got;

		if (r->spin_ns && spin_recv(r) > 0)
			continue;
		got = recv_until(r->fd, r->buf + r->have, r->cap - r->have,
				 deadline);
		if (got <= 0)
			return short_read(got, r->have - r->off, n, timeout_ms);
		r->have += (size_t)got;
	}
	return 0;
}
