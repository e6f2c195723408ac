/*
 * recovery/server.h - answers recovery-protocol requests (recovery/proto.h)
 * over TCP from the frames a source holds.  Two sources use it: tb-recoveryd
 * (its retransmit store, one source per stream) and the publisher (its
 * retention buffer, publisher.c).
 *
 * Each request is checked in this order and refused with the first reason
 * that applies: malformed (then the connection is closed: the byte stream
 * cannot be trusted after it), rate-limited (per client address, a token
 * bucket; with the retry delay), unknown stream, unauthorised (token
 * compared in constant time), epoch mismatch (with the current epoch), too
 * large (with max_count), too old (with the earliest held), not yet
 * published (with the latest).  A range that is partly published is served
 * up to the latest; the client asks again for the rest.
 *
 * Threads: one accept thread, one thread per connection (at most
 * max_clients; more are refused at accept).  The source's callbacks are
 * called from the connection threads, concurrently: they must be
 * thread-safe.  tb_recovery_server_open/close from any one thread.
 */
#ifndef TB_RECOVERY_SERVER_H
#define TB_RECOVERY_SERVER_H

#include "bus/recovery/proto.h"
#include "bus/recovery/store.h"
#include <tickbus/tickbus.h>

#include <stdint.h>

typedef struct tb_recovery_server_source {
	uint32_t stream_id;
	const char *token;
	/* The epoch served and the range held ([0, 0] when none yet). */
	void (*bounds)(void *sd, uint64_t *epoch, uint64_t *first,
		       uint64_t *last);
	/* Up to `max` frames from `first`, as tb_store_read: a count, or
	 * TB_STORE_TOO_OLD / TB_STORE_NOT_YET or a TB_E* code. */
	int (*read)(void *sd, uint64_t first, int max, tb_store_read_fn fn,
		    void *clientd);
	void *sd;
} tb_recovery_server_source_t;

typedef struct tb_recovery_server_cfg {
	tb_endpoint_t listen;   /* port 0: any free port (tb_recovery_server_port) */
	uint32_t max_count;     /* frames per request; default COUNT_MAX */
	uint32_t rate;          /* requests per second per client address;
				   0 = unlimited (default) */
	uint32_t burst;         /* requests allowed at once; default 2*rate */
	uint32_t io_timeout_ms; /* idle connection, stalled reader; 10000 */
	int max_clients;        /* connections at once; default 64 */
} tb_recovery_server_cfg_t;

typedef struct tb_recovery_server_stats {
	uint64_t connections;
	uint64_t requests;
	uint64_t served;     /* requests answered with frames */
	uint64_t frames;     /* frames sent */
	uint64_t rejects[TB_RECOVERY_PROTO_REJ_MAX + 1]; /* by reason */
} tb_recovery_server_stats_t;

typedef struct tb_rsrv tb_recovery_server_t;

void tb_recovery_server_cfg_init(tb_recovery_server_cfg_t *cfg);

/* Listens on cfg->listen and serves the `n` sources (copied; their
 * callbacks and `sd` must outlive the server).  Returns 0 or a TB_E* code
 * with a message (address in use, bad address). */
int tb_recovery_server_open(tb_recovery_server_t **srv, const tb_recovery_server_cfg_t *cfg,
		 const tb_recovery_server_source_t *src, int n);
/* The port it listens on. */
uint16_t tb_recovery_server_port(const tb_recovery_server_t *srv);
void tb_recovery_server_stats(const tb_recovery_server_t *srv, tb_recovery_server_stats_t *st);
/* Stops accepting, ends every connection, waits for its threads, frees.
 * NULL is a no-op. */
void tb_recovery_server_close(tb_recovery_server_t *srv);

#endif
