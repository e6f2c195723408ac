/*
 * net.h - TCP for tickbus: the one home of sockets for the two TCP
 * protocols, the rc control connection (transport/rc_pub.c, rc_sub.c) and
 * gap recovery (recovery/client.c, recovery/server.c).  The datagram
 * transports (udp, ud's IGMP join) keep their own sockets: they share
 * nothing with a byte stream.
 *
 * Endpoints.  A tb_endpoint_t's host is a numeric IPv4 or IPv6 address,
 * with or without brackets ("[::1]" as in a config file), or a name for
 * the resolver; "" means any address to a listener and the loopback to a
 * dialler.  A dialler tries each address the name resolves to, in order.
 *
 * Sockets.  Every socket made here is non-blocking and close-on-exec.
 * Every connected one, dialled or accepted, is tuned as a trading desk
 * expects of a request/response connection (tb_net_tune):
 *   TCP_NODELAY     both protocols send small messages and wait for the
 *                   answer, which Nagle's algorithm would hold back for up
 *                   to 40 ms;
 *   TCP_QUICKACK    the first bytes are acknowledged at once rather than
 *                   after the delayed-ACK timer (Linux treats it as a hint
 *                   and may fall back to delayed ACKs later);
 *   SO_BUSY_POLL    TB_NET_BUSY_POLL_US: a read with nothing queued
 *                   polls the NIC's receive queue itself (a blocking one
 *                   for up to that long before it sleeps; a non-blocking
 *                   one once, which a reader spinning on the socket,
 *                   tb_net_reader_spin, turns into a busy-poll of the
 *                   NIC).  Raising it needs CAP_NET_ADMIN and a NIC driver
 *                   with NAPI; without either (or on the loopback, which
 *                   has no queue to poll) it is skipped or does nothing;
 *   SO_KEEPALIVE    a kept connection to a peer that vanished (host down,
 *                   cable out) is found broken within TB_NET_KEEPALIVE_S
 *                   + 3 probes TB_NET_KEEPINTVL_S apart, instead of the
 *                   two hours of the kernel's default;
 *   TCP_USER_TIMEOUT data unacknowledged for TB_NET_USER_TIMEOUT_MS
 *                   breaks the connection, so a write to a dead peer
 *                   fails instead of retransmitting for 15 minutes.
 * Each is best effort: without it a connection is slower to notice or to
 * answer, not wrong.  A listener has SO_REUSEADDR (a restarted publisher
 * rebinds its control port at once) and a backlog of TB_NET_BACKLOG,
 * which the kernel caps at net.core.somaxconn: a flood of connections
 * waits in it rather than being refused by the kernel before the server
 * can judge it.
 *
 * Timeouts: one policy.  A call that may wait takes `timeout_ms`, a
 * deadline for the whole call from the moment it starts, not a bound on
 * each wait inside it: tb_net_dial for the connection (every address
 * tried), tb_net_send_all for the last byte to leave, tb_net_recv_all and
 * tb_net_reader_read for the last byte asked for.  0 means do not wait.
 * A protocol therefore states its timeouts per message, which is what a
 * peer can be held to.
 *
 * Errors: the set-up convention (error.h), a negative TB_* code with a
 * message; conditions a caller expects (no connection waiting, nothing to
 * read yet, the peer closed between messages) are codes without a message.
 *
 * Threads: no shared state; any thread may call any function, one thread
 * at a time per socket (per reader).  Every call here is a system call:
 * never on a hot path.
 */
#ifndef TB_NET_H
#define TB_NET_H

#include <tickbus/tickbus.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Room for a peer's address as text: INET6_ADDRSTRLEN. */
#define TB_NET_ADDR_MAX 46

/* Socket tuning (see above). */
#define TB_NET_BUSY_POLL_US 50
#define TB_NET_KEEPALIVE_S 10
#define TB_NET_KEEPINTVL_S 2
#define TB_NET_KEEPCNT 3
#define TB_NET_USER_TIMEOUT_MS 10000
#define TB_NET_BACKLOG 1024

