/*
 * recovery/server.h - answers recovery-protocol requests (recovery/proto.h)
 * over TCP from the frames a source holds.  Two sources use it: tb-recoveryd
 * (its recent window in memory, then its retransmit store; one source per
 * stream) and the publisher (its retention buffer, publisher.c).
 *
 * Admission: a server cannot be starved by clients without a token.
 *  - A new connection is pending until its HELLO: it has hello_timeout_ms
 *    from accept to send it whole, and bytes do not extend that deadline
 *    (a client sending one byte a second is closed like a silent one).
 *  - Pending connections are few and cheap (one thread watches them all):
 *    at most max_pending in all and max_pending_per_addr from one address;
 *    over either bound the oldest pending one (of that address, or of all)
 *    is closed to make room, so a client that sends its HELLO as soon as
 *    it connects always gets in (a HELLO already there when the
 *    connection is accepted is taken at once).  Of an address opening more
 *    than conn_rate connections a second (burst conn_burst), the rest get
 *    that one look only: closed at once unless a whole HELLO is there, and
 *    never pushing another out (nor answered, when their token is wrong).
 *  - A HELLO with the right token takes one of max_clients slots reserved
 *    for authenticated connections (with a thread of its own); when none is
 *    free it is refused BUSY with a retry delay.  No unauthenticated
 *    connection ever holds such a slot.
 *  - A wrong token is answered only after a delay, auth_delay_ms for an
 *    address's first failure and twice as long for each further one (up to
 *    auth_delay_max_ms; an address's count is forgotten after a quiet
 *    minute), and the connection is then closed: guessing is slowed to a
 *    few tries a second per address, whatever the number of connections,
 *    and counted (auth_failures).
 *  - Every refusal is counted by kind and logged (tb_warn) at most once per
 *    log_interval_ms per kind, with the number of the others since.
 *
 * Requests of an authenticated connection are checked in this order and
 * refused with the first reason that applies: malformed (then the
 * connection is closed: the byte stream cannot be trusted after it), rate
 * limited (per client address, a token bucket; with the retry delay),
 * epoch mismatch (an epoch the source does not hold; with the current
 * epoch), too large (with max_count), too old (with the earliest held),
 * not yet published (with the latest).  A range that is partly published
 * is served up to the latest; the client asks again for the rest.  A range
 * the source lost to damage (a corrupt record in its store) is never an
 * end: an answer that reaches it stops before it (END TRUNCATED), and a
 * request that starts in it is refused LOST with the range's last sequence,
 * so the client gets exactly that range elsewhere, or reports exactly it
 * lost, and asks again after it.  A connection is answered in the version
 * of its HELLO (proto.h); one of version 2, which has no LOST, gets the
 * truncated answer alone.  An answer goes out in as few writes as its size
 * allows: BEGIN, the frames and END of a small one in one write, a large
 * one in buffers of TB_RECOVERY_SERVER_FLUSH bytes.
 *
 * Busy-polling (spin_us, opt-in): a connection thread waiting for its
 * next request (and for the rest of one begun) first tries its socket
 * without sleeping, with tb_cpu_relax between tries, for up to spin_us
 * microseconds of the read's own deadline, and only then waits in poll().
 * A request that comes meanwhile is taken without the scheduler's wake-up
 * (35-45 us on a VM, more than the rest of a small answer), at the price
 * of a core spinning for each connection that spins: for a service on
 * cores of its own.  Every deadline is the same as without it (hello, I/O,
 * idle) and close ends a spinning connection as promptly as a sleeping
 * one.  The sockets have SO_BUSY_POLL (net.h: where the kernel allows,
 * each non-blocking try also polls the NIC's receive queue).
 *
 * Threads: one admission thread, one thread per authenticated connection.
 * The source's callbacks are called from the connection threads,
 * concurrently: they must be thread-safe.  tb_recovery_server_open/close
 * from any one thread; stats from any thread.
 */
#ifndef TB_RECOVERY_SERVER_H
#define TB_RECOVERY_SERVER_H

#include "bus/recovery/proto.h"
#include "bus/recovery/store.h"
#include <tickbus/tickbus.h>

#include <stddef.h>
#include <stdint.h>

/* An answer is written in buffers of this many bytes (or one frame, when
 * a frame is larger). */
#define TB_RECOVERY_SERVER_FLUSH (64u << 10)

/* spin_us: at most this many microseconds, or ALWAYS (spin for as long
 * as the read may wait: the connection's thread never sleeps). */
#define TB_RECOVERY_SERVER_SPIN_MAX 1000000u
#define TB_RECOVERY_SERVER_SPIN_ALWAYS UINT32_MAX

