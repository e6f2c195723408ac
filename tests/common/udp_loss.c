/*
 * udp_loss.c - the udp loss interposer (see tests/common/udp_loss.h): the
 * C library's receive calls, wrapped, losing a seeded share of the tickbus
 * data datagrams that arrive on multicast sockets.
 *
 * A lost datagram is taken out of what the call returns as if the kernel
 * had never delivered it: recvmmsg moves the datagrams after it down one
 * slot (payload, source address, ancillary data and flags, into the
 * caller's buffers of that slot); recvmsg, recvfrom and recv receive again.
 * A call that lost everything it received receives again too, so a
 * non-blocking caller then sees EAGAIN, as it would have with nothing
 * sent, and a blocking one waits for the next datagram.
 *
 * Built two ways by the Makefile: $(BUILD)/tests/libtb_udp_loss.so for
 * LD_PRELOAD (without sanitizers, so that any program can load it), and
 * the plain object linked into test_transport_udp.
 */
#include "tests/common/udp_loss.h"
#include "tests/common/rng.h"

#include "bus/barrier.h"
#include "bus/transport/packet.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

typedef int (*recvmmsg_fn)(int, struct mmsghdr *, unsigned int, int,
			   struct timespec *);
typedef ssize_t (*recvmsg_fn)(int, struct msghdr *, int);
typedef ssize_t (*recvfrom_fn)(int, void *, size_t, int, struct sockaddr *,
			       socklen_t *);
typedef ssize_t (*recv_fn)(int, void *, size_t, int);

static recvmmsg_fn real_recvmmsg;
static recvmsg_fn real_recvmsg;
static recvfrom_fn real_recvfrom;
static recv_fn real_recv;

/* Set by udp_loss_arm before any receive it is to act on; the receivers
 * only read them.  Relaxed: arming happens before the receiving threads
 * start (or, in a unit test, between receives on the same thread). */
static _Atomic uint64_t loss_threshold; /* lose when a draw is below; 0 = off */
static _Atomic uint64_t loss_rng;       /* splitmix64 state */
static _Atomic uint64_t loss_dropped;
static int loss_log = -1;
static char loss_err[512];

static void resolve(void)
{
	/* The next definitions after this one: the C library's, or the ASan
	 * runtime's interceptors when it sits between. */
	real_recvmmsg = (recvmmsg_fn)dlsym(RTLD_NEXT, "recvmmsg");
	real_recvmsg = (recvmsg_fn)dlsym(RTLD_NEXT, "recvmsg");
	real_recvfrom = (recvfrom_fn)dlsym(RTLD_NEXT, "recvfrom");
	real_recv = (recv_fn)dlsym(RTLD_NEXT, "recv");
}

static int fail(const char *fmt, const char *a, const char *b)
{
	snprintf(loss_err, sizeof(loss_err), fmt, a, b);
	return -1;
}

int udp_loss_arm(void)
{
	const char *p = getenv(UDP_LOSS_ENV_RATE);
	const char *seed = getenv(UDP_LOSS_ENV_SEED);
	const char *log = getenv(UDP_LOSS_ENV_LOG);
	uint64_t s = 1;
	double prob;
	char *end;

	tb_atomic_store_relaxed(&loss_threshold, 0);
	tb_atomic_store_relaxed(&loss_dropped, 0);
	if (loss_log >= 0)
		close(loss_log);
	loss_log = -1;
	if (!p || !*p)
		return 0;
	errno = 0;
	prob = strtod(p, &end);
	if (errno || *end || !(prob >= 0.0 && prob <= 1.0))
		return fail("udp_loss: %s='%s' is not a probability between 0 "
			    "and 1", UDP_LOSS_ENV_RATE, p);
	if (seed && *seed) {
		errno = 0;
		s = strtoull(seed, &end, 0);
		if (errno || *end || *seed == '-')
			return fail("udp_loss: %s='%s' is not an unsigned number",
				    UDP_LOSS_ENV_SEED, seed);
	}
	if (log && *log) {
		loss_log = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (loss_log < 0)
			return fail("udp_loss: cannot open %s %s", UDP_LOSS_ENV_LOG,
				    log);
	}
	tb_atomic_store_relaxed(&loss_rng, s);
	tb_atomic_store_relaxed(&loss_threshold, prob >= 1.0 ? UINT64_MAX :
				(uint64_t)ldexp(prob, 64));
	return 0;
}

const char *udp_loss_error(void)
{
	return loss_err;
}

uint64_t udp_loss_dropped(void)
{
	return tb_atomic_load_relaxed(&loss_dropped);
}

/* Loaded by LD_PRELOAD: armed from the environment, or the program ends
 * here (a test that asked for loss must not run without it). */
__attribute__((constructor)) static void udp_loss_load(void)
{
	resolve();
	if (udp_loss_arm() < 0) {
		fprintf(stderr, "%s\n", loss_err);
		_exit(2);
	}
}

/* 1 when `fd` is a socket bound to an IPv4 multicast group. */
static int on_group(int fd)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);

	if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0 ||
	    len < sizeof(sa) || sa.sin_family != AF_INET)
		return 0;
	return IN_MULTICAST(ntohl(sa.sin_addr.s_addr));
}

/* 1 when the received datagram (its first bytes in `head`, `len` in all)
 * is a data datagram and the draw loses it; logs the loss. */
