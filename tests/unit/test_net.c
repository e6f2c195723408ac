/*
 * TCP helpers (net.h) on the loopback: endpoints with and without IPv6
 * brackets, dial and its deadline, listen and accept, and the one timeout
 * policy of reads and writes (a deadline per call, not per wait).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/clock.h"
#include "bus/error.h"
#include "bus/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static tb_endpoint_t ep(const char *host, uint16_t port)
{
	tb_endpoint_t e;

	memset(&e, 0, sizeof(e));
	snprintf(e.host, sizeof(e.host), "%s", host);
	e.port = port;
	return e;
}

static uint64_t ms_since(uint64_t t0)
{
	return (tb_clock_mono_ns() - t0) / 1000000u;
}

/* A connected pair over the loopback: *a dialled, *b accepted. */
static void pair(int *a, int *b)
{
	uint16_t port = 0;
	tb_endpoint_t l = ep("127.0.0.1", 0);
	int lfd = tb_net_listen(&l, &port);
	tb_endpoint_t d = ep("127.0.0.1", port);
	struct pollfd pf;

	assert_true(lfd >= 0);
	*a = tb_net_dial(&d, 1000);
	assert_true(*a >= 0);
	pf = (struct pollfd){.fd = lfd, .events = POLLIN};
	assert_int_equal(poll(&pf, 1, 1000), 1);
	*b = tb_net_accept(lfd, NULL, 0);
	assert_true(*b >= 0);
	close(lfd);
}

/* ------------------------------------------------------------ endpoints */

static void resolve_numeric_bracketed_named_and_empty(void **state)
{
	struct sockaddr_storage ss;
	socklen_t len;
	tb_endpoint_t e;

	(void)state;
	e = ep("127.0.0.1", 7000);
	assert_int_equal(tb_net_resolve(&e, 0, &ss, &len), 0);
	assert_int_equal(ss.ss_family, AF_INET);
	assert_int_equal(ntohs(((struct sockaddr_in *)&ss)->sin_port), 7000);
	e = ep("[::1]", 7001);
	assert_int_equal(tb_net_resolve(&e, 0, &ss, &len), 0);
	assert_int_equal(ss.ss_family, AF_INET6);
	assert_int_equal(len, sizeof(struct sockaddr_in6));
	e = ep("::1", 7001);
	assert_int_equal(tb_net_resolve(&e, 0, &ss, &len), 0);
	assert_int_equal(ss.ss_family, AF_INET6);
	e = ep("localhost", 7002);
	assert_int_equal(tb_net_resolve(&e, 0, &ss, &len), 0);
	/* "": any address to a listener, the loopback to a dialler. */
	e = ep("", 7003);
	assert_int_equal(tb_net_resolve(&e, 1, &ss, &len), 0);
	if (ss.ss_family == AF_INET)
		assert_int_equal(((struct sockaddr_in *)&ss)->sin_addr.s_addr,
				 htonl(INADDR_ANY));
	assert_int_equal(tb_net_resolve(&e, 0, &ss, &len), 0);
	if (ss.ss_family == AF_INET)
		assert_int_equal(((struct sockaddr_in *)&ss)->sin_addr.s_addr,
				 htonl(INADDR_LOOPBACK));
}

static void resolve_refuses_bad_hosts(void **state)
{
	struct sockaddr_storage ss;
	socklen_t len;
	tb_endpoint_t e;

	(void)state;
	e = ep("no-such-host.invalid", 7000);
	assert_int_equal(tb_net_resolve(&e, 0, &ss, &len), TB_ECONFIG);
	assert_non_null(strstr(tb_errmsg(), "no-such-host.invalid:7000"));
	e = ep("[::1", 7000);   /* one bracket: not stripped, not an address */
	assert_int_equal(tb_net_resolve(&e, 0, &ss, &len), TB_ECONFIG);
	e = ep("300.1.1.1", 7000);
	assert_int_equal(tb_net_resolve(&e, 0, &ss, &len), TB_ECONFIG);
}

/* -------------------------------------------------- listen, accept, dial */

