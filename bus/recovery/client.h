/*
 * recovery/client.h - asks recovery services (tb-recoveryd, or a publisher's
 * retention endpoint) for the frames of a missing range, over TCP with the
 * recovery protocol (recovery/proto.h).
 *
 * A tb_recovery_client_t keeps one connection to each of its endpoints:
 * dialled and authenticated once (HELLO, WELCOME), then used for every
 * request until it breaks, when it is dialled again.  A subscriber opens
 * one beside its transport and has it connect before the first gap
 * (tb_recovery_client_maintain), so that a gap costs one request on a warm
 * connection, not a TCP handshake and an authentication.
 *
 * tb_recovery_client_get() is the policy: the range is asked for in
 * requests of at most the server's max_count (from its WELCOME), several
 * sent at once (cfg.pipeline) and answered in order; every length and
 * every frame is checked before it is used.  The endpoints are tried in
 * order; an endpoint that is down, times out, answers garbage or rejects
 * is left for the next; a round over all of them that made no progress is
 * retried after a backoff that doubles (a rate-limited or busy reject's
 * retry delay is honoured), until the whole range is delivered or the
 * deadline passes.  An endpoint that lost part of the range to damage
 * (a corrupt record in its store: the LOST reject, with the range's end)
 * is left for the next, which is asked for the range first.  When every
 * endpoint that answers says "too old" or "lost", the part no one holds
 * is reported lost (`loss`), exactly, and the rest is fetched.
 * The I/O timeout is a deadline per step (net.h): the dial, a request's
 * write, and the read of each protocol message and of each frame.
 *
 * tb_recovery_client_fetch() is the same for a caller without a client of
 * its own (a connection per call); tb_recovery_client_fetch_one() is one
 * request on a connection of its own, for tests and tools.
 *
 * The quick fetch (tb_recovery_client_quick_start, _step) is the one
 * non-blocking path: a range that fits in one request, asked on a kept
 * connection that is up and idle, by a thread that cannot wait (the
 * subscriber's poll thread, which is waiting on the gap anyway).  The
 * request is one send(); the answer is read one recv() per step at most
 * and its frames are checked and handed over where they lie in the
 * connection's buffer.  Anything the quick path cannot settle (no idle
 * connection, a REJECT, an answer cut short, a broken or silent service)
 * is given back for tb_recovery_client_get and its policy, from the first
 * sequence not yet delivered.
 *
 * Threads: the blocking calls are for a background thread (the
 * subscriber's recovery thread, tb-recoveryd); never on a hot path.  A
 * client is used by one thread at a time, and two threads that share one
 * pass it by its claim: the one that holds it (tb_recovery_client_claim,
 * or a quick fetch from its start until its step returns other than 0)
 * is the only one to touch the client; a claim that fails means the other
 * thread holds it.  No global state.
 */
#ifndef TB_RECOVERY_CLIENT_H
#define TB_RECOVERY_CLIENT_H

#include "bus/frame.h"
#include "bus/recovery/proto.h"
#include <tickbus/tickbus.h>

#include <stdint.h>

/* An answer that is a REJECT: tb_recovery_client_fetch_one returns this and fills
 * *reject.  Below the TB_E* range, like the store's read conditions. */
#define TB_RECOVERY_CLIENT_REJECTED (-42)

/* Requests one connection has in flight at most, by default. */
#define TB_RECOVERY_CLIENT_PIPELINE 4

typedef struct tb_recovery_client_cfg {
	const tb_endpoint_t *endpoints; /* tried in this order (copied by open) */
	int n_endpoints;
	uint32_t stream_id;
	const char *token;          /* copied by open */
	uint32_t io_timeout_ms;     /* dial, send, each message or frame */
	uint32_t deadline_ms;       /* the whole fetch */
	uint32_t backoff_ms;        /* first pause after a failed round, and
				       before dialling again an endpoint that
				       could not be reached */
	uint32_t backoff_max_ms;
	uint32_t pipeline;          /* requests in flight; 0: the default */
	uint32_t spin_us;           /* busy-poll for an answer this long
				       before sleeping in poll() (net.h:
				       tb_net_reader_spin); 0: never */
	/* Stop early (non-zero) when the owner shuts down; may be NULL. */
	int (*cancelled)(void *clientd);
	/* Fetch up to the latest published rather than to `last`: an answer
	 * that stops short at the latest, or a "not yet published", ends the
	 * fetch with success (a late joiner's catch-up on a quiet stream). */
	int until_latest;
} tb_recovery_client_cfg_t;

/* Called for each frame, in order; non-zero stops the fetch (it then
 * returns TB_ESTATE).  `frame` is whole, checked and 8-byte aligned. */
typedef int (*tb_recovery_client_frame_fn)(void *clientd, const tb_frame_hdr_t *frame);
/* Called when [first, last] is given up as lost (before later frames). */
typedef void (*tb_recovery_client_loss_fn)(void *clientd, uint64_t first,
				   uint64_t last);

typedef struct tb_recovery_client_stats {
	uint64_t requests;   /* requests made (a dial that failed counts as
				one: the endpoint was asked and did not
				answer) */
	uint64_t rejects;    /* REJECT answers */
	uint64_t failures;   /* endpoints down, timed out or malformed */
	uint64_t frames;     /* frames delivered */
	uint64_t lost;       /* sequences reported lost */
	uint64_t dials;      /* connections made (HELLO answered) */
	uint64_t epoch;      /* the epoch fetched from (the service's newest,
				when asked for epoch 0) */
} tb_recovery_client_stats_t;

typedef struct tb_recovery_client tb_recovery_client_t;

