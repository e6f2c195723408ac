/*
 * recovery/client.h - asks recovery services (tb-recoveryd, or a publisher's
 * retention endpoint) for the frames of a missing range, over TCP with the
 * recovery protocol (recovery/proto.h).
 *
 * tb_recovery_client_fetch_one() is one request to one endpoint: connect, send,
 * read RESPONSE_BEGIN, the frames and RESPONSE_END (or a REJECT), every
 * length and every frame checked before it is used.  The I/O timeout is a
 * deadline per step (net.h): the connection, the request's write, and the
 * read of each protocol message and of each frame.
 *
 * tb_recovery_client_fetch() is the policy around it: the range is asked for in
 * requests of at most TB_RECOVERY_PROTO_COUNT_MAX (or the server's max_count), the
 * endpoints are tried in order, an endpoint that is down, times out,
 * answers garbage or rejects is left for the next, a round over all of them
 * that made no progress is retried after a backoff that doubles (a
 * rate-limited reject's retry delay is honoured), until the whole range is
 * delivered or the deadline passes.  When every endpoint says "too old",
 * the part no one holds is reported lost (`loss`) and the rest is fetched.
 *
 * Threads: blocking calls for a background thread (the subscriber's
 * recovery thread, tb-recoveryd); never on a hot path.  No global state.
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

typedef struct tb_recovery_client_cfg {
	const tb_endpoint_t *endpoints; /* tried in this order */
	int n_endpoints;
	uint32_t stream_id;
	const char *token;
	uint32_t io_timeout_ms;     /* connect, send, each message or frame */
	uint32_t deadline_ms;       /* the whole fetch */
	uint32_t backoff_ms;        /* first pause after a failed round */
	uint32_t backoff_max_ms;
	/* Stop early (non-zero) when the owner shuts down; may be NULL. */
	int (*cancelled)(void *clientd);
	/* Fetch up to the latest published rather than to `last`: an answer
	 * that stops short at the latest, or a "not yet published", ends the
	 * fetch with success (a late joiner's catch-up on a quiet stream). */
	int until_latest;
} tb_recovery_client_cfg_t;

/* Called for each frame, in order; non-zero stops the fetch (it then
 * returns TB_ESTATE).  `frame` is whole and checked. */
typedef int (*tb_recovery_client_frame_fn)(void *clientd, const tb_frame_hdr_t *frame);
/* Called when [first, last] is given up as lost (before later frames). */
typedef void (*tb_recovery_client_loss_fn)(void *clientd, uint64_t first,
				   uint64_t last);

typedef struct tb_recovery_client_stats {
	uint64_t requests;   /* requests sent */
	uint64_t rejects;    /* REJECT answers */
	uint64_t failures;   /* endpoints down, timed out or malformed */
	uint64_t frames;     /* frames delivered */
	uint64_t lost;       /* sequences reported lost */
} tb_recovery_client_stats_t;

/* Sets timeouts and backoff to their defaults (1000, 5000, 10, 500 ms). */
void tb_recovery_client_cfg_init(tb_recovery_client_cfg_t *cfg);

/*
 * One request to `ep`: frames [req->first, req->first + req->count) go to
 * `fn` in order.  Returns the number of frames delivered (which is less
 * than req->count only when the server truncated the answer), or
 * TB_RECOVERY_CLIENT_REJECTED (*reject filled), TB_ESYS (cannot connect),
 * TB_ECONFIG (the endpoint does not resolve), TB_ETIMEDOUT, TB_EIO
 * (connection closed early), TB_EPROTO / TB_EFORMAT
 * (a malformed answer), TB_ESTATE (fn stopped it); with a message.
 * Frames delivered before a failure stay delivered: *delivered says how
 * many (may be NULL).
 */
int tb_recovery_client_fetch_one(const tb_endpoint_t *ep, const tb_recovery_proto_request_t *req,
			 uint32_t io_timeout_ms, tb_recovery_client_frame_fn fn,
			 void *clientd, tb_recovery_proto_reject_t *reject,
			 uint64_t *delivered);

/*
 * Fetches [first, last] of `epoch` with the policy above.  Returns 0 when
 * every sequence was delivered or reported lost through `loss` (stats say
 * which), TB_ETIMEDOUT when the deadline passed first (*next is the first
 * sequence neither delivered nor reported), TB_ESTATE when cancelled or
 * stopped by `fn`, TB_EINVAL for bad arguments.
 */
int tb_recovery_client_fetch(const tb_recovery_client_cfg_t *cfg, uint64_t epoch,
		     uint64_t first, uint64_t last, tb_recovery_client_frame_fn fn,
		     tb_recovery_client_loss_fn loss, void *clientd,
		     tb_recovery_client_stats_t *stats, uint64_t *next);

#endif