/* Applies the connected-socket options above to `fd` (best effort). */
void tb_net_tune(int fd);

/*
 * Resolves `ep` for a listener (`passive`: "" = any address) or a dialler
 * ("" = loopback) into *ss / *len, the first address the resolver gives.
 * Returns 0, TB_ECONFIG for a host that does not resolve, or TB_ESYS when
 * the resolver itself failed (try again later).
 */
int tb_net_resolve(const tb_endpoint_t *ep, int passive,
		   struct sockaddr_storage *ss, socklen_t *len);

/*
 * Connects to `ep` within timeout_ms.  Returns the connected socket (>= 0),
 * or TB_ECONFIG (does not resolve), TB_ETIMEDOUT (no answer in time),
 * TB_ESYS (refused, unreachable, ...), with a message naming the endpoint.
 */
int tb_net_dial(const tb_endpoint_t *ep, uint32_t timeout_ms);

/*
 * A dial that does not wait, for an owner that has other work meanwhile
 * (a recovery thread keeping its connections up): starts connecting to the
 * first address `ep` resolves to that takes a connect.  Returns the socket
 * (>= 0, connecting), or as tb_net_dial.  Then tb_net_dial_done.
 */
int tb_net_dial_start(const tb_endpoint_t *ep);

/* Whether the connection tb_net_dial_start began is made, without
 * waiting: 1 (tuned as tb_net_dial's), 0 (not yet), or TB_ESYS with a
 * message naming `ep` (refused, unreachable...; close it). */
int tb_net_dial_done(int fd, const tb_endpoint_t *ep);

/*
 * Listens on `ep` (port 0: any free port).  Returns the listening socket
 * (>= 0) and, when `port` is not NULL, the port it got; or TB_ECONFIG
 * (does not resolve), TB_EBUSY (address in use), TB_ESYS, with a message.
 */
int tb_net_listen(const tb_endpoint_t *ep, uint16_t *port);

/*
 * Takes one connection waiting on listener `lfd`, without waiting.  Returns
 * its socket (>= 0) with the peer's address as text in `peer` (when not
 * NULL; `peer_len` bytes, "?" if not IP), TB_NOT_CONNECTED when none is
 * waiting (no message), or TB_ESYS (out of descriptors, ...).
 */
int tb_net_accept(int lfd, char *peer, size_t peer_len);

/*
 * Sends all `len` bytes within timeout_ms.  Returns 0, TB_ETIMEDOUT (the
 * peer is not reading), or TB_ESYS / TB_EIO (the connection broke), with a
 * message.  Never raises SIGPIPE.
 */
int tb_net_send_all(int fd, const void *buf, size_t len, uint32_t timeout_ms);

/*
 * Reads what is there, up to `cap` bytes, waiting up to timeout_ms for the
 * first.  Returns the count (> 0), 0 when nothing came in time (no
 * message), TB_CLOSED when the peer closed (no message), or TB_ESYS.
 */
int tb_net_recv_some(int fd, void *buf, size_t cap, uint32_t timeout_ms);

/*
 * Reads exactly `len` bytes within timeout_ms.  Returns 0; TB_CLOSED when
 * the peer closed before the first byte (a clean end between messages, no
 * message); TB_EIO when it closed after some; TB_ETIMEDOUT; TB_ESYS.
 */
int tb_net_recv_all(int fd, void *buf, size_t len, uint32_t timeout_ms);

/*
 * Whether the connection `fd` is still usable for a new request, without
 * waiting: 1 when nothing is pending on it, 0 when the peer closed it or it
 * broke (its owner should close it and dial again), and TB_EPROTO when
 * bytes arrived that nobody asked for (the peer is not following the
 * protocol).  For a client that keeps a connection between requests.
 */
int tb_net_idle_ok(int fd);