static int lose(const void *head, size_t len)
{
	tb_packet_hdr_t p;
	char line[64];
	uint64_t z;
	int n;

	if (len < TB_PACKET_HDR_LEN)
		return 0;
	memcpy(&p, head, sizeof(p));
	if (p.magic != TB_PACKET_MAGIC || p.flags || p.count == 0)
		return 0;
	/* One step of the shared generator per data datagram. */
	z = tb_atomic_fetch_add_relaxed(&loss_rng, RNG_SPLITMIX64_GAMMA) +
	    RNG_SPLITMIX64_GAMMA;
	if (rng_splitmix64_mix(z) >= tb_atomic_load_relaxed(&loss_threshold))
		return 0;
	tb_atomic_fetch_add_relaxed(&loss_dropped, 1);
	if (loss_log >= 0) {
		n = snprintf(line, sizeof(line), "drop %llu %u\n",
			     (unsigned long long)p.first_seq, (unsigned)p.count);
		if (write(loss_log, line, (size_t)n) != n)
			return 1; /* the loss stands; the test sees the log short */
	}
	return 1;
}

static int armed(int fd, int flags)
{
	return tb_atomic_load_relaxed(&loss_threshold) != 0 &&
	       !(flags & MSG_PEEK) && on_group(fd);
}

/* Copies up to `len` bytes from the buffers of `from` to those of `to`;
 * returns how many fit. */
static size_t iov_move(const struct msghdr *to, const struct msghdr *from,
		       size_t len)
{
	size_t ti = 0, toff = 0, fi = 0, foff = 0, done = 0;

	while (done < len && ti < to->msg_iovlen && fi < from->msg_iovlen) {
		const struct iovec *t = &to->msg_iov[ti], *f = &from->msg_iov[fi];
		size_t n = len - done;

		if (n > t->iov_len - toff)
			n = t->iov_len - toff;
		if (n > f->iov_len - foff)
			n = f->iov_len - foff;
		memcpy((char *)t->iov_base + toff, (const char *)f->iov_base + foff, n);
		done += n;
		toff += n;
		foff += n;
		if (toff == t->iov_len)
			ti++, toff = 0;
		if (foff == f->iov_len)
			fi++, foff = 0;
	}
	return done;
}

/* The datagram of `m` (`len` bytes received) is lost. */
static int lose_msg(const struct msghdr *m, size_t len)
{
	uint8_t head[TB_PACKET_HDR_LEN];
	struct iovec iov = {head, sizeof(head)};
	struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1};

	if (len < sizeof(head) || iov_move(&h, m, sizeof(head)) < sizeof(head))
		return 0;
	return lose(head, len);
}

int recvmmsg(int fd, struct mmsghdr *v, unsigned int vlen, int flags,
	     struct timespec *tmo)
{
	if (!real_recvmmsg)
		resolve();
	for (;;) {
		int got = real_recvmmsg(fd, v, vlen, flags, tmo), kept = 0;

		if (got <= 0 || !armed(fd, flags))
			return got;
		for (int i = 0; i < got; i++) {
			struct msghdr *to = &v[kept].msg_hdr;
			const struct msghdr *from = &v[i].msg_hdr;

			if (lose_msg(from, v[i].msg_len))
				continue;
			if (kept != i) {
				v[kept].msg_len = (unsigned)iov_move(to, from,
								     v[i].msg_len);
				if (to->msg_name && from->msg_name) {
					memcpy(to->msg_name, from->msg_name,
					       from->msg_namelen);
					to->msg_namelen = from->msg_namelen;
				}
				if (to->msg_control && from->msg_control) {
					if (to->msg_controllen > from->msg_controllen)
						to->msg_controllen = from->msg_controllen;
					memcpy(to->msg_control, from->msg_control,
					       to->msg_controllen);
				}
				to->msg_flags = from->msg_flags;
			}
			kept++;
		}
		if (kept > 0)
			return kept;
	}
}

ssize_t recvmsg(int fd, struct msghdr *m, int flags)
{
	socklen_t namelen = m->msg_namelen;
	size_t controllen = m->msg_controllen;

	if (!real_recvmsg)
		resolve();
	for (;;) {
		ssize_t n = real_recvmsg(fd, m, flags);

		if (n < 0 || !armed(fd, flags) || !lose_msg(m, (size_t)n))
			return n;
		m->msg_namelen = namelen;
		m->msg_controllen = controllen;
	}
}

ssize_t recvfrom(int fd, void *buf, size_t len, int flags,
		 struct sockaddr *addr, socklen_t *alen)
{
	socklen_t cap = alen ? *alen : 0;

	if (!real_recvfrom)
		resolve();
	for (;;) {
		ssize_t n = real_recvfrom(fd, buf, len, flags, addr, alen);

		if (n < 0 || !armed(fd, flags) ||
		    !lose(buf, (size_t)n < len ? (size_t)n : len))
			return n;
		if (alen)
			*alen = cap;
	}
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	if (!real_recv)
		resolve();
	for (;;) {
		ssize_t n = real_recv(fd, buf, len, flags);

		if (n < 0 || !armed(fd, flags) ||
		    !lose(buf, (size_t)n < len ? (size_t)n : len))
			return n;
	}
}