static void listen_accept_dial(void **state)
{
	uint16_t port = 0, port2 = 0;
	tb_endpoint_t l = ep("127.0.0.1", 0), d;
	char peer[TB_NET_ADDR_MAX];
	struct pollfd pf;
	int lfd, fd, c, one = 0;
	socklen_t ol = sizeof(one);

	(void)state;
	lfd = tb_net_listen(&l, &port);
	assert_true(lfd >= 0);
	assert_true(port > 0);
	assert_true(fcntl(lfd, F_GETFL) & O_NONBLOCK);
	assert_true(fcntl(lfd, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(tb_net_accept(lfd, peer, sizeof(peer)), TB_NOT_CONNECTED);
	/* The port is taken now. */
	l.port = port;
	assert_int_equal(tb_net_listen(&l, &port2), TB_EBUSY);
	assert_non_null(strstr(tb_errmsg(), "listen on 127.0.0.1"));

	d = ep("127.0.0.1", port);
	c = tb_net_dial(&d, 1000);
	assert_true(c >= 0);
	assert_true(fcntl(c, F_GETFL) & O_NONBLOCK);
	assert_int_equal(getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, &ol), 0);
	assert_int_equal(one, 1);
	pf = (struct pollfd){.fd = lfd, .events = POLLIN};
	assert_int_equal(poll(&pf, 1, 1000), 1);
	fd = tb_net_accept(lfd, peer, sizeof(peer));
	assert_true(fd >= 0);
	assert_string_equal(peer, "127.0.0.1");
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	close(fd);
	close(c);
	close(lfd);
}

static void listen_and_dial_ipv6_with_brackets(void **state)
{
	uint16_t port = 0;
	tb_endpoint_t l = ep("[::1]", 0), d;
	char peer[TB_NET_ADDR_MAX];
	struct pollfd pf;
	int lfd, c, fd;

	(void)state;
	lfd = tb_net_listen(&l, &port);
	if (lfd == TB_ESYS || lfd == TB_ECONFIG) {
		print_message("no IPv6 loopback here (%s); skipped\n", tb_errmsg());
		return;
	}
	assert_true(lfd >= 0);
	d = ep("[::1]", port);
	c = tb_net_dial(&d, 1000);
	assert_true(c >= 0);
	pf = (struct pollfd){.fd = lfd, .events = POLLIN};
	assert_int_equal(poll(&pf, 1, 1000), 1);
	fd = tb_net_accept(lfd, peer, sizeof(peer));
	assert_true(fd >= 0);
	assert_string_equal(peer, "::1");
	close(fd);
	close(c);
	close(lfd);
}

static void dial_refused_and_unresolvable(void **state)
{
	uint16_t port = 0;
	tb_endpoint_t l = ep("127.0.0.1", 0), d;
	int lfd;

	(void)state;
	lfd = tb_net_listen(&l, &port);
	assert_true(lfd >= 0);
	close(lfd);                      /* nobody listens there now */
	d = ep("127.0.0.1", port);
	assert_int_equal(tb_net_dial(&d, 1000), TB_ESYS);
	assert_non_null(strstr(tb_errmsg(), "connect 127.0.0.1:"));
	assert_non_null(strstr(tb_errmsg(), "refused"));
	d = ep("no-such-host.invalid", 1);
	assert_int_equal(tb_net_dial(&d, 1000), TB_ECONFIG);
}

/* A listener whose accept queue is full drops new SYNs: the dial must give
 * up at its deadline. */
static void dial_gives_up_at_its_deadline(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), c[8], n = 0, rc = 0;
	uint64_t t0 = 0;
	tb_endpoint_t d;

	(void)state;
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 0), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
	d = ep("127.0.0.1", ntohs(sa.sin_port));
	while (n < 8) {
		t0 = tb_clock_mono_ns();
		rc = tb_net_dial(&d, 300);
		if (rc < 0)
			break;
		c[n++] = rc;
	}
	assert_int_equal(rc, TB_ETIMEDOUT);
	assert_true(ms_since(t0) >= 290);
	assert_true(ms_since(t0) < 2000);
	while (n > 0)
		close(c[--n]);
	close(lfd);
}

/* -------------------------------------------------------- reads, writes */

static void send_and_receive_exactly(void **state)
{
	char out[] = "0123456789", in[sizeof(out)];
	int a, b;

	(void)state;
	pair(&a, &b);
	assert_int_equal(tb_net_send_all(a, out, sizeof(out), 1000), 0);
	assert_int_equal(tb_net_recv_all(b, in, 4, 1000), 0);
	assert_int_equal(tb_net_recv_all(b, in + 4, sizeof(in) - 4, 1000), 0);
	assert_memory_equal(in, out, sizeof(out));
	/* Nothing more: recv_some says 0 at once, recv_all times out. */
	assert_int_equal(tb_net_recv_some(b, in, sizeof(in), 0), 0);
	assert_int_equal(tb_net_recv_all(b, in, 1, 50), TB_ETIMEDOUT);
	assert_non_null(strstr(tb_errmsg(), "nothing within 50 ms"));
	assert_int_equal(tb_net_send_all(a, out, 3, 1000), 0);
	assert_int_equal(tb_net_recv_some(b, in, sizeof(in), 1000), 3);
	close(a);
	close(b);
}