/* A buffered reader: one recv() fills `buf`, and messages and frames are
 * taken from it, so a stream of small records costs one system call per
 * buffer, not per record. */
typedef struct tb_net_reader {
	int fd;
	uint8_t *buf;
	size_t cap;
	size_t have, off;   /* buf[off, have) is read and not yet taken */
	uint64_t spin_ns;   /* tb_net_reader_fill: busy-poll this long */
	uint32_t rcvtimeo_ms; /* tb_net_reader_wait: SO_RCVTIMEO as last set */
	int rcvtimeo_set;
} tb_net_reader_t;

/* Reads socket `fd` through `buf` (`cap` bytes, owned by the caller). */
void tb_net_reader_init(tb_net_reader_t *r, int fd, void *buf, size_t cap);

/* tb_net_reader_fill tries the socket without sleeping for up to
 * `spin_ns` before it waits in poll(): an answer expected within
 * microseconds is taken without the scheduler's wake-up, at the price of
 * a core that spins meanwhile (the loopback and most NICs cannot
 * busy-poll for us: SO_BUSY_POLL above).  0 (the default): never. */
static inline void tb_net_reader_spin(tb_net_reader_t *r, uint64_t spin_ns)
{
	r->spin_ns = spin_ns;
}

/* One look at the socket without waiting, for an owner that busy-polls
 * it (the recovery server's spin_us): what came is added to the buffer.
 * Returns the bytes added (> 0), 0 when none are there yet (or the buffer
 * is full), TB_CLOSED when the peer closed (no message), or TB_ESYS. */
int tb_net_reader_try(tb_net_reader_t *r);

/* Clears O_NONBLOCK on `fd`, for tb_net_reader_wait (every other read
 * and write here passes MSG_DONTWAIT, so they behave the same).  0 or
 * TB_ESYS. */
int tb_net_set_blocking(int fd);

/*
 * Waits up to timeout_ms (> 0) for bytes when none are buffered, in one
 * blocking recv() with SO_RCVTIMEO, on a socket that tb_net_set_blocking
 * made blocking: an idle peer's next request then costs its reader one
 * system call when it comes, where recv(), poll() and recv() cost three
 * (the last two after the wake-up).  Returns 1 when bytes are buffered,
 * 0 when none came (timed out, a signal, or a socket left non-blocking:
 * the caller waits on as it would have), TB_CLOSED, or TB_ESYS.  Setting
 * SO_RCVTIMEO costs a system call only when timeout_ms changes, and
 * before the wait.
 */
int tb_net_reader_wait(tb_net_reader_t *r, uint32_t timeout_ms);

/* tb_net_recv_all through the reader's buffer: the same results. */
int tb_net_reader_read(tb_net_reader_t *r, void *dst, size_t len,
		       uint32_t timeout_ms);

/*
 * Makes `n` bytes (at most r->cap) readable in one piece at
 * tb_net_reader_peek(r), reading within timeout_ms; what is buffered moves
 * to the start of the buffer first when the rest would not fit behind it.
 * So a record can be checked where it lies, without a copy.  Returns 0, or
 * what tb_net_recv_all would (TB_CLOSED before any of the n bytes, TB_EIO
 * after some, TB_ETIMEDOUT, TB_ESYS), or TB_EINVAL when n > r->cap.
 */
int tb_net_reader_fill(tb_net_reader_t *r, size_t n, uint32_t timeout_ms);

/* The buffered bytes not yet taken, and how many there are. */
static inline const uint8_t *tb_net_reader_peek(const tb_net_reader_t *r)
{
	return r->buf + r->off;
}

static inline size_t tb_net_reader_avail(const tb_net_reader_t *r)
{
	return r->have - r->off;
}

/* Takes `n` of the buffered bytes (n <= tb_net_reader_avail). */
static inline void tb_net_reader_take(tb_net_reader_t *r, size_t n)
{
	r->off += n;
}

#endif