/* Sets timeouts and backoff to their defaults (1000, 5000, 10, 500 ms). */
void tb_recovery_client_cfg_init(tb_recovery_client_cfg_t *cfg);

/* A client of cfg's endpoints, none connected yet.  0, or TB_EINVAL /
 * TB_ENOMEM with a message. */
int tb_recovery_client_open(tb_recovery_client_t **c,
			    const tb_recovery_client_cfg_t *cfg);
/* Closes every connection and frees.  NULL is a no-op. */
void tb_recovery_client_close(tb_recovery_client_t *c);

/* Sets until_latest (see the cfg) for the fetches that follow. */
void tb_recovery_client_until_latest(tb_recovery_client_t *c, int on);

/*
 * For the owner's idle time: checks that each kept connection is still
 * open (closing one the service closed or broke), and dials and
 * authenticates each endpoint that has none, unless one failed to answer
 * less than its backoff ago (which doubles up to backoff_max_ms with each
 * failure).  Waits at most io_timeout_ms per endpoint it dials.  Returns
 * the number of endpoints connected.
 */
int tb_recovery_client_maintain(tb_recovery_client_t *c);

/*
 * Fetches [first, last] of `epoch` with the policy above, on the kept
 * connections.  Epoch 0 asks for the newest epoch the first service to
 * answer holds (stats->epoch says which it was): a subscriber that has no
 * epoch of its own yet.  Returns 0 when every sequence was delivered or
 * reported lost through `loss` (stats say which), TB_ETIMEDOUT when the
 * deadline passed first (*next is the first sequence neither delivered
 * nor reported), TB_ESTATE when cancelled or stopped by `fn`, TB_EINVAL
 * for bad arguments.
 */
int tb_recovery_client_get(tb_recovery_client_t *c, uint64_t epoch,
			   uint64_t first, uint64_t last,
			   tb_recovery_client_frame_fn fn,
			   tb_recovery_client_loss_fn loss, void *clientd,
			   tb_recovery_client_stats_t *stats, uint64_t *next);

/* tb_recovery_client_get with a client of its own, opened and closed
 * around it. */
int tb_recovery_client_fetch(const tb_recovery_client_cfg_t *cfg, uint64_t epoch,
		     uint64_t first, uint64_t last, tb_recovery_client_frame_fn fn,
		     tb_recovery_client_loss_fn loss, void *clientd,
		     tb_recovery_client_stats_t *stats, uint64_t *next);

/*
 * One request to `ep` on a connection of its own (HELLO with `token`,
 * WELCOME, REQUEST, the answer): frames [req->first, req->first +
 * req->count) go to `fn` in order.  Returns the number of frames delivered
 * (which is less than req->count only when the server truncated the
 * answer), or TB_RECOVERY_CLIENT_REJECTED (*reject filled; the HELLO or the
 * request was refused), TB_ESYS (cannot connect), TB_ECONFIG (the endpoint
 * does not resolve), TB_ETIMEDOUT, TB_EIO (connection closed early),
 * TB_EPROTO / TB_EFORMAT (a malformed answer), TB_ESTATE (fn stopped it);
 * with a message.  Frames delivered before a failure stay delivered:
 * *delivered says how many (may be NULL).
 */
int tb_recovery_client_fetch_one(const tb_endpoint_t *ep, const char *token,
			 const tb_recovery_proto_request_t *req,
			 uint32_t io_timeout_ms, tb_recovery_client_frame_fn fn,
			 void *clientd, tb_recovery_proto_reject_t *reject,
			 uint64_t *delivered);

/* Who holds a shared client (see Threads above). */
enum { TB_RECOVERY_CLIENT_FREE = 0, TB_RECOVERY_CLIENT_BACKGROUND = 1,
       TB_RECOVERY_CLIENT_QUICK = 2 };

/* The background thread's claim, around maintain and get: 1 when taken, 0
 * when a quick fetch holds the client.  Never blocks. */
int tb_recovery_client_claim(tb_recovery_client_t *c);
/* Gives back a claim taken by tb_recovery_client_claim. */
void tb_recovery_client_unclaim(tb_recovery_client_t *c);

/*
 * Starts a quick fetch of [first, last] of `epoch` (> 0): claims the client,
 * and sends one REQUEST, without waiting, on the first endpoint whose kept
 * connection is up, if the range fits in one request there.  Returns 0
 * (the caller now holds the client until its step returns other than 0)
 * or TB_EBUSY without a message when it cannot (client claimed, no
 * connection up, range too large, the socket would block: ask with
 * tb_recovery_client_get instead; a connection a partial send spoiled is
 * closed).
 */
int tb_recovery_client_quick_start(tb_recovery_client_t *c, uint64_t epoch,
				   uint64_t first, uint64_t last);

/*
 * One step of the quick fetch: at most one recv() (none while a whole
 * frame is buffered), then up to `limit` frames, checked as
 * tb_recovery_client_get checks them, to `fn` in order (its result is
 * ignored: every frame of the answer is taken).  Returns 0 while the
 * answer is still coming, 1 when all of [first, last] was delivered, or
 * TB_EBUSY when the rest is the caller's to fetch with
 * tb_recovery_client_get (a REJECT, an answer cut short: the connection
 * is kept), or TB_EIO / TB_EPROTO / TB_EFORMAT / TB_ETIMEDOUT (no byte for
 * io_timeout_ms) with a message (the connection is closed).  Whenever it
 * returns other than 0 the claim is given back, and *next is the first
 * sequence not delivered.
 */
int tb_recovery_client_quick_step(tb_recovery_client_t *c,
				  tb_recovery_client_frame_fn fn, void *clientd,
				  int limit, uint64_t *next);

#endif