static void peer_closing_before_or_within_a_read(void **state)
{
	char buf[16];
	int a, b;

	(void)state;
	pair(&a, &b);
	close(a);
	assert_int_equal(tb_net_recv_all(b, buf, 8, 1000), TB_CLOSED);
	assert_int_equal(tb_net_recv_some(b, buf, 8, 1000), TB_CLOSED);
	close(b);

	pair(&a, &b);
	assert_int_equal(tb_net_send_all(a, "abc", 3, 1000), 0);
	close(a);
	assert_int_equal(tb_net_recv_all(b, buf, 8, 1000), TB_EIO);
	assert_non_null(strstr(tb_errmsg(), "after 3 of 8 bytes"));
	/* Writing to a closed peer fails without SIGPIPE. */
	{
		static char big[1 << 20];
		int rc = 0;

		for (int i = 0; i < 8 && rc == 0; i++)
			rc = tb_net_send_all(b, big, sizeof(big), 1000);
		assert_true(rc == TB_ESYS || rc == TB_EIO);
	}
	close(b);
}

/* A peer that trickles one byte every 40 ms never lets a per-wait timeout
 * of 150 ms expire; the per-call deadline still ends the read. */
struct trickle {
	int fd;
	int bytes;
};

static void *trickle_main(void *arg)
{
	struct trickle *t = arg;

	for (int i = 0; i < t->bytes; i++) {
		struct timespec ts = {0, 40 * 1000000L};

		if (send(t->fd, "x", 1, MSG_NOSIGNAL) != 1)
			break;
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void a_deadline_per_call_not_per_wait(void **state)
{
	struct trickle t;
	pthread_t th;
	char buf[64];
	uint64_t t0;
	int a, b;

	(void)state;
	pair(&a, &b);
	t = (struct trickle){.fd = a, .bytes = 20};
	assert_int_equal(pthread_create(&th, NULL, trickle_main, &t), 0);
	t0 = tb_clock_mono_ns();
	assert_int_equal(tb_net_recv_all(b, buf, 20, 150), TB_ETIMEDOUT);
	assert_true(ms_since(t0) >= 145);
	assert_true(ms_since(t0) < 600);
	assert_non_null(strstr(tb_errmsg(), "of 20 bytes within 150 ms"));
	pthread_join(th, NULL);
	close(a);
	close(b);
}

static void send_to_a_peer_that_does_not_read(void **state)
{
	size_t len = 64u << 20;
	char *big = calloc(1, len);
	uint64_t t0;
	int a, b;

	(void)state;
	assert_non_null(big);
	pair(&a, &b);
	t0 = tb_clock_mono_ns();
	assert_int_equal(tb_net_send_all(a, big, len, 200), TB_ETIMEDOUT);
	assert_true(ms_since(t0) >= 195);
	assert_true(ms_since(t0) < 2000);
	assert_non_null(strstr(tb_errmsg(), "in 200 ms"));
	close(a);
	close(b);
	free(big);
}

static void buffered_reader(void **state)
{
	uint8_t rbuf[64], out[100], in[100];
	tb_net_reader_t r;
	int a, b;

	(void)state;
	for (int i = 0; i < 100; i++)
		out[i] = (uint8_t)i;
	pair(&a, &b);
	tb_net_reader_init(&r, b, rbuf, sizeof(rbuf));
	assert_int_equal(tb_net_send_all(a, out, sizeof(out), 1000), 0);
	/* Records smaller and larger than the buffer, across refills. */
	assert_int_equal(tb_net_reader_read(&r, in, 3, 1000), 0);
	assert_int_equal(tb_net_reader_read(&r, in + 3, 90, 1000), 0);
	assert_int_equal(tb_net_reader_read(&r, in + 93, 7, 1000), 0);
	assert_memory_equal(in, out, sizeof(out));
	assert_int_equal(tb_net_reader_read(&r, in, 1, 30), TB_ETIMEDOUT);
	assert_int_equal(tb_net_send_all(a, out, 5, 1000), 0);
	close(a);
	assert_int_equal(tb_net_reader_read(&r, in, 4, 1000), 0);
	assert_int_equal(tb_net_reader_read(&r, in, 4, 1000), TB_EIO);
	assert_int_equal(tb_net_reader_read(&r, in, 4, 1000), TB_CLOSED);
	close(b);
}

static int opt_of(int fd, int level, int name)
{
	int v = -1;
	socklen_t l = sizeof(v);

	assert_int_equal(getsockopt(fd, level, name, &v, &l), 0);
	return v;
}

/* Both ends of a connection carry the desk's options (net.h). */
static void connected_sockets_are_tuned(void **state)
{
	int a, b, fds[2];

	(void)state;
	pair(&a, &b);
	fds[0] = a;
	fds[1] = b;
	for (int i = 0; i < 2; i++) {
		assert_int_equal(opt_of(fds[i], IPPROTO_TCP, TCP_NODELAY), 1);
		assert_int_equal(opt_of(fds[i], SOL_SOCKET, SO_KEEPALIVE), 1);
		assert_int_equal(opt_of(fds[i], IPPROTO_TCP, TCP_KEEPIDLE),
				 TB_NET_KEEPALIVE_S);
		assert_int_equal(opt_of(fds[i], IPPROTO_TCP, TCP_KEEPINTVL),
				 TB_NET_KEEPINTVL_S);
		assert_int_equal(opt_of(fds[i], IPPROTO_TCP, TCP_KEEPCNT),
				 TB_NET_KEEPCNT);
		assert_int_equal(opt_of(fds[i], IPPROTO_TCP, TCP_USER_TIMEOUT),
				 TB_NET_USER_TIMEOUT_MS);
#ifdef SO_BUSY_POLL
		/* Raised only with CAP_NET_ADMIN; never anything else. */
		{
			int bp = opt_of(fds[i], SOL_SOCKET, SO_BUSY_POLL);

			print_message("SO_BUSY_POLL %d\n", bp);
			assert_true(bp == TB_NET_BUSY_POLL_US || bp == 0);
		}
#endif
	}
	close(a);
	close(b);
}

/* A kept connection: usable while nothing is pending on it; not once the
 * peer closed it; a protocol error when bytes came unasked. */
static void idle_connection_checked_without_waiting(void **state)
{
	uint8_t x = 7;
	int a, b;

	(void)state;
	pair(&a, &b);
	assert_int_equal(tb_net_idle_ok(a), 1);
	assert_int_equal(tb_net_send_all(b, &x, 1, 1000), 0);
	usleep(20000);
	assert_int_equal(tb_net_idle_ok(a), TB_EPROTO);
	assert_non_null(strstr(tb_errmsg(), "unasked"));
	close(b);
	usleep(20000);
	assert_int_equal(tb_net_idle_ok(a), 0);
	close(a);
}

/* Records taken where they lie: fill makes them whole in one piece,
 * moving what is buffered to the front when it must; a spinning reader
 * gets the same bytes. */
static void reader_fill_peek_take(void **state)
{
	uint8_t rbuf[64], out[200];
	tb_net_reader_t r;
	int a, b;

	(void)state;
	for (int i = 0; i < 200; i++)
		out[i] = (uint8_t)i;
	pair(&a, &b);
	tb_net_reader_init(&r, b, rbuf, sizeof(rbuf));
	assert_int_equal(tb_net_send_all(a, out, 100, 1000), 0);
	assert_int_equal(tb_net_reader_fill(&r, 40, 1000), 0);
	assert_true(tb_net_reader_avail(&r) >= 40);
	assert_memory_equal(tb_net_reader_peek(&r), out, 40);
	tb_net_reader_take(&r, 40);
	/* 60 more in one piece: what is left moves to the front. */
	assert_int_equal(tb_net_reader_fill(&r, 60, 1000), 0);
	assert_true(tb_net_reader_peek(&r) == rbuf);
	assert_memory_equal(tb_net_reader_peek(&r), out + 40, 60);
	tb_net_reader_take(&r, 60);
	assert_int_equal(tb_net_reader_fill(&r, 65, 1000), TB_EINVAL);
	assert_int_equal(tb_net_reader_fill(&r, 1, 30), TB_ETIMEDOUT);
	tb_net_reader_spin(&r, 200000); /* 200 us */
	assert_int_equal(tb_net_send_all(a, out + 100, 100, 1000), 0);
	for (int off = 100; off < 200; off += 50) {
		assert_int_equal(tb_net_reader_fill(&r, 50, 1000), 0);
		assert_memory_equal(tb_net_reader_peek(&r), out + off, 50);
		tb_net_reader_take(&r, 50);
	}
	assert_int_equal(tb_net_send_all(a, out, 3, 1000), 0);
	close(a);
	assert_int_equal(tb_net_reader_fill(&r, 5, 1000), TB_EIO);
	tb_net_reader_take(&r, tb_net_reader_avail(&r));
	assert_int_equal(tb_net_reader_fill(&r, 1, 1000), TB_CLOSED);
	close(b);
}

struct late_send {
	int fd;
	uint32_t after_ms;
	const void *buf;
	size_t len;
};

static void *late_send_main(void *arg)
{
	struct late_send *l = arg;

	usleep(l->after_ms * 1000u);
	if (tb_net_send_all(l->fd, l->buf, l->len, 1000) != 0)
		return (void *)1;
	return NULL;
}

/* tb_net_reader_wait: one blocking recv() that takes bytes sent while it
 * waits, gives up at its timeout, and leaves every other call on the
 * socket as it was (they pass MSG_DONTWAIT). */
static void reader_waits_in_one_blocking_recv(void **state)
{
	static const uint8_t msg[10] = "0123456789";
	struct late_send l;
	uint8_t rbuf[64];
	tb_net_reader_t r;
	pthread_t th;
	void *ret;
	uint64_t t0;
	int a, b;

	(void)state;
	pair(&a, &b);
	tb_net_reader_init(&r, b, rbuf, sizeof(rbuf));
	/* Left non-blocking (as accepted): nothing, at once. */
	t0 = tb_clock_mono_ns();
	assert_int_equal(tb_net_reader_wait(&r, 2000), 0);
	assert_true(ms_since(t0) < 1000);
	assert_int_equal(tb_net_set_blocking(b), 0);
	assert_int_equal(fcntl(b, F_GETFL) & O_NONBLOCK, 0);
	assert_int_equal(tb_net_reader_wait(&r, 0), 0);
	/* Nothing comes: its timeout. */
	t0 = tb_clock_mono_ns();
	assert_int_equal(tb_net_reader_wait(&r, 60), 0);
	assert_true(ms_since(t0) >= 50);
	assert_true(ms_since(t0) < 5000);
	/* Bytes sent while it waits end the wait. */
	l = (struct late_send){.fd = a, .after_ms = 30, .buf = msg, .len = sizeof(msg)};
	assert_int_equal(pthread_create(&th, NULL, late_send_main, &l), 0);
	t0 = tb_clock_mono_ns();
	assert_int_equal(tb_net_reader_wait(&r, 10000), 1);
	assert_true(ms_since(t0) < 5000);
	assert_int_equal(pthread_join(th, &ret), 0);
	assert_null(ret);
	assert_int_equal(tb_net_reader_avail(&r), sizeof(msg));
	assert_memory_equal(tb_net_reader_peek(&r), msg, sizeof(msg));
	/* Buffered bytes: no wait. */
	assert_int_equal(tb_net_reader_wait(&r, 10000), 1);
	tb_net_reader_take(&r, sizeof(msg));
	/* The other reads keep their deadline on the blocking socket. */
	t0 = tb_clock_mono_ns();
	assert_int_equal(tb_net_reader_fill(&r, 1, 30), TB_ETIMEDOUT);
	assert_true(ms_since(t0) < 5000);
	close(a);
	assert_int_equal(tb_net_reader_wait(&r, 10000), TB_CLOSED);
	close(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(connected_sockets_are_tuned),
		cmocka_unit_test(idle_connection_checked_without_waiting),
		cmocka_unit_test(reader_fill_peek_take),
		cmocka_unit_test(reader_waits_in_one_blocking_recv),
		cmocka_unit_test(resolve_numeric_bracketed_named_and_empty),
		cmocka_unit_test(resolve_refuses_bad_hosts),
		cmocka_unit_test(listen_accept_dial),
		cmocka_unit_test(listen_and_dial_ipv6_with_brackets),
		cmocka_unit_test(dial_refused_and_unresolvable),
		cmocka_unit_test(dial_gives_up_at_its_deadline),
		cmocka_unit_test(send_and_receive_exactly),
		cmocka_unit_test(peer_closing_before_or_within_a_read),
		cmocka_unit_test(a_deadline_per_call_not_per_wait),
		cmocka_unit_test(send_to_a_peer_that_does_not_read),
		cmocka_unit_test(buffered_reader),
	};
	return cmocka_run_group_tests_name("net", tests, NULL, NULL);
}