typedef struct tb_recovery_server_source {
	uint32_t stream_id;
	const char *token;
	/* The current epoch and the range held of it ([0, 0] when none
	 * yet; epoch 0 when nothing at all). */
	void (*bounds)(void *sd, uint64_t *epoch, uint64_t *first,
		       uint64_t *last);
	/* Up to `max` frames of the current epoch from `first`, as
	 * tb_store_read: a count (stopping before a damaged range), or
	 * TB_STORE_TOO_OLD / TB_STORE_NOT_YET / TB_STORE_LOST (`first` is
	 * in a damaged range) or a TB_E* code. */
	int (*read)(void *sd, uint64_t first, int max, tb_store_read_fn fn,
		    void *clientd);
	void *sd;
	/* Optional (NULL: a read that says TB_STORE_LOST ends the answer
	 * TRUNCATED, as any other short read): when `seq` of `epoch` lies in
	 * a range the source held but lost to damage, sets [*first, *last]
	 * to that range and returns 1, else 0 (tb_store_lost). */
	int (*lost)(void *sd, uint64_t epoch, uint64_t seq, uint64_t *first,
		    uint64_t *last);
	/* Earlier epochs, for a source that keeps them (NULL: it holds the
	 * current epoch only).  epoch_bounds: 0 with the range held of
	 * `epoch`, or TB_ENOENT when it is not held.  epoch_read: as read,
	 * for `epoch`. */
	int (*epoch_bounds)(void *sd, uint64_t epoch, uint64_t *first,
			    uint64_t *last);
	int (*epoch_read)(void *sd, uint64_t epoch, uint64_t first, int max,
			  tb_store_read_fn fn, void *clientd);
	/* Optional, for a source in memory (NULL: `read` is used): up to
	 * `max` frames of the current epoch from `first` written straight
	 * into the answer, `dst` (`cap` bytes, any alignment), back to back
	 * as they go on the wire (each exactly its length), their bytes in
	 * *len.  A count, 0 when the first frame does not fit in `cap`, or
	 * TB_STORE_TOO_OLD / TB_STORE_NOT_YET (tb_retention_copy).  When it
	 * says too old, `read` is asked. */
	int (*copy)(void *sd, uint64_t first, int max, void *dst, size_t cap,
		    size_t *len);
} tb_recovery_server_source_t;

typedef struct tb_recovery_server_cfg {
	tb_endpoint_t listen;   /* port 0: any free port (tb_recovery_server_port) */
	uint32_t max_count;     /* frames per request; default COUNT_MAX */
	uint32_t rate;          /* requests per second per client address;
				   0 = unlimited (default) */
	uint32_t burst;         /* requests allowed at once; default 2*rate */
	uint32_t io_timeout_ms; /* a request once begun, an answer's write
				   to a reader that stalls; 10000 */
	uint32_t idle_timeout_ms; /* an authenticated connection with no
				   request for this long is closed; 0: kept
				   (default; keepalive finds dead peers) */
	int max_clients;        /* authenticated connections; default 64 */
	/* Admission (see above). */
	uint32_t hello_timeout_ms;   /* 1000 */
	int max_pending;             /* 256 */
	int max_pending_per_addr;    /* 16 */
	uint32_t conn_rate;          /* per address and second; 0 = unlimited;
					default 100 */
	uint32_t conn_burst;         /* default 2*conn_rate */
	uint32_t auth_delay_ms;      /* 200 */
	uint32_t auth_delay_max_ms;  /* 5000 */
	uint32_t log_interval_ms;    /* 1000; 0: log every refusal */
	uint32_t spin_us;            /* busy-poll a connection's next request
					this long before sleeping (above):
					0 (default) = never, up to SPIN_MAX,
					or SPIN_ALWAYS */
} tb_recovery_server_cfg_t;

typedef struct tb_recovery_server_stats {
	uint64_t connections;    /* accepted */
	uint64_t authenticated;  /* HELLOs accepted */
	uint64_t requests;
	uint64_t served;         /* requests answered with frames */
	uint64_t frames;         /* frames sent */
	uint64_t rejects[TB_RECOVERY_PROTO_REJ_MAX + 1]; /* by reason */
	uint64_t auth_failures;  /* wrong tokens */
	uint64_t hello_timeouts; /* no whole HELLO in time */
	uint64_t evicted;        /* pending connections closed for room */
	uint64_t conn_limited;   /* closed at accept: over conn_rate */
	uint64_t busy;           /* authenticated, but every slot taken */
	uint64_t logs_suppressed; /* log lines folded into a later count */
} tb_recovery_server_stats_t;

typedef struct tb_rsrv tb_recovery_server_t;

void tb_recovery_server_cfg_init(tb_recovery_server_cfg_t *cfg);

/* Listens on cfg->listen and serves the `n` sources (copied; their
 * callbacks and `sd` must outlive the server).  Returns 0 or a TB_E* code
 * with a message (address in use, bad address, bad limits). */
int tb_recovery_server_open(tb_recovery_server_t **srv, const tb_recovery_server_cfg_t *cfg,
		 const tb_recovery_server_source_t *src, int n);
/* The port it listens on. */
uint16_t tb_recovery_server_port(const tb_recovery_server_t *srv);
void tb_recovery_server_stats(const tb_recovery_server_t *srv, tb_recovery_server_stats_t *st);
/* Stops accepting, ends every connection, waits for its threads, frees.
 * NULL is a no-op. */
void tb_recovery_server_close(tb_recovery_server_t *srv);

#endif
